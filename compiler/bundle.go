package compiler

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// DecisionRego is the Rego v1 module of every bundle (package polc).
//
//go:embed rego/decision.rego
var DecisionRego string

// BundleRoot is the bundle's only root: data.polc.
const BundleRoot = "polc"

// SigningConfig signs a bundle in OPA's format (.signatures.json, a JWT
// over the file hashes) so that `opa run --verification-key` accepts it.
type SigningConfig struct {
	// Key is a PEM private key (RSA, EC or Ed25519; PKCS #1, SEC 1 or
	// PKCS #8) or an HMAC secret.
	Key []byte
	// Algorithm is the JWT algorithm: RS256 (default for RSA keys), ES256,
	// ES384 or ES512 (for EC keys: the one their curve requires, the
	// default), EdDSA (default for Ed25519 keys), HS256 (default for
	// non-PEM secrets), …
	Algorithm string
	// KeyID is the key id OPA looks up (default "default").
	KeyID string
}

// BundleRevision is the revision of a bundle with these files (path →
// content, the manifest and signatures excluded): the sha256 of the lines
// "<path> <sha256 of content>\n" sorted by path. It names the bundle's
// content, not only the snapshots it was compiled from: one set of
// snapshots compiled by two versions of polc whose decision module or data
// layout differ gives two revisions, so an OPA fleet's bundle status tells
// which bundle each instance runs, and a published revision
// (polc bundle publish) never names two different bundles.
func BundleRevision(files map[string][]byte) string {
	var lines []string
	for path, content := range files {
		sum := sha256.Sum256(content)
		lines = append(lines, path+" "+hex.EncodeToString(sum[:])+"\n")
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return hex.EncodeToString(sum[:])
}

// BundleData returns data.polc for a set of snapshots: each policy's rules
// lowered to matchers (exact values and anchored RE2 expressions), its gate
// tables, and an index from policy_id to name.
//
// The decision module looks input.policy up as a name, then as a
// policy_id, so the set must name each policy once either way: two
// snapshots of one name or one policy_id, or a name that is another
// policy's id, are refused rather than shadowed.
func BundleData(snaps []*snapshot.Snapshot) (map[string]any, error) {
	policies := map[string]any{}
	ids := map[string]any{}
	owner := map[string]*snapshot.Snapshot{} // names and ids
	for _, s := range snaps {
		for _, key := range []string{s.Name, s.PolicyID} {
			if prev, dup := owner[key]; dup && prev != s {
				return nil, fmt.Errorf("policies %s and %s are both named or identified %q: a bundle names each policy once", prev.Name, s.Name, key)
			}
			owner[key] = s
		}
	}
	for _, s := range snaps {
		d, err := policyData(s)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", s.Name, err)
		}
		policies[s.Name] = d
		ids[s.PolicyID] = s.Name
	}
	return map[string]any{"policies": policies, "ids": ids}, nil
}

