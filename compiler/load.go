package compiler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/build"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/token"
	cuejson "cuelang.org/go/encoding/json"
	cueyaml "cuelang.org/go/encoding/yaml"

	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/schema"
)

// Declarations is the compile set: every policy declared by the loaded
// sources, sorted by name.
type Declarations struct {
	Policies []*Policy
	// Harnesses are the declared HarnessSpecs, validated against the
	// schema and sorted by name; package harness compiles them.
	Harnesses []*Harness
	// Tests are the declared decision tests, in source order.
	Tests []*TestCase
	// Properties are the declared properties (polc prove), in source
	// order.
	Properties []*PropertyDecl
	values     []source
	files      []string
	l          *loader
}

// source is one loaded package or data file. tests holds its test lists
// when the package's files each declare their own (splitLists); nil: the
// source's tests field, if any. properties likewise.
type source struct {
	v          cue.Value
	tests      []cue.Value
	properties []cue.Value
}

// Lookup returns the policy named name, or nil.
func (d *Declarations) Lookup(name string) *Policy {
	i, ok := slices.BinarySearchFunc(d.Policies, name, func(p *Policy, n string) int { return strings.Compare(p.Name, n) })
	if !ok {
		return nil
	}
	return d.Policies[i]
}

// LookupHarness returns the harness named name, or nil.
func (d *Declarations) LookupHarness(name string) *Harness {
	i, ok := slices.BinarySearchFunc(d.Harnesses, name, func(h *Harness, n string) int { return strings.Compare(h.Name, n) })
	if !ok {
		return nil
	}
	return d.Harnesses[i]
}

func (d *Declarations) names() string {
	var names []string
	for _, p := range d.Policies {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "empty"
	}
	return strings.Join(names, ", ")
}

// topLevelFields are the regular fields a declaration file may have.
var topLevelFields = []string{"harnesses", "policies", "properties", "tests"}

// policyName is the grammar of policy names (keys under `policies`); names
// become file names, so nothing else is accepted.
var policyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// uuidForm is the form of a UUID, in either case.
var uuidForm = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

// looksLikeUUID reports whether a policy name has the form of a policy_id.
// Such a name is refused: a Rego query and the bundle's index take "a
// name or a policy_id", so a policy named like another's id would be
// decided in its place.
func looksLikeUUID(name string) bool { return uuidForm.MatchString(name) }

// loader holds the state of one Load call.
type loader struct {
	cfg     Config
	ctx     *cue.Context
	schema  cue.Value // the compiled schema with `in`/`out` wiring
	tschema cue.Value // the same for #Test
	pschema cue.Value // the same for #Property
	diags   diag.List
}

// Load reads CUE files, directories (the CUE package in the directory) and
// JSON or YAML declaration files, validates every policy against the
// embedded schema and returns the compile set. Problems with the input files
// themselves (missing, unreadable) have code io_error; everything else is a
// policy finding.
func Load(cfg Config, paths []string) (*Declarations, diag.List) {
	d, diags := loadSources(cfg.withDefaults(), paths)
	if diags.HasErrors() {
		return d, diags
	}
	return d, append(diags, d.validate()...)
}

// loadSources is the load stage: it parses every input into CUE values.
func loadSources(cfg Config, paths []string) (*Declarations, diag.List) {
	l := &loader{cfg: cfg, ctx: cuecontext.New()}
	l.schema = l.ctx.CompileString(schema.Declarations()+"\nin: _\nout: #PermissionPolicy & in\nhin: _\nhout: #HarnessSpec & hin\n", cue.Filename(schema.PolicyFile))
	l.tschema = l.ctx.CompileString(schema.Declarations()+"\nin: _\nout: #Test & in\n", cue.Filename(schema.PolicyFile))
	l.pschema = l.ctx.CompileString(schema.Declarations()+"\nin: _\nout: #Property & in\n", cue.Filename(schema.PolicyFile))
	for _, v := range []cue.Value{l.schema, l.tschema, l.pschema} {
		if err := v.Err(); err != nil {
			panic("polc: embedded schema does not compile: " + err.Error())
		}
	}
	decls := &Declarations{l: l}
	var cueFiles []string
	badCUE := false // a named .cue file is not text
	for _, p := range paths {
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(cfg.Dir, p)
		}
		fi, err := os.Stat(abs)
		if err != nil {
			l.diags.Add(diag.Pos{File: diag.Rel(cfg.Dir, abs)}, diag.CodeIO, "cannot read: %v", unwrapPathErr(err))
			continue
		}
		switch ext := strings.ToLower(filepath.Ext(abs)); {
		case fi.IsDir():
			if l.noCUEFiles(abs) {
				break
			}
			// The directory is the package's root: CUE reads a directory
			// argument outside its Dir as a non-canonical import path.
			decls.values = append(decls.values, l.loadCUE(abs, []string{"."})...)
		case ext == ".cue":
			if l.textFile(abs) {
				cueFiles = append(cueFiles, abs)
			} else {
				badCUE = true
			}
		case ext == ".json" || ext == ".yaml" || ext == ".yml":
			if v, ok := l.loadData(abs); ok {
				decls.values = append(decls.values, source{v: v})
			}
		default:
			l.diags.Add(diag.Pos{File: diag.Rel(cfg.Dir, abs)}, diag.CodeIO, "unsupported file type %q (want .cue, .json, .yaml or .yml, or a directory)", ext)
		}
		decls.files = append(decls.files, diag.Rel(cfg.Dir, abs))
	}
	if len(cueFiles) > 0 && !badCUE {
		// The named files are one package: without the file refused, CUE
		// would load a part of it as if it were all.
		decls.values = append(decls.values, l.loadCUE(cfg.Dir, cueFiles)...)
	}
	diags := l.diags
	l.diags = nil
	return decls, diags
}

