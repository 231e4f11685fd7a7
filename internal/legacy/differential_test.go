package legacy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// This file checks Load and Translate end to end against a reference of
// LionAGI written naively from its semantics (docs/legacy.md): generated
// permissions, written out as YAML or JSON text with keys written twice
// and tool names spelled several ways, are read by the reference as
// safe_load, from_dict and __post_init__ read them, and decided by the
// reference check(); polc's translation, where it is made, must decide
// every generated call as the reference does.

// genDocs is how many documents the differential tests generate.
const genDocs = 1000

// pyv is a Python value as safe_load builds it.
type pyv struct {
	kind byte // 's' str, 'b' bool, 'i' int, 'n' None, 'l' list, 'd' dict
	s    string
	i    int64 // a bool's or an int's value
	list []pyv
	dict []pyKV // in Python's order
}

type pyKV struct{ k, v pyv }

func pyStr(s string) pyv { return pyv{kind: 's', s: s} }

// eq is Python's == on the keys the generator writes: True == 1.
func (a pyv) eq(b pyv) bool {
	switch {
	case a.kind == 's' || b.kind == 's':
		return a.kind == b.kind && a.s == b.s
	case a.kind == 'n' || b.kind == 'n':
		return a.kind == b.kind
	}
	return a.i == b.i // bool and int
}

// set is d[k] = v: a key already there keeps its place.
func (a *pyv) set(k, v pyv) {
	for i := range a.dict {
		if a.dict[i].k.eq(k) {
			a.dict[i].v = v
			return
		}
	}
	a.dict = append(a.dict, pyKV{k, v})
}

// get is d.get(k); ok is false when the key is absent.
func (a pyv) get(k string) (pyv, bool) {
	for _, e := range a.dict {
		if e.k.eq(pyStr(k)) {
			return e.v, true
		}
	}
	return pyv{}, false
}

// lit is a scalar as written in YAML, and its value.
type lit struct {
	yaml string
	v    pyv
}

func (l lit) json() string {
	switch l.v.kind {
	case 's':
		b, _ := json.Marshal(l.v.s)
		return string(b)
	case 'b':
		return map[int64]string{0: "false", 1: "true"}[l.v.i]
	case 'i':
		return strconv.FormatInt(l.v.i, 10)
	}
	return "null"
}

func ws(yaml, v string) lit { return lit{yaml, pyStr(v)} }

var (
	yes, no = pyv{kind: 'b', i: 1}, pyv{kind: 'b', i: 0}
	one     = pyv{kind: 'i', i: 1}
	none    = pyv{kind: 'n'}
	// Tool keys: spellings of one tool, YAML 1.1 non-strings, non-ASCII.
	genTools = []lit{ws("bash", "bash"), ws("Bash", "Bash"), ws("BASH_TOOL", "BASH_TOOL"), ws("'bash_tool'", "bash_tool"),
		ws("reader", "reader"), ws("Reader_Tool", "Reader_Tool"), ws(`"reader_tool"`, "reader_tool"), ws("READER", "READER"),
		ws("editor", "editor"), ws("editor_tool", "editor_tool"), ws("search", "search"), ws("context", "context"),
		ws("web", "web"), ws("mcp", "mcp"), ws("'*'", "*"), ws(`"*"`, "*"), ws("'*'", "*"),
		{"on", yes}, ws(`"on"`, "on"), {"No", no}, {"1", one}, {"~", none}, ws("İ", "İ")}
	// Patterns, "*" most often.
	genPatterns = []lit{ws("'*'", "*"), ws(`"*"`, "*"), ws("'*'", "*"), ws(`"**"`, "**"), ws("rm *", "rm *"), ws("git *", "git *"),
		ws(`"*.py"`, "*.py"), ws("x", "x"), {"yes", yes}, {"1", one}, {"null", none}, ws(`"on"`, "on")}
	genModes   = []lit{ws("rules", "rules"), ws("rules", "rules"), ws("allow_all", "allow_all"), ws("'deny_all'", "deny_all"), ws("RULES", "RULES"), ws("Allow_All", "Allow_All"), {"on", yes}}
	genPresets = []lit{ws("read_only", "read_only"), ws("Read_Only", "Read_Only"), ws("safe", "safe"), ws("allow_all", "allow_all"),
		ws("DENY_ALL", "DENY_ALL"), ws("inherit", "inherit"), ws("strict", "strict")}
)