// WriteBundle writes an OPA bundle (.tar.gz) with the decision module,
// the snapshots' data, a manifest (revision BundleRevision of the two,
// roots ["polc"], rego_version 1)
// and, when sc is non-nil, a signature. The output is deterministic.
func WriteBundle(snaps []*snapshot.Snapshot, sc *SigningConfig) ([]byte, error) {
	typed, err := BundleData(snaps)
	if err != nil {
		return nil, err
	}
	// OPA's store and signature hashing want plain JSON values.
	raw, err := json.Marshal(typed)
	if err != nil {
		return nil, err
	}
	var data map[string]any
	if err := util.UnmarshalJSON(raw, &data); err != nil {
		return nil, err
	}
	const modPath = "polc/decision.rego"
	mod, err := ast.ParseModuleWithOpts(modPath, DecisionRego, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, fmt.Errorf("decision module: %w", err)
	}
	rev := BundleRevision(map[string][]byte{"data.json": raw, modPath: []byte(DecisionRego)})
	b := bundle.Bundle{
		Manifest: bundle.Manifest{Revision: rev, Roots: &[]string{BundleRoot}},
		Data:     map[string]any{BundleRoot: data},
		Modules:  []bundle.ModuleFile{{URL: "/" + modPath, Path: "/" + modPath, Raw: []byte(DecisionRego), Parsed: mod}},
	}
	b.Manifest.SetRegoVersion(ast.RegoV1)
	if sc != nil {
		key, alg, err := signingKey(sc)
		if err != nil {
			return nil, fmt.Errorf("signing bundle: %w", err)
		}
		keyID := sc.KeyID
		if keyID == "" {
			keyID = "default"
		}
		if err := b.GenerateSignature(bundle.NewSigningConfig(key, alg, ""), keyID, false); err != nil {
			return nil, fmt.Errorf("signing bundle: %w", err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CheckSigningConfig reports whether sc can sign a bundle (a readable
// private key or secret, an algorithm OPA knows that fits the key), by
// signing an empty one, so that a bad key is refused before compiling.
func CheckSigningConfig(sc *SigningConfig) error {
	_, err := WriteBundle(nil, sc)
	return err
}

// ecdsaAlgs is the JWT algorithm of each curve (RFC 7518 §3.4).
var ecdsaAlgs = map[string]string{"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}

// privateKeyBlocks are the PEM block types OPA's signer parses.
var privateKeyBlocks = []string{"RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY"}

// signingKey returns the key text and JWT algorithm to give OPA's signer.
// A key with a PEM header is a private key: the first private-key block
// (OPA decodes only the first block, and openssl writes EC keys after an
// "EC PARAMETERS" block), its algorithm by default from the key's type —
// RS256 for RSA, ES256/ES384/ES512 for ECDSA on P-256/P-384/P-521 (an
// explicit ES algorithm must match the curve), EdDSA for Ed25519, whichever the
// encoding (PKCS #1, SEC 1 or PKCS #8, the form `openssl genpkey` and
// x509.MarshalPKCS8PrivateKey write). A file without a PEM header is an HMAC
// secret only with an explicit HS algorithm and at least as many bytes as
// the hash; polc keygen's evidence keys, PEM keys under an HS algorithm and
// other non-PEM files are refused, not signed as HMAC.
func signingKey(sc *SigningConfig) (key, alg string, err error) {
	isPEM := bytes.Contains(sc.Key, []byte("-----BEGIN"))
	hmac := strings.HasPrefix(sc.Algorithm, "HS")
	switch {
	case bytes.HasPrefix(bytes.TrimSpace(sc.Key), []byte("PRIVATE+KEY+")):
		// polc keygen's evidence key (a signed-note Ed25519 key): OPA
		// would take it for an HMAC secret and sign HS256 with it.
		return "", "", fmt.Errorf("this is a polc evidence signer key (signed-note format), not a bundle signing key: make one with `polc keygen NAME --key-format pem`")
	case hmac && isPEM:
		return "", "", fmt.Errorf("%s takes an HMAC secret, not a PEM key: drop --sign-alg to sign with the key's own algorithm", sc.Algorithm)
	case hmac:
		// RFC 7518 §3.2: an HMAC key is at least as long as the hash.
		need := map[string]int{"HS256": 32, "HS384": 48, "HS512": 64}[sc.Algorithm]
		if need == 0 {
			return "", "", fmt.Errorf("unknown HMAC algorithm %s (want HS256, HS384 or HS512)", sc.Algorithm)
		}
		if len(sc.Key) < need {
			return "", "", fmt.Errorf("%s needs an HMAC secret of at least %d bytes; this one has %d", sc.Algorithm, need, len(sc.Key))
		}
		return string(sc.Key), sc.Algorithm, nil
	case !isPEM:
		// Signed as HMAC by default once, silently: a file that is no PEM
		// key is an HMAC secret only when the author says so.
		return "", "", fmt.Errorf("not a PEM private key (RSA, EC or Ed25519); to sign with an HMAC secret, give --sign-alg HS256, HS384 or HS512")
	}
	rest := sc.Key
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return "", "", fmt.Errorf("no private key in the PEM data (want a %s block)", strings.Join(privateKeyBlocks, ", "))
		}
		if !slices.Contains(privateKeyBlocks, block.Type) {
			continue
		}
		var k any
		switch block.Type {
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		}
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", block.Type, err)
		}
		var def string
		switch k := k.(type) {
		case *rsa.PrivateKey:
			def = "RS256"
		case *ecdsa.PrivateKey:
			// RFC 7518 §3.4 ties each ES algorithm to one curve; OPA's
			// verifier would take ES256 over P-384, other JWT verifiers
			// would not, so a mismatch is refused rather than signed.
			curve := k.Curve.Params().Name
			if def = ecdsaAlgs[curve]; def == "" {
				return "", "", fmt.Errorf("unsupported EC curve %s (want P-256, P-384 or P-521)", curve)
			}
			if strings.HasPrefix(sc.Algorithm, "ES") && sc.Algorithm != def {
				return "", "", fmt.Errorf("%s does not sign with a %s key: use %s", sc.Algorithm, curve, def)
			}
		case ed25519.PrivateKey:
			def = "EdDSA"
		default:
			return "", "", fmt.Errorf("unsupported private key type %T", k)
		}
		alg = sc.Algorithm
		if alg == "" {
			alg = def
		}
		return string(pem.EncodeToMemory(block)), alg, nil
	}
}

// matcher is the bundle form of a set of patterns.
type matcher struct {
	Exact map[string][]string
	Re    []reRule
	// Dot holds the host patterns "*.S" and "*.S:port", which begin with
	// no literal: data.json indexes them by S.
	Dot map[string][]reRule
}

// matcherJSON is a matcher as data.json holds it: its expressions split
// by prefixIndex into those indexed by the first K characters (runes, as
// Rego's substring counts) of their prefix and the rest, which the Rego
// scans.
type matcherJSON struct {
	Exact map[string][]string `json:"exact"`
	Re    []reRule            `json:"re"`
	K     int                 `json:"k"`
	Ix    map[string][]reRule `json:"ix"`
	Dx    map[string][]reRule `json:"dx"`
}

// MarshalJSON writes the matcher with its prefix index.
func (m *matcher) MarshalJSON() ([]byte, error) {
	k, ix, rest := prefixIndex(m.Re)
	return json.Marshal(matcherJSON{Exact: m.Exact, Re: rest, K: k, Ix: ix, Dx: m.Dot})
}

// maxKeyRunes bounds the key lengths prefixIndex tries: longer keys
// rarely split groups further, and trying every length of long prefixes
// would cost the square of their length per expression.
const maxKeyRunes = 32

// prefixIndex picks the key length k that leaves the fewest expressions
// to test for any value: those whose prefix is shorter than k runes (the
// scan) plus the largest group sharing a k-rune key. k is 0, and nothing
// indexed, when no k does better than scanning all. Ties go to the
// smaller k; groups keep the expressions' order.
func prefixIndex(rs []reRule) (k int, ix map[string][]reRule, rest []reRule) {
	longest := 0
	for _, r := range rs {
		longest = max(longest, min(utf8.RuneCountInString(r.Pre), maxKeyRunes))
	}
	best := len(rs)
	for c := 1; c <= longest; c++ {
		short, groups, largest := 0, map[string]int{}, 0
		for _, r := range rs {
			key, ok := runePrefix(r.Pre, c)
			if !ok {
				short++
				continue
			}
			groups[key]++
			largest = max(largest, groups[key])
		}
		if short+largest < best {
			k, best = c, short+largest
		}
	}
	ix, rest = map[string][]reRule{}, []reRule{}
	for _, r := range rs {
		if key, ok := runePrefix(r.Pre, k); ok && k > 0 {
			ix[key] = append(ix[key], r)
		} else {
			rest = append(rest, r)
		}
	}
	return k, ix, rest
}

// runePrefix is the first n runes of s, and false if s is shorter.
func runePrefix(s string, n int) (string, bool) {
	i := 0
	for range n {
		if i >= len(s) {
			return "", false
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i], true
}

// reRule is one expression of a matcher. Pre is a literal every match
// begins with (regexPrefix): the Rego tests it before regex.match, so the
// expressions of rules that cannot match are never compiled. OPA keeps
// only 100 compiled expressions, and a policy with more than that used to
// recompile most of them on every decision.
type reRule struct {
	ID  string `json:"id"`
	Pre string `json:"pre"`
	Re  string `json:"re"`
}

// regexPrefix is the literal text every match of the RE2 expression re
// begins with: the literals that follow its start-of-text anchor, up to
// the first anything else ("" when re is not anchored, or starts with no
// case-sensitive literal). Read off the parsed expression, not the
// pattern, so it holds for whatever the expression's grammar was.
func regexPrefix(re string) string {
	x, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return ""
	}
	subs := []*syntax.Regexp{x}
	if x.Op == syntax.OpConcat {
		subs = x.Sub
	}
	if len(subs) == 0 || subs[0].Op != syntax.OpBeginText {
		return ""
	}
	var b strings.Builder
	for _, s := range subs[1:] {
		if s.Op != syntax.OpLiteral || s.Flags&syntax.FoldCase != 0 {
			break
		}
		b.WriteString(string(s.Rune))
	}
	return b.String()
}

func newMatcher() *matcher {
	return &matcher{Exact: map[string][]string{}, Re: []reRule{}, Dot: map[string][]reRule{}}
}

// add lowers pattern p of grammar k. Patterns without wildcards (and, for
// hosts, with a port) compare by equality, the rest by regular expression.
func (m *matcher) add(k pattern.Kind, p, id string) {
	literal := !strings.ContainsAny(p, "*?")
	if k == pattern.Host {
		_, port, _ := pattern.SplitHostPort(p)
		literal = literal && port != ""
	}
	if literal {
		v := p
		if k == pattern.Command {
			v = strings.ReplaceAll(p, " ", pattern.ArgvSep)
		}
		m.Exact[v] = append(m.Exact[v], id)
		return
	}
	// (?s): pattern.Regexp lowers the '*' and '?' of action, environment,
	// principal and tenant globs to '.', which in RE2 (Go's regexp and
	// OPA's regex.match alike) does not match a newline unless the s flag
	// is set; pattern.Match and the native evaluator match any character.
	// Those request values are not checked for newlines, so without the
	// flag the engines disagreed (an "agent:*" scope denied "agent:a\nb"
	// in OPA only). The other grammars' expressions have no bare '.'.
	re := pattern.Regexp(k, p)
	r := reRule{ID: id, Pre: regexPrefix(re), Re: re}
	if k == pattern.Host {
		// A value "*.S[:port]" matches is "L.….S:P": the text after one
		// of its host's dots is S, so the Rego looks up each such suffix.
		h, _, _ := pattern.SplitHostPort(p)
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			m.Dot[suffix] = append(m.Dot[suffix], r)
			return
		}
	}
	m.Re = append(m.Re, r)
}

type pathMatcher struct {
	Abs *matcher `json:"abs"`
	Rel *matcher `json:"rel"`
}

func newPathMatcher() *pathMatcher { return &pathMatcher{Abs: newMatcher(), Rel: newMatcher()} }

func (m *pathMatcher) add(p, id string) {
	if strings.HasPrefix(p, "/") {
		m.Abs.add(pattern.Path, p, id)
	} else {
		m.Rel.add(pattern.Path, p, id)
	}
}

// qualMatcher holds action patterns that may be qualified by a target.
type qualMatcher struct {
	Action    *matcher                  `json:"action"`
	Qualified map[string]*qualifiedData `json:"qualified"`
}

type qualifiedData struct {
	Command *matcher     `json:"command"`
	Path    *pathMatcher `json:"path"`
	Host    *matcher     `json:"host"`
	MCP     *matcher     `json:"mcp"`
}

func newQual() *qualMatcher {
	return &qualMatcher{Action: newMatcher(), Qualified: map[string]*qualifiedData{}}
}

func (q *qualMatcher) add(action string, tk, target *string, id string) {
	if tk == nil {
		q.Action.add(pattern.Action, action, id)
		return
	}
	d := q.Qualified[action]
	if d == nil {
		d = &qualifiedData{Command: newMatcher(), Path: newPathMatcher(), Host: newMatcher(), MCP: newMatcher()}
		q.Qualified[action] = d
	}
	switch *tk {
	case snapshot.TargetCommand:
		d.Command.add(pattern.Command, *target, id)
	case snapshot.TargetPath:
		d.Path.add(*target, id)
	case snapshot.TargetHost:
		d.Host.add(pattern.Host, *target, id)
	case snapshot.TargetMCP:
		d.MCP.add(pattern.MCP, *target, id)
	}
}

func policyData(s *snapshot.Snapshot) (map[string]any, error) {
	ruleGate, facetGate, err := decision.GateTables(s)
	if err != nil {
		return nil, err
	}
	principals, tenants := newMatcher(), newMatcher()
	for _, p := range s.PrincipalScope {
		principals.add(pattern.Principal, p, "")
	}
	for _, p := range s.TenantScope {
		tenants.add(pattern.Principal, p, "")
	}
	actionAllow := newMatcher()
	deny, approval := newQual(), newQual()
	approver := map[string]any{}
	fsAllow := map[string]*pathMatcher{"read": newPathMatcher(), "write": newPathMatcher(), "execute": newPathMatcher()}
	fsDeny := newPathMatcher()
	netAllow, netDeny := newMatcher(), newMatcher()
	subAllow, subShell, subDeny := newMatcher(), newMatcher(), newMatcher()
	hasShellAllow := false
	mcpTool, mcpRes, mcpDeny := newMatcher(), newMatcher(), newMatcher()
	envAllow, envDeny := newMatcher(), newMatcher()
	secretAllow, secretForbid := newMatcher(), newMatcher()
	budgets := []any{}
	var expiry any
	for _, r := range s.CompiledRules {
		id := r.Base().RuleID
		allow := r.Base().Effect == snapshot.EffectAllow
		switch r := r.(type) {
		case *snapshot.ActionRule:
			if allow {
				actionAllow.add(pattern.Action, r.Action, id)
			} else {
				deny.add(r.Action, r.TargetKind, r.Target, id)
			}
		case *snapshot.ApprovalRule:
			approval.add(r.Action, r.TargetKind, r.Target, id)
			if r.ApproverClass != nil {
				approver[id] = *r.ApproverClass
			} else {
				approver[id] = nil
			}
		case *snapshot.FilesystemRule:
			if allow {
				fsAllow[r.Access].add(r.Pattern, id)
			} else {
				fsDeny.add(r.Pattern, id)
			}
		case *snapshot.NetworkRule:
			if allow {
				netAllow.add(pattern.Host, r.Pattern, id)
			} else {
				netDeny.add(pattern.Host, r.Pattern, id)
			}
		case *snapshot.SubprocessRule:
			if !allow {
				subDeny.add(pattern.Command, r.Pattern, id)
				continue
			}
			subAllow.add(pattern.Command, r.Pattern, id)
			if *r.Shell == "allow" {
				subShell.add(pattern.Command, r.Pattern, id)
				hasShellAllow = true
			}
		case *snapshot.MCPRule:
			switch {
			case !allow:
				mcpDeny.add(pattern.MCP, r.Server+"/"+*r.Tool, id)
			case r.Resource != nil:
				mcpRes.add(pattern.MCPResource, r.Server+"/"+*r.Resource, id)
			default:
				mcpTool.add(pattern.MCP, r.Server+"/"+*r.Tool, id)
			}
		case *snapshot.EnvironmentRule:
			switch {
			case !allow:
				envDeny.add(pattern.Env, r.Pattern, id)
			case r.Exposure == "inject":
				// As the native evaluator: only inject grants assigning a
				// name (the env facet).
				envAllow.add(pattern.Env, r.Pattern, id)
			}
		case *snapshot.SecretExposureRule:
			if allow {
				secretAllow.add(pattern.Namespace, r.Namespace, id)
			} else {
				secretForbid.add(pattern.Namespace, r.Namespace, id)
			}
		case *snapshot.BudgetRule:
			budgets = append(budgets, map[string]any{"id": id, "kind": r.BudgetKind, "limit": r.Limit})
		case *snapshot.ExpiryRule:
			expiry = map[string]any{"id": id, "not_before": r.NotBefore, "expires_at": r.ExpiresAt}
		}
	}
	gates := []any{}
	for _, g := range s.GateBindings {
		gates = append(gates, map[string]any{"gate_id": g.GateID, "level": g.Level})
	}
	return map[string]any{
		"policy_id": s.PolicyID, "name": s.Name, "version": s.Version, "digest": s.Digest,
		"principals": principals, "tenants": tenants,
		"action_allow": actionAllow, "deny": deny, "approval": approval, "approver": approver,
		"fs_allow": fsAllow, "fs_deny": fsDeny,
		"net_allow": netAllow, "net_deny": netDeny,
		"sub_allow": subAllow, "sub_shell": subShell, "sub_deny": subDeny, "has_shell_allow": hasShellAllow,
		"mcp_tool": mcpTool, "mcp_res": mcpRes, "mcp_deny": mcpDeny,
		"env_allow": envAllow, "env_deny": envDeny,
		"secret_allow": secretAllow, "secret_forbid": secretForbid,
		"budgets": budgets, "expiry": expiry,
		"rule_gate": ruleGate, "facet_gate": facetGate, "gates": gates,
	}, nil
}