// validate is the validate stage: it checks the top level of every source
// and validates each policy against the schema.
func (d *Declarations) validate() diag.List {
	l := d.l
	seen := map[string]*Policy{}
	seenH := map[string]*Harness{}
	for _, src := range d.values {
		v := src.v
		if src.tests == nil {
			d.Tests = append(d.Tests, l.tests(v.LookupPath(cue.ParsePath("tests")))...)
		}
		for _, tv := range src.tests {
			d.Tests = append(d.Tests, l.tests(tv)...)
		}
		if src.properties == nil {
			d.Properties = append(d.Properties, l.properties(v.LookupPath(cue.ParsePath("properties")))...)
		}
		for _, pv := range src.properties {
			d.Properties = append(d.Properties, l.properties(pv)...)
		}
		policies, harnesses := l.declarations(v)
		for _, h := range harnesses {
			if prev, dup := seenH[h.Name]; dup {
				l.diags.Add(h.Pos, diag.CodeDuplicatePolicy, "harness %q is declared twice (also at %s)", h.Name, prev.Pos)
				continue
			}
			seenH[h.Name] = h
			d.Harnesses = append(d.Harnesses, h)
		}
		for _, p := range policies {
			if prev, dup := seen[p.Name]; dup {
				l.diags.Add(p.Pos, diag.CodeDuplicatePolicy, "policy %q is declared twice (also at %s)", p.Name, prev.Pos)
				continue
			}
			seen[p.Name] = p
			d.Policies = append(d.Policies, p)
		}
	}
	slices.SortFunc(d.Policies, func(a, b *Policy) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(d.Harnesses, func(a, b *Harness) int { return strings.Compare(a.Name, b.Name) })
	diags := l.diags
	l.diags = nil
	return diags
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// noCUEFiles reports a directory without CUE files, and says whether it
// did. CUE's own error names the directory "." and reads as a syntax
// error; an author who passed a directory of JSON or YAML files expected
// them to be read, so the error says how to have them read.
func (l *loader) noCUEFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false // CUE's load reports it
	}
	var data []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".cue":
			if !e.IsDir() {
				return false
			}
		case ".json", ".yaml", ".yml":
			if !e.IsDir() {
				data = append(data, diag.Rel(l.cfg.Dir, filepath.Join(dir, e.Name())))
			}
		}
	}
	rel := diag.Rel(l.cfg.Dir, dir)
	msg := fmt.Sprintf("no CUE files in directory %s: a directory is read as a CUE package; name JSON and YAML declaration files on the command line", rel)
	if len(data) > 0 {
		msg += " (" + strings.Join(data, " ") + ")"
	}
	l.diags.Add(diag.Pos{File: rel}, diag.CodeIO, "%s", msg)
	return true
}

func (l *loader) loadCUE(dir string, args []string) []source {
	if slices.Equal(args, []string{"."}) && !l.textDir(dir) {
		return nil
	}
	insts := load.Instances(args, &load.Config{Dir: dir})
	var out []source
	seen := map[string]bool{}
	for _, inst := range insts {
		if !l.textImports(inst, seen) {
			continue
		}
		if inst.Err != nil {
			l.addCUEErrors(inst.Err, "", diag.CodeSyntax)
			continue
		}
		if l.splitDeclarations(inst.Files) {
			continue
		}
		labels := splitLists(inst.Files, "tests")
		plabels := splitLists(inst.Files, "properties")
		sized := true
		for _, f := range inst.Files {
			sized = l.literalSizes(f) && sized
		}
		if !sized {
			continue
		}
		v := l.ctx.BuildInstance(inst)
		if err := v.Err(); err != nil {
			l.addCUEErrors(err, "", diag.CodeSchemaViolation)
			continue
		}
		src := source{v: v}
		for _, label := range labels {
			src.tests = append(src.tests, hiddenField(v, label))
		}
		for _, label := range plabels {
			src.properties = append(src.properties, hiddenField(v, label))
		}
		out = append(out, src)
	}
	return out
}

// splitDeclarations reports each policy or harness declared in more than
// one place of a CUE package (in two files, or twice in one), and tests
// declared in more than one place, and says whether it found any. CUE
// unifies such declarations: a second declaration of a policy silently
// adds its fields to the first (a grant in a file nobody reviews as part
// of that policy), conflicting ones fail as a "conflicting values" error
// that names one place, and two test lists unify element by element.
// Only literal labels count: a pattern constraint such as
// `policies: [string]: {tenants: ["acme"]}` declares no policy.
func (l *loader) splitDeclarations(files []*ast.File) bool {
	type place struct {
		what string // "policy \"a\"", "harness \"h\"" or "tests <file>"
		pos  token.Pos
	}
	var places []place
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.Field)
			if !ok {
				continue
			}
			top, _, err := ast.LabelName(fd.Label)
			if err != nil {
				continue
			}
			switch top {
			case "tests", "properties":
				// Each file may declare its own list (splitLists).
				places = append(places, place{top + " " + f.Filename, fd.Label.Pos()})
			case "policies", "harnesses":
				st, ok := fd.Value.(*ast.StructLit)
				if !ok {
					continue
				}
				kind := "policy"
				if top == "harnesses" {
					kind = "harness"
				}
				for _, e := range st.Elts {
					ef, ok := e.(*ast.Field)
					if !ok {
						continue
					}
					if name, _, err := ast.LabelName(ef.Label); err == nil {
						places = append(places, place{fmt.Sprintf("%s %q", kind, name), ef.Label.Pos()})
					}
				}
			}
		}
	}
	first := map[string]token.Pos{}
	found := false
	for _, p := range places {
		prev, seen := first[p.what]
		if !seen {
			first[p.what] = p.pos
			continue
		}
		found = true
		if list, _, _ := strings.Cut(p.what, " "); list == "tests" || list == "properties" {
			l.diags.Add(l.pos(p.pos), diag.CodeDuplicatePolicy, "%s are declared twice in one file (also at %s): CUE would unify the lists element by element; keep a file's %s in one list", list, l.pos(prev), list)
			continue
		}
		l.diags.Add(l.pos(p.pos), diag.CodeDuplicatePolicy, "%s is declared in more than one place (also at %s): CUE would merge the declarations silently; declare each policy once", p.what, l.pos(prev))
	}
	return found
}