// gnode is a generated value: a scalar, a mapping (keys may repeat) or a
// list of scalars.
type gnode struct {
	lit   *lit
	pairs []gpair
	items []lit
	list  bool
}

type gpair struct {
	key lit
	val gnode
}

// value is the Python value safe_load builds from the node.
func (g gnode) value() pyv {
	switch {
	case g.lit != nil:
		return g.lit.v
	case g.list:
		v := pyv{kind: 'l', list: []pyv{}}
		for _, it := range g.items {
			v.list = append(v.list, it.v)
		}
		return v
	}
	v := pyv{kind: 'd'}
	for _, p := range g.pairs {
		v.set(p.key.v, p.val.value())
	}
	return v
}

func pick(r *rand.Rand, l []lit) lit { return l[r.IntN(len(l))] }

// genDoc draws a document: an AgentSpec (its permissions written once,
// twice or not at all) or the permissions alone; json keeps to what JSON
// can write (string keys).
func genDoc(r *rand.Rand, json bool) gnode {
	// Most keys spell one tool, so that tiers name it twice.
	family := []string{"bash", "reader", "editor"}[r.IntN(3)]
	tool := func() lit {
		for {
			t := pick(r, genTools)
			if r.IntN(3) > 0 && (t.v.kind != 's' || refCanonical(pyLower(t.v.s)) != family) {
				continue
			}
			if !json || t.v.kind == 's' {
				return t
			}
		}
	}
	tier := func() gnode {
		switch r.IntN(12) {
		case 0:
			return gnode{list: true}
		case 1:
			return gnode{lit: &lit{"", none}}
		}
		var g gnode
		for range r.IntN(4) {
			v := gnode{list: true}
			switch r.IntN(10) {
			case 0:
				v = gnode{lit: &lit{"rm", pyStr("rm")}}
			case 1:
				v = gnode{lit: &lit{"", none}}
			default:
				for range r.IntN(3) {
					v.items = append(v.items, pick(r, genPatterns))
				}
			}
			g.pairs = append(g.pairs, gpair{tool(), v})
		}
		return g
	}
	perms := func() gnode {
		switch r.IntN(10) {
		case 0:
			p := pick(r, genPresets)
			return gnode{lit: &p}
		case 1:
			return gnode{lit: &lit{"", none}}
		}
		var g gnode
		if r.IntN(4) > 0 {
			m := genModes[r.IntN(2)] // rules
			g.pairs = append(g.pairs, gpair{ws("mode", "mode"), gnode{lit: &m}})
		}
		keys := []string{"mode", "allow", "allow", "deny", "escalate"}
		for range 1 + r.IntN(4) {
			switch k := keys[r.IntN(len(keys))]; k {
			case "mode":
				m := pick(r, genModes)
				g.pairs = append(g.pairs, gpair{ws(k, k), gnode{lit: &m}})
			default:
				g.pairs = append(g.pairs, gpair{ws(k, k), tier()})
			}
		}
		return g
	}
	if r.IntN(3) == 0 {
		g := perms()
		if g.lit == nil && r.IntN(8) == 0 {
			g.pairs = append(g.pairs, gpair{ws("model", "model"), gnode{lit: &lit{"x", pyStr("x")}}})
		}
		return g
	}
	spec := gnode{pairs: []gpair{{ws("name", "name"), gnode{lit: &lit{"agent", pyStr("agent")}}}}}
	for range []int{0, 1, 1, 1, 1, 1, 2}[r.IntN(7)] {
		spec.pairs = append(spec.pairs, gpair{ws("permissions", "permissions"), perms()})
	}
	spec.pairs = append(spec.pairs, gpair{ws("model", "model"), gnode{lit: &lit{"x", pyStr("x")}}})
	return spec
}