// splitLists gives each file's list named list (tests, properties) of a
// package whose files declare more than one its own hidden label, and
// returns the labels in file order. CUE would unify the lists element by
// element (two files of a directory that each declare their cases would
// fail or, worse, merge them); renamed, each file's list is read on its
// own (hiddenField), so a directory of test files runs as the files do one
// by one. A package with one such list is left as it is.
func splitLists(files []*ast.File, list string) []string {
	var fields []*ast.Field
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.Field); ok {
				if name, _, err := ast.LabelName(fd.Label); err == nil && name == list {
					fields = append(fields, fd)
				}
			}
		}
	}
	if len(fields) < 2 {
		return nil
	}
	var labels []string
	for i, fd := range fields {
		label := fmt.Sprintf("_polc_%s_%d", list, i)
		id := ast.NewIdent(label)
		ast.SetPos(id, fd.Label.Pos())
		fd.Label = id
		labels = append(labels, label)
	}
	return labels
}

// hiddenField is the top-level hidden field label of v.
func hiddenField(v cue.Value, label string) cue.Value {
	it, err := v.Fields(cue.Hidden(true))
	if err != nil {
		return cue.Value{}
	}
	for it.Next() {
		if it.Selector().String() == label {
			return it.Value()
		}
	}
	return cue.Value{}
}

func (l *loader) loadData(abs string) (cue.Value, bool) {
	data, err := os.ReadFile(abs)
	if err != nil {
		l.diags.Add(diag.Pos{File: diag.Rel(l.cfg.Dir, abs)}, diag.CodeIO, "cannot read: %v", unwrapPathErr(err))
		return cue.Value{}, false
	}
	name := diag.Rel(l.cfg.Dir, abs)
	if !l.text(name, data) {
		return cue.Value{}, false
	}
	var v cue.Value
	if strings.HasSuffix(abs, ".json") {
		// Checked before CUE sees it, in one linear pass that stops at
		// the first problem and says where it is: CUE's parser reports
		// every bad byte and de-duplicates each new error against all
		// the earlier ones (quadratic: 64 KiB of random bytes took
		// seconds, 1 MiB did not finish), then says only "invalid JSON
		// for file". The check also refuses what JSON's I-JSON profile
		// does, as every other JSON input of polc: duplicate member
		// names (which CUE would unify silently), invalid UTF-8, lone
		// surrogates and numbers beyond a double.
		if _, err := jcs.Check(data); err != nil {
			var se *jcs.SyntaxError
			if errors.As(err, &se) {
				l.diags.Add(diag.Pos{File: name, Line: se.Line, Col: se.Col}, diag.CodeSyntax, "%s", se.Msg)
			} else {
				l.diags.Add(diag.Pos{File: name}, diag.CodeSyntax, "%v", err)
			}
			return cue.Value{}, false
		}
		var expr ast.Expr
		expr, err = extractJSON(name, data)
		if err == nil {
			if !l.literalSizes(expr) {
				return cue.Value{}, false
			}
			v = l.ctx.BuildExpr(expr)
		}
	} else {
		var f *ast.File
		f, err = cueyaml.Extract(name, data)
		if err == nil {
			if !l.literalSizes(f) {
				return cue.Value{}, false
			}
			v = l.ctx.BuildFile(f)
		} else if line, msg, ok := SplitLineError(err, name); ok && line > 0 {
			l.diags.Add(diag.Pos{File: name, Line: YAMLProblemLine(name, data, line, msg)}, diag.CodeSyntax, "%s", msg)
			return cue.Value{}, false
		}
	}
	if err != nil {
		l.addCUEErrors(err, name, diag.CodeSyntax)
		return cue.Value{}, false
	}
	if err := v.Err(); err != nil {
		l.addCUEErrors(err, name, diag.CodeSyntax)
		return cue.Value{}, false
	}
	return v, true
}

// Declaration files must be UTF-8 text without NUL bytes. CUE reads an
// invalid byte in a string or a comment as U+FFFD, silently, so a pattern
// written with one would compile into a snapshot holding another text;
// the JSON and YAML decoders refuse it without saying where. Every source
// is checked before it is parsed, at the line and column (in bytes) of its
// first bad byte.

// text reports the first byte of data, the file name, that makes it no
// text, and says whether there was none.
func (l *loader) text(name string, data []byte) bool {
	line, col, problem := NotText(data)
	if problem == "" {
		return true
	}
	l.diags.Add(diag.Pos{File: name, Line: line, Col: col}, diag.CodeInvalidEncoding, "%s: a declaration file must be UTF-8 text without NUL bytes", problem)
	return false
}