// render writes g as YAML (block, flow or both, at random) or as JSON.
func render(r *rand.Rand, g gnode, json bool) string {
	var b strings.Builder
	var flow func(g gnode)
	scalar := func(l lit) string {
		switch {
		case json:
			return l.json()
		case l.yaml == "":
			return "null"
		}
		return l.yaml
	}
	flow = func(g gnode) {
		switch {
		case g.lit != nil:
			b.WriteString(scalar(*g.lit))
		case g.list:
			b.WriteString("[")
			for i, it := range g.items {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(scalar(it))
			}
			b.WriteString("]")
		default:
			b.WriteString("{")
			for i, p := range g.pairs {
				if i > 0 {
					b.WriteString([]string{", ", ","}[r.IntN(2)])
				}
				b.WriteString(scalar(p.key) + ": ")
				flow(p.val)
			}
			b.WriteString("}")
		}
	}
	var block func(g gnode, indent string)
	block = func(g gnode, indent string) {
		for _, p := range g.pairs {
			b.WriteString(indent + scalar(p.key) + ":")
			switch v := p.val; {
			case v.lit != nil && v.lit.yaml == "" && r.IntN(2) == 0:
				b.WriteString("\n") // an empty value is None
			case v.lit != nil || r.IntN(3) == 0 || len(v.pairs) == 0 && len(v.items) == 0:
				b.WriteString(" ")
				flow(v)
				b.WriteString("\n")
			case v.list:
				b.WriteString("\n")
				for _, it := range v.items {
					b.WriteString(indent + "  - " + scalar(it) + "\n")
				}
			default:
				b.WriteString("\n")
				block(v, indent+"  ")
			}
		}
	}
	if json || g.lit != nil || r.IntN(5) == 0 {
		flow(g)
		b.WriteString("\n")
	} else {
		block(g, "")
	}
	return b.String()
}

// refResult is how the reference reads a document: "policy" (with its
// mode and normalized maps), "fails" (LionAGI cannot load it) or "none"
// (LionAGI installs no policy).
type refResult struct {
	outcome string
	mode    pyv
	tiers   [3]pyv // deny, allow, escalate: dicts of canonical tool → value
}

var refPresets = map[string]string{
	"allow_all": `{"mode": "allow_all"}`,
	"deny_all":  `{"mode": "deny_all"}`,
	"read_only": `{"mode": "rules", "allow": {"reader": ["*"], "search": ["*"], "context": ["*"]}, "deny": {"editor": ["*"], "bash": ["*"]}}`,
	"safe":      `{"mode": "rules", "allow": {"reader": ["*"], "editor": ["*"], "search": ["*"], "context": ["*"]}, "deny": {"bash": ["rm *", "sudo *", "chmod *", "kill *", "mkfs *"]}, "escalate": {"bash": ["*"]}}`,
}

// fromJSON is a preset's value.
func fromJSON(x any) pyv {
	switch x := x.(type) {
	case string:
		return pyStr(x)
	case []any:
		v := pyv{kind: 'l'}
		for _, it := range x {
			v.list = append(v.list, fromJSON(it))
		}
		return v
	case map[string]any:
		v := pyv{kind: 'd'}
		for k, it := range x {
			v.set(pyStr(k), fromJSON(it))
		}
		return v
	}
	panic(x)
}

// pyLower is Python's str.lower on the keys the generator writes.
func pyLower(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.ReplaceAll(s, "İ", "\x00")), "\x00", "i\u0307")
}

// refRead reads a document as LionAGI would (an AgentSpec: its
// permissions key), or, as polc's documented convention, as the
// permissions alone when it has neither a permissions key nor an
// AgentSpec key.
func refRead(doc pyv) refResult {
	perm := doc
	if doc.kind == 'd' {
		if p, ok := doc.get("permissions"); ok {
			perm = p
		} else {
			bare := false
			for _, e := range doc.dict {
				if e.k.kind == 's' && (e.k.s == "role" || e.k.s == "model") {
					return refResult{outcome: "none"} // an AgentSpec without permissions
				}
				if e.k.kind == 's' && (e.k.s == "mode" || e.k.s == "allow" || e.k.s == "deny" || e.k.s == "escalate") {
					bare = true
				}
			}
			if !bare {
				return refResult{outcome: "none"}
			}
		}
	}
	// _resolve_permissions
	switch perm.kind {
	case 'n':
		return refResult{outcome: "none"}
	case 's':
		src, ok := refPresets[pyLower(perm.s)]
		if !ok {
			return refResult{outcome: "fails"}
		}
		var x any
		json.Unmarshal([]byte(src), &x)
		perm = fromJSON(x)
	case 'd':
	default:
		return refResult{outcome: "fails"}
	}
	// from_dict, __post_init__
	res := refResult{outcome: "policy", mode: pyStr("allow_all")}
	if m, ok := perm.get("mode"); ok {
		res.mode = m
	}
	for i, name := range []string{"deny", "allow", "escalate"} {
		rules, ok := perm.get(name)
		if !ok {
			rules = pyv{kind: 'd'}
		}
		if rules.kind != 'd' {
			return refResult{outcome: "fails"} // .items()
		}
		norm := pyv{kind: 'd'}
		for _, e := range rules.dict {
			if e.k.kind != 's' {
				return refResult{outcome: "fails"} // .lower()
			}
			norm.set(pyStr(refCanonical(pyLower(e.k.s))), e.v)
		}
		res.tiers[i] = norm
	}
	return res
}

// refDecide is PermissionPolicy.check on a call, an exception raised in
// it a deny (the hook chain denies on one).
func refDecide(res refResult, tool string, args []kv) Decision {
	if res.mode.kind == 's' && res.mode.s == "allow_all" {
		return Allow
	}
	if res.mode.kind == 's' && res.mode.s == "deny_all" {
		return Deny
	}
	t := refCanonical(tool)
	text, ok := matchString(t, args)
	if !ok {
		return Deny
	}
	for i, d := range []Decision{Deny, Allow, Escalate} {
		get := func(k string) pyv {
			if v, ok := res.tiers[i].get(k); ok {
				return v
			}
			return pyv{kind: 'l'}
		}
		a, b := get(t), get("*")
		var pats []pyv
		switch {
		case a.kind == 'l' && b.kind == 'l':
			pats = append(append(pats, a.list...), b.list...)
		case a.kind == 's' && b.kind == 's':
			for _, c := range a.s + b.s {
				pats = append(pats, pyStr(string(c)))
			}
		default:
			return Deny // TypeError: list + str, None + list, …
		}
		for _, p := range pats {
			if p.kind != 's' {
				return Deny // fnmatch of a pattern that is not a str raises
			}
			if p.s == "*" || fnmatch(text, p.s) || fnmatch(strings.ToLower(text), strings.ToLower(p.s)) {
				return d
			}
		}
	}
	return Deny
}

// matchString is _build_match_string; false when it raises (a bash
// command with a shell-control operator).
func matchString(t string, args []kv) (string, bool) {
	get := func(k string) string {
		for _, a := range args {
			if a.k == k {
				return fmt.Sprint(a.v)
			}
		}
		return ""
	}
	switch t {
	case "bash":
		return get("command"), !shellControl.MatchString(get("command"))
	case "editor":
		return get("file_path"), true
	case "reader":
		return get("path"), true
	case "search":
		return get("pattern") + " " + get("path"), true
	}
	vals := make([]string, len(args))
	for i, a := range args {
		vals[i] = fmt.Sprint(a.v)
	}
	return get("action") + " " + strings.Join(vals, " "), true
}

// loadFailed reports whether Load found an error (not a warning).
func loadFailed(errs []*Error) bool {
	for _, e := range errs {
		if e.Kind != Overridden {
			return true
		}
	}
	return false
}

// collides reports whether the document assigns a permissions key, a
// key of the permissions, or a tool of a tier (by its canonical name)
// twice with different values: where merging the two, or keeping the
// first, would read it otherwise than LionAGI.
func collides(g gnode) bool {
	twice := func(pairs []gpair, canonical bool) bool {
		seen := map[string]string{}
		for _, p := range pairs {
			if p.key.v.kind != 's' {
				continue
			}
			name, val := p.key.v.s, fmt.Sprint(p.val.value())
			if canonical {
				name = refCanonical(pyLower(name))
			}
			if prev, ok := seen[name]; ok && prev != val {
				return true
			}
			seen[name] = val
		}
		return false
	}
	perms := []gnode{g}
	if _, ok := g.value().get("permissions"); ok {
		perms = nil
		for _, p := range g.pairs {
			if p.key.v.s == "permissions" {
				perms = append(perms, p.val)
			}
		}
		if twice(g.pairs, false) {
			return true
		}
	}
	for _, p := range perms {
		if twice(p.pairs, false) {
			return true
		}
		for _, tier := range p.pairs {
			if tier.key.v.s != "mode" && twice(tier.val.pairs, true) {
				return true
			}
		}
	}
	return false
}