// NotText returns the line and column (1-based; the column counts bytes)
// of the first byte of data that makes it no text -- a NUL, or a byte
// that begins no valid UTF-8 sequence -- and what is wrong there, or ""
// when data is UTF-8 text. Declarations and `polc run` scenarios are
// checked with it before any decoder reads them (decoders replace such
// bytes with U+FFFD or refuse them without a position).
func NotText(data []byte) (line, col int, problem string) {
	off, problem := firstBadByte(data)
	if problem == "" {
		return 0, 0, ""
	}
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	col = 1 + off - (bytes.LastIndexByte(data[:off], '\n') + 1)
	return line, col, problem
}

// textFile is text for the file at abs; a file it cannot read is left to
// the loader, which reports it.
func (l *loader) textFile(abs string) bool {
	data, err := os.ReadFile(abs)
	if err != nil {
		return true
	}
	return l.text(diag.Rel(l.cfg.Dir, abs), data)
}

// textDir is textFile for every CUE file of the package in dir (those CUE
// reads: not hidden, not beginning with '_'), and says whether all are
// text.
func (l *loader) textDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true // CUE's load reports it
	}
	ok := true
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.ToLower(filepath.Ext(n)) != ".cue" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
			continue
		}
		if !l.textFile(filepath.Join(dir, n)) {
			ok = false
		}
	}
	return ok
}

// textImports is textFile for the files of every package inst imports
// (transitively; seen holds the directories already checked), which CUE
// read without polc seeing them first.
func (l *loader) textImports(inst *build.Instance, seen map[string]bool) bool {
	ok := true
	for _, imp := range inst.Imports {
		if seen[imp.Dir] {
			continue
		}
		seen[imp.Dir] = true
		for _, f := range imp.BuildFiles {
			if !l.textFile(f.Filename) {
				ok = false
			}
		}
		if !l.textImports(imp, seen) {
			ok = false
		}
	}
	return ok
}

// firstBadByte returns the offset of the first NUL byte of data, or of
// the first byte that begins no valid UTF-8 sequence, and what is wrong
// there ("" when nothing is).
func firstBadByte(data []byte) (int, string) {
	for i := 0; i < len(data); {
		c := data[i]
		if c < utf8.RuneSelf {
			if c == 0 {
				return i, "NUL byte"
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i, fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", c)
		}
		i += size
	}
	return 0, ""
}

// pos converts a CUE position to a diagnostic position.
func (l *loader) pos(p token.Pos) diag.Pos {
	if !p.IsValid() {
		return diag.Pos{}
	}
	return diag.Pos{File: diag.Rel(l.cfg.Dir, p.Filename()), Line: p.Line(), Col: p.Column()}
}

// userPos picks the first position of err that is in the author's files
// rather than in the embedded schema.
func (l *loader) userPos(e cueerrors.Error) diag.Pos {
	for _, p := range append([]token.Pos{e.Position()}, e.InputPositions()...) {
		if p.IsValid() && p.Filename() != schema.PolicyFile {
			return l.pos(p)
		}
	}
	return diag.Pos{}
}

func (l *loader) addCUEErrors(err error, file, code string) {
	var ce cueerrors.Error
	if !errors.As(err, &ce) {
		// The YAML decoder's errors are plain "file:line: message".
		line, msg, ok := SplitLineError(err, file)
		if !ok {
			msg = err.Error()
		}
		l.diags.Add(diag.Pos{File: file, Line: line}, code, "%s", msg)
		return
	}
	for _, e := range cueerrors.Errors(err) {
		pos := l.userPos(e)
		if pos.File == "" {
			pos.File = file
		}
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		if path := strings.Join(e.Path(), "."); path != "" {
			msg = path + ": " + msg
		}
		l.diags.Add(pos, code, "%s", msg)
	}
}

// Bounds on the literals of a source, checked on its syntax tree before
// CUE evaluates it. CUE's evaluator finds each new element or field of a
// list or struct by searching the ones before it, so one literal of n
// elements costs n²: a JSON array of 64,000 zeros (128 KiB) took half a
// minute, one of a MiB would take hours. Bounding each literal and the
// whole source keeps evaluation linear in the input with a small
// constant; real declarations are far below both.
const (
	// MaxLiteralElements bounds the elements of one list or the fields of
	// one struct.
	MaxLiteralElements = 10_000
	// MaxSourceElements bounds the list elements and fields of one
	// source file, all literals together.
	MaxSourceElements = 100_000
)

// literalSizes reports (as schema_violation, at the literal) a list or
// struct literal of n beyond MaxLiteralElements, or a source beyond
// MaxSourceElements, and says whether n was within both.
func (l *loader) literalSizes(n ast.Node) bool {
	pos, msg := LiteralSizes(n)
	if msg != "" {
		l.diags.Add(l.pos(pos), diag.CodeSchemaViolation, "%s", msg)
	}
	return msg == ""
}

// LiteralSizes checks the syntax tree n (of a CUE, JSON or YAML source:
// declarations, a polc run scenario) against MaxLiteralElements and
// MaxSourceElements before it is evaluated. It returns the position of
// the first literal beyond them and why, or "".
func LiteralSizes(n ast.Node) (token.Pos, string) {
	total := 0
	var at token.Pos
	var msg string
	ast.Walk(n, func(n ast.Node) bool {
		if msg != "" {
			return false
		}
		var elems int
		var what string
		switch x := n.(type) {
		case *ast.ListLit:
			elems, what = len(x.Elts), "list"
		case *ast.StructLit:
			elems, what = len(x.Elts), "struct"
		case *ast.File:
			elems, what = len(x.Decls), "file"
		default:
			return true
		}
		total += elems
		switch {
		case elems > MaxLiteralElements:
			at, msg = n.Pos(), fmt.Sprintf("a %s of %d elements: at most %d are accepted in one list or struct", what, elems, MaxLiteralElements)
		case total > MaxSourceElements:
			at, msg = n.Pos(), fmt.Sprintf("more than %d list elements and fields in one file (here the count passes it)", MaxSourceElements)
		}
		return msg == ""
	}, nil)
	return at, msg
}

// extractJSON is CUE's JSON extraction (a variable so that a test can
// count its calls: it must never see JSON that jcs.Check refused).
var extractJSON = cuejson.Extract

// SplitLineError splits an error of the form "file:line: message" or
// "file: message" (the YAML decoder's; an unknown anchor has no line)
// into its line (0 when none) and message; ok is false for any other.
func SplitLineError(err error, file string) (line int, msg string, ok bool) {
	rest, found := strings.CutPrefix(err.Error(), file+":")
	if !found {
		return 0, "", false
	}
	if msg, found := strings.CutPrefix(rest, " "); found {
		// The diagnostic names the file: the message should not again.
		return 0, msg, true
	}
	n, msg, found := strings.Cut(rest, ": ")
	line, perr := strconv.Atoi(n)
	if !found || perr != nil || line <= 0 {
		return 0, "", false
	}
	return line, msg, true
}

// YAMLProblemLine is the line of the token a YAML syntax error is about,
// for YAML declarations and polc run/serve scenarios alike: path is the
// name data was extracted under, line and msg the decoder's error split by
// SplitLineError. The decoder (yaml.v3) reports where the enclosing block began, or the
// line before the problem, so a bad indent on line 12 of an action can be
// reported at line 7, or at line 1 for a top-level key. The problem is on
// the last line of the shortest prefix of the file, in whole lines, that
// fails with the same message; the problem is never above the decoder's
// line less one, so the search starts there. Each try parses the prefix,
// so the search stops after maxYAMLSearch lines, or once the prefixes
// parsed add up to yamlSearchFactor times the file (at least
// minYAMLSearchBytes), keeping the decoder's line: a bound on the number
// of parses alone let a 1 MiB file's error cost 200 parses of it (half a
// minute).
func YAMLProblemLine(path string, data []byte, line int, msg string) int {
	end, parsed := 0, 0
	budget := max(yamlSearchFactor*len(data), minYAMLSearchBytes)
	for n, l := range bytes.SplitAfter(data, []byte("\n")) {
		end += len(l)
		if n+1 < line-1 {
			continue
		}
		if n+1 > line+maxYAMLSearch || parsed+end > budget {
			break
		}
		parsed += end
		_, err := extractYAMLPrefix(path, data[:end])
		if err == nil {
			continue
		}
		if _, m, ok := SplitLineError(err, path); ok && m == msg {
			return n + 1
		}
	}
	return line
}

// extractYAMLPrefix is YAMLProblemLine's parser (a variable so that a
// test can count what it parses).
var extractYAMLPrefix = cueyaml.Extract

// maxYAMLSearch, yamlSearchFactor and minYAMLSearchBytes bound
// YAMLProblemLine's search.
const (
	maxYAMLSearch      = 200
	yamlSearchFactor   = 8
	minYAMLSearchBytes = 4 << 20
)

// declarations checks the top level of one source and validates each
// policy and harness.
func (l *loader) declarations(v cue.Value) ([]*Policy, []*Harness) {
	it, err := v.Fields()
	if err != nil {
		l.diags.Add(l.pos(v.Pos()), diag.CodeSchemaViolation, "a declaration file must be a struct with a `policies` or `harnesses` field")
		return nil, nil
	}
	var out []*Policy
	var harnesses []*Harness
	for it.Next() {
		name := it.Selector().Unquoted()
		if !slices.Contains(topLevelFields, name) {
			l.diags.Add(l.pos(it.Value().Pos()), diag.CodeUnknownField, "unknown top-level field %q (allowed: %s; helpers may be definitions #X or hidden fields _x)", name, strings.Join(topLevelFields, ", "))
			continue
		}
		if name == "tests" || name == "properties" {
			continue // validated by tests() and properties()
		}
		pv := it.Value()
		if s, err := pv.String(); err == nil && s == "inherit" {
			l.diags.Add(l.pos(pv.Pos()), diag.CodeInheritNotAPreset, inheritMsg)
			continue
		}
		pit, err := pv.Fields()
		if err != nil {
			l.diags.Add(l.pos(pv.Pos()), diag.CodeSchemaViolation, "%s must be a struct of name to declaration", name)
			continue
		}
		for pit.Next() {
			if name == "harnesses" {
				if h := l.harness(pit.Selector().Unquoted(), pit.Value()); h != nil {
					harnesses = append(harnesses, h)
				}
				continue
			}
			if p := l.policy(pit.Selector().Unquoted(), pit.Value()); p != nil {
				out = append(out, p)
			}
		}
	}
	return out, harnesses
}

const inheritMsg = `"inherit" is not a preset or a policy: to inherit, set extends: "<parent policy>" and leave the fields you want inherited unset`

// modeFields are fields whose value is a mode or section, where a literal
// "inherit" shows the author meant inheritance.
var inheritTrap = map[string]bool{
	"extends": true, "actions": true, "filesystem": true, "network": true, "subprocess": true,
	"mcp": true, "environment": true, "secrets": true, "budgets": true, "gates": true,
	"mode": true, "shell": true, "allow": true, "deny": true, "approve": true, "read": true,
	"write": true, "execute": true, "inject": true, "servers": true, "principals": true,
	"tenants": true, "exposure": true,
}

func (l *loader) policy(name string, v cue.Value) *Policy {
	p := &Policy{Name: name, Pos: l.pos(v.Pos()), Value: v, positions: map[string]diag.Pos{}}
	if !policyName.MatchString(name) {
		l.diags.Add(p.Pos, diag.CodeInvalidValue, "policy name %q: want letters, digits, '_', '.' or '-', starting with a letter or digit", name)
		return nil
	}
	if looksLikeUUID(name) {
		l.diags.Add(p.Pos, diag.CodeInvalidValue, "policy name %q has the form of a UUID, which policy ids have: a name must not be mistaken for an id (set the id with uuid and choose another name)", name)
		return nil
	}
	if s, err := v.String(); err == nil && s == "inherit" {
		l.diags.Add(p.Pos, diag.CodeInheritNotAPreset, "policy %q: %s", name, inheritMsg)
		return nil
	}
	if v.Kind() != cue.StructKind {
		l.diags.Add(p.Pos, diag.CodeSchemaViolation, "policy %q must be a struct", name)
		return nil
	}
	if !l.check(policyKind, name, v, p.positions, p.Pos) {
		return nil
	}
	d, err := decodeDecl(v)
	if err != nil {
		l.diags.Add(p.Pos, diag.CodeSchemaViolation, "policy %q: %v", name, err)
		return nil
	}
	if d.Name != nil && *d.Name != name {
		l.diags.Add(p.PosOf("name"), diag.CodeNameMismatch, "policy %q declares name %q; the name is the key under `policies`", name, *d.Name)
		return nil
	}
	p.Decl = d
	return p
}

// declKind says which schema definition a declaration is checked against.
type declKind struct {
	noun    string // "policy" or "harness", in messages
	def     string // the schema definition
	in, out string // the schema's input and output fields
}

var (
	policyKind  = declKind{noun: "policy", def: "#PermissionPolicy", in: "in", out: "out"}
	harnessKind = declKind{noun: "harness", def: "#HarnessSpec", in: "hin", out: "hout"}
)

// check indexes positions and validates one declaration against its schema
// definition, reporting every problem with a position. It reports whether
// the declaration is valid.
func (l *loader) check(k declKind, name string, v cue.Value, positions map[string]diag.Pos, at diag.Pos) bool {
	posOf := func(path string) diag.Pos { return posIn(positions, path, at) }
	before := len(l.diags)
	l.index(k, name, positions, v, "")
	if len(l.diags) > before {
		return false // "inherit" traps: schema errors would only repeat them
	}
	out := l.schema.FillPath(cue.ParsePath(k.in), v).LookupPath(cue.ParsePath(k.out))
	reported := map[string]bool{}
	if err := out.Validate(cue.Concrete(true)); err != nil {
		for _, e := range cueerrors.Errors(err) {
			path := declPath(e.Path())
			format, args := e.Msg()
			msg := fmt.Sprintf(format, args...)
			pos := l.userPos(e)
			if pos.File == "" {
				pos = posOf(path)
			}
			switch {
			case msg == "field not allowed":
				// With other errors in the declaration, CUE may report the
				// fields inside an unknown one (netwrk.mode) instead of the
				// key the author typed: report that key, once.
				if root := l.unknownRoot(k, path); root != path {
					path, pos = root, posOf(root)
				}
				if reported[path] {
					continue
				}
				l.diags.Add(pos, diag.CodeUnknownField, "%s %q: unknown field %q%s", k.noun, name, path, l.allowedHint(k, path))
			case strings.Contains(msg, "required but not present"):
				l.diags.Add(posOf(parentPath(path)), diag.CodeSchemaViolation, "%s %q: missing required field %q", k.noun, name, path)
			default:
				if reported[path] {
					continue
				}
				code, desc := l.describe(k, v, path, msg)
				l.diags.Add(pos, code, "%s %q: %s: %s", k.noun, name, path, desc)
			}
			reported[path] = true
		}
	}
	l.requireFields(k, name, posOf, out, "", reported)
	return len(l.diags) == before
}

// harness validates one harness declaration against #HarnessSpec.
func (l *loader) harness(name string, v cue.Value) *Harness {
	h := &Harness{Name: name, Pos: l.pos(v.Pos()), Value: v, positions: map[string]diag.Pos{}}
	if !policyName.MatchString(name) {
		l.diags.Add(h.Pos, diag.CodeInvalidValue, "harness name %q: want letters, digits, '_', '.' or '-', starting with a letter or digit", name)
		return nil
	}
	if v.Kind() != cue.StructKind {
		l.diags.Add(h.Pos, diag.CodeSchemaViolation, "harness %q must be a struct", name)
		return nil
	}
	if !l.check(harnessKind, name, v, h.positions, h.Pos) {
		return nil
	}
	raw, err := v.MarshalJSON()
	if err != nil {
		l.diags.Add(h.Pos, diag.CodeSchemaViolation, "harness %q: %v", name, err)
		return nil
	}
	h.JSON = raw
	return h
}

// index records the position of every field and list element of a
// declaration and reports literal "inherit" where a section, mode or parent
// is expected.
func (l *loader) index(k declKind, name string, positions map[string]diag.Pos, v cue.Value, path string) {
	switch v.Kind() {
	case cue.StructKind:
		it, _ := v.Fields()
		for it.Next() {
			key := it.Selector().Unquoted()
			sub := joinPath(path, key)
			positions[sub] = l.pos(it.Value().Pos())
			if s, err := it.Value().String(); err == nil && s == "inherit" && inheritTrap[key] {
				l.diags.Add(positions[sub], diag.CodeInheritNotAPreset, "%s %q: %s: %s", k.noun, name, sub, inheritMsg)
			}
			if strings.ContainsRune(key, 0) {
				l.diags.Add(positions[sub], diag.CodeInvalidEncoding, "%s %q: key %q: a NUL character (\\u0000); declared keys and strings must not hold one", k.noun, name, sub)
			}
			l.index(k, name, positions, it.Value(), sub)
		}
	case cue.ListKind:
		it, _ := v.List()
		for i := 0; it.Next(); i++ {
			sub := fmt.Sprintf("%s[%d]", path, i)
			positions[sub] = l.pos(it.Value().Pos())
			l.index(k, name, positions, it.Value(), sub)
		}
	case cue.StringKind:
		// An escape (\u0000 in CUE, JSON or YAML, \0 in YAML) puts a NUL
		// where the source has none: no program takes it in an argument or
		// a path, and the native matcher joins argv words with it.
		if s, err := v.String(); err == nil && strings.ContainsRune(s, 0) {
			l.diags.Add(positions[path], diag.CodeInvalidEncoding, "%s %q: %s: a NUL character (\\u0000); declared keys and strings must not hold one", k.noun, name, path)
		}
	}
}

// requireFields reports required fields (`name!:`) that are absent. CUE's
// Validate does not always report them once another error has been found.
func (l *loader) requireFields(k declKind, name string, posOf func(string) diag.Pos, v cue.Value, path string, reported map[string]bool) {
	switch v.IncompleteKind() {
	case cue.StructKind:
		it, err := v.Fields(cue.Optional(true))
		if err != nil {
			return
		}
		for it.Next() {
			sel := it.Selector()
			sub := joinPath(path, sel.Unquoted())
			switch sel.ConstraintType() {
			case cue.RequiredConstraint:
				if !reported[sub] {
					l.diags.Add(posOf(path), diag.CodeSchemaViolation, "%s %q: missing required field %q", k.noun, name, sub)
					reported[sub] = true
				}
			case cue.OptionalConstraint:
			default:
				l.requireFields(k, name, posOf, it.Value(), sub, reported)
			}
		}
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return
		}
		for i := 0; it.Next(); i++ {
			l.requireFields(k, name, posOf, it.Value(), fmt.Sprintf("%s[%d]", path, i), reported)
		}
	}
}