// TestImportDecidesAsLionAGIReadsTheFile: for generated permissions files
// (YAML and JSON; keys written twice, tools spelled several ways,
// YAML 1.1 scalars), wherever Load and Translate make a policy, the
// reference reads the file as a policy too and decides every generated
// call exactly as polc's translation does — never wider.
func TestImportDecidesAsLionAGIReadsTheFile(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	translated, refused, calls, colliding := 0, 0, 0, 0
	outcomes := map[string]int{}
	for i := range genDocs {
		asJSON := r.IntN(4) == 0
		g := genDoc(r, asJSON)
		doc := g.value()
		text := render(r, g, asJSON)
		ref := refRead(doc)
		outcomes[ref.outcome]++
		p, errs := Load([]byte(text))
		if loadFailed(errs) {
			refused++
			continue
		}
		decl, terrs := Translate(p, testEsc)
		if len(terrs) > 0 {
			refused++
			continue
		}
		if ref.outcome != "policy" {
			t.Fatalf("document %d:\n%s\npolc translates it, but LionAGI %s", i, text, map[string]string{"fails": "cannot load it", "none": "installs no policy for it"}[ref.outcome])
		}
		translated++
		if collides(g) {
			colliding++
		}
		pol := compileDecl(t, decl)
		for range 40 {
			tool, args, req := randomCall(r)
			want := refDecide(ref, tool, args)
			got, _ := pol.Evaluate(req)
			calls++
			if string(want) != got.Disposition {
				b, _ := json.Marshal(decl["actions"])
				t.Fatalf("document %d:\n%s\ntranslated actions %s\ncall %s %v: LionAGI %s, polc %s %v", i, text, b, tool, args, want, got.Disposition, got.Reasons)
			}
		}
	}
	t.Logf("%d translated (%d with a tool or key assigned twice), %d refused, %d calls agree; LionAGI's readings %v", translated, colliding, refused, calls, outcomes)
	if translated < 150 || colliding < 50 || outcomes["fails"] < 50 || outcomes["none"] < 50 {
		t.Fatalf("too little exercised: %d translated, %d colliding, readings %v", translated, colliding, outcomes)
	}
}

// TestGeneratedDocumentsReadAsPyYAML checks the reference's input: every
// generated text is, to PyYAML's safe_load, the value the generator
// meant (types, values, dict order and last values, non-str keys too).
func TestGeneratedDocumentsReadAsPyYAML(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var texts []any
	var docs []pyv
	for range genDocs {
		asJSON := r.IntN(4) == 0
		g := genDoc(r, asJSON)
		docs = append(docs, g.value())
		texts = append(texts, render(r, g, asJSON))
	}
	out := python(t, `
import sys, json, yaml
def proj(v):
    if isinstance(v, bool): return ["b", int(v)]
    if isinstance(v, int): return ["i", v]
    if v is None: return ["n"]
    if isinstance(v, str): return ["s", v]
    if isinstance(v, list): return ["l", [proj(x) for x in v]]
    if isinstance(v, dict): return ["d", [[proj(k), proj(x)] for k, x in v.items()]]
    return ["?", repr(v)]
for line in sys.stdin:
    print(json.dumps(proj(yaml.safe_load(json.loads(line)))))
`, texts)
	var proj func(v pyv) any
	proj = func(v pyv) any {
		switch v.kind {
		case 'b', 'i':
			return []any{string(v.kind), v.i}
		case 'n':
			return []any{"n"}
		case 's':
			return []any{"s", v.s}
		case 'l':
			items := []any{}
			for _, it := range v.list {
				items = append(items, proj(it))
			}
			return []any{"l", items}
		}
		entries := []any{}
		for _, e := range v.dict {
			entries = append(entries, []any{proj(e.k), proj(e.v)})
		}
		return []any{"d", entries}
	}
	for i, d := range docs {
		want, _ := json.Marshal(proj(d))
		var got any
		json.Unmarshal(out[i], &got)
		gotB, _ := json.Marshal(got)
		if string(gotB) != string(want) {
			t.Fatalf("%q:\nPyYAML    %s\nreference %s", texts[i], gotB, want)
		}
	}
	lower := python(t, "import sys, json\nfor line in sys.stdin: print(json.dumps(json.loads(line).lower()))", []any{"İ", "Reader_Tool", "BASH_TOOL"})
	for i, in := range []string{"İ", "Reader_Tool", "BASH_TOOL"} {
		var want string
		json.Unmarshal(lower[i], &want)
		if pyLower(in) != want {
			t.Fatalf("pyLower(%q) = %q, Python %q", in, pyLower(in), want)
		}
	}
}