// describe improves CUE's message for the common cases: a value outside an
// enumeration (mode: "sometimes" is not one of "deny", "allowlist", "allow"),
// a value of the wrong type (want string, got 2), and a value that fails a
// disjunction or a duration or time format, where the type alone would not
// say what is wrong ("1d" is a string): those say what the value must be.
// It returns the code too: a duration or time of the right type that polc
// cannot use is invalid_value whether the schema's format or polc's parser
// refuses it (docs/errors.md), so that "1d" and "0s" get the same code.
func (l *loader) describe(k declKind, raw cue.Value, path, msg string) (string, string) {
	sv := l.schemaAt(k, path)
	gotV := raw.LookupPath(cuePath(path))
	got, _ := gotV.MarshalJSON()
	op, args := sv.Expr()
	timeLike := ""
	if w, ok := fieldWants[k.def+" "+indexFree.ReplaceAllString(path, "[]")]; ok {
		timeLike = w
	} else if def := defRef(op, args); def == "#Duration" || def == "#Time" {
		timeLike = defWants[def]
	}
	if timeLike != "" && len(got) > 0 {
		if gotV.Kind()&sv.IncompleteKind() != 0 {
			return diag.CodeInvalidValue, fmt.Sprintf("want %s, got %s", timeLike, got)
		}
		return diag.CodeSchemaViolation, fmt.Sprintf("want %s, got %s", timeLike, got)
	}
	if def := defRef(op, args); def != "" {
		// A reference to a definition (#ToolID): describe the definition.
		op, args = l.schema.LookupPath(cue.ParsePath(def)).Expr()
	}
	op, args = untop(op, args)
	if op == cue.OrOp {
		var alts []string
		for _, a := range args {
			if s, err := a.String(); err == nil {
				alts = append(alts, strconv.Quote(s))
			}
		}
		if len(alts) == len(args) && len(got) > 0 {
			return diag.CodeSchemaViolation, fmt.Sprintf("%s is not one of %s", got, strings.Join(alts, ", "))
		}
		if len(got) > 0 {
			// The kinds of the alternatives ((int|string)) would not
			// say why "1d" fails: say what each alternative accepts.
			return diag.CodeSchemaViolation, fmt.Sprintf("want %s, got %s", want(sv), got)
		}
	}
	if (strings.Contains(msg, "mismatched types") || strings.HasSuffix(msg, "empty disjunction:")) && len(got) > 0 {
		return diag.CodeSchemaViolation, fmt.Sprintf("want %s, got %s", sv.IncompleteKind(), got)
	}
	if strings.HasSuffix(msg, "empty disjunction:") {
		return diag.CodeSchemaViolation, "value does not match the schema"
	}
	return diag.CodeSchemaViolation, msg
}

// durationWant is what a #Duration accepts, as authors need to hear it:
// the schema's pattern is Go's duration syntax, and polc refuses zero.
const durationWant = `a duration such as "90s", "1h" or "1h30m" (Go syntax: numbers with units ns, us, ms, s, m or h; more than 0)`

// defWants says what a value of a schema definition must be.
var defWants = map[string]string{
	"#Duration": durationWant,
	"#Time":     `an RFC 3339 time such as "2027-01-01T00:00:00Z" (at most microsecond precision)`,
	"#Name":     `a name of letters, digits, '_', '.' or '-', starting with a letter or digit`,
	"#UUID":     "a lowercase UUID",
	"#Pattern":  "a non-empty pattern",
	"#SafeInt":  "an integer from -9007199254740991 to 9007199254740991",
}

// fieldWants overrides the description where the schema cannot say it: a
// window's integer alternative is a count of microseconds.
var fieldWants = map[string]string{
	"#PermissionPolicy budgets.window": "a positive integer of microseconds (at most 9007199254740991) or " + durationWant,
}

var indexFree = regexp.MustCompile(`\[[0-9]+\]`)

// defRef is the definition an expression refers to (#Duration), or "".
func defRef(op cue.Op, args []cue.Value) string {
	if op != cue.SelectorOp || len(args) != 2 {
		return ""
	}
	if def, err := args[1].String(); err == nil && strings.HasPrefix(def, "#") {
		return def
	}
	return ""
}

// untop drops the `_` of a list element's constraint ([...X] & [_, ...]
// gives X & _), leaving X's expression.
func untop(op cue.Op, args []cue.Value) (cue.Op, []cue.Value) {
	if op != cue.AndOp {
		return op, args
	}
	var rest []cue.Value
	for _, a := range args {
		if a.IncompleteKind() != cue.TopKind {
			rest = append(rest, a)
		}
	}
	if len(rest) != 1 {
		return op, args
	}
	return rest[0].Expr()
}

// want describes what a schema value accepts, alternative by alternative.
func want(v cue.Value) string {
	op, args := untop(v.Expr())
	switch op {
	case cue.OrOp:
		alts := make([]string, len(args))
		for i, a := range args {
			alts[i] = want(a)
		}
		// Commas: an alternative's description may itself say "or".
		return strings.Join(alts, ", or ")
	case cue.SelectorOp:
		if w, ok := defWants[defRef(op, args)]; ok {
			return w
		}
	}
	if v.IsNull() {
		return "null"
	}
	if s, err := v.String(); err == nil {
		return strconv.Quote(s)
	}
	switch t := fmt.Sprint(v); t {
	case "string", "int", "bool":
		return "a " + t
	default:
		return t // CUE syntax: exact, if terse
	}
}

// schemaAt looks a declaration path up in the kind's definition, whose
// fields are optional or required and so need matching selectors.
func (l *loader) schemaAt(k declKind, path string) cue.Value {
	v := l.schema.LookupPath(cue.ParsePath(k.def))
	if path == "" {
		return v
	}
	for _, sel := range cuePath(path).Selectors() {
		if sel.Type() == cue.IndexLabel {
			v = v.LookupPath(cue.MakePath(cue.AnyIndex))
			continue
		}
		if pat := v.LookupPath(cue.MakePath(cue.AnyString)); pat.Exists() && !v.LookupPath(cue.MakePath(sel.Optional())).Exists() {
			v = pat // a pattern constraint ([#Name]: #MCPServerSpec)
			continue
		}
		next := v.LookupPath(cue.MakePath(sel.Optional()))
		if !next.Exists() {
			next = v.LookupPath(cue.MakePath(sel.Required()))
		}
		if !next.Exists() {
			next = v.LookupPath(cue.MakePath(sel))
		}
		v = next
	}
	return v
}

// allowedHint lists the fields allowed next to an unknown one.
func (l *loader) allowedHint(k declKind, path string) string {
	sv := l.schemaAt(k, parentPath(path))
	it, err := sv.Fields(cue.Optional(true))
	if err != nil {
		return ""
	}
	var names []string
	for it.Next() {
		names = append(names, it.Selector().Unquoted())
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return " (allowed: " + strings.Join(names, ", ") + ")"
}

// cuePath converts "network.allow[1]" to a CUE path.
func cuePath(path string) cue.Path {
	var sels []cue.Selector
	for part := range strings.SplitSeq(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			sels = append(sels, cue.Str(name))
		}
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			n, _ := strconv.Atoi(idx)
			sels = append(sels, cue.Index(n))
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return cue.MakePath(sels...)
}

// declPath converts a CUE error path below `out` into a declaration path.
func declPath(elems []string) string {
	if len(elems) > 0 && (elems[0] == "out" || elems[0] == "hout") {
		elems = elems[1:]
	}
	var b strings.Builder
	for _, e := range elems {
		if _, err := strconv.Atoi(e); err == nil {
			fmt.Fprintf(&b, "[%s]", e)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e)
	}
	return b.String()
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// unknownRoot is the shortest prefix of path (a declaration path) that the
// kind's definition does not declare, or path itself when every prefix is
// declared.
func (l *loader) unknownRoot(k declKind, path string) string {
	for i := 0; i < len(path); i++ {
		if path[i] != '.' && path[i] != '[' {
			continue
		}
		if !l.schemaAt(k, path[:i]).Exists() {
			return path[:i]
		}
	}
	return path
}
