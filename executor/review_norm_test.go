package executor_test

import (
	"strings"
	"testing"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/normalize"
)

// decide normalizes and evaluates one request against src's policy: the
// disposition, or the normalization reason when it is refused.
func decide(t *testing.T, p *decision.Policy, action string, args map[string]any) string {
	t.Helper()
	d, refused := evaluateReview(p, action, args)
	if refused != "" {
		return refused
	}
	return d.Disposition
}

// evaluateReview normalizes a request of agent:a in tenant acme with
// workspace /ws and evaluates it: the decision, or the normalization
// refusal's reason.
func evaluateReview(p *decision.Policy, action string, args map[string]any) (decision.Decision, string) {
	n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
		Action: action, Arguments: args, Principal: "agent:a", Tenant: "acme", Workspace: "/ws",
	})
	if nerr != nil {
		return decision.Decision{}, nerr.Reason
	}
	d, _ := p.Evaluate(n)
	return d, ""
}

func reviewPolicy(t *testing.T, body string) *decision.Policy {
	t.Helper()
	p, err := decision.Compile(compilePolicy(t, `package p
policies: r: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
`+body+`
}
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReviewShellHiddenCode: with shell allowed for echo only, bash must
// not run any other command. Bash evaluates text known only at run time
// (a quoted string, a loop variable) as arithmetic or as a variable name,
// and an array subscript in that text runs its command substitutions —
// no command the normalizer lists says so. Each of these ran "id" (or
// anything) under a policy that allows only echo.
func TestReviewShellHiddenCode(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *"], shell: "allow"}
	environment: inject: ["*"]`)
	for _, cmd := range []string{
		`[[ 'a[$(id)]' -eq 0 ]]`,
		`echo hi && [[ -v 'a[$(id)]' ]]`,
		`for x in 'a[$(id)]'; do echo $((x)); done`,
		`for x in 'a[$(id)]'; do echo ${!x}; done`,
		`for x in '$(id)'; do echo ${x@P}; done`,
		`echo $(( 'a[$(id)]' ))`,
		`declare -i x='a[$(id)]'`,
		`declare -n r='a[$(id)]'; echo $r`,
		`let 'a[$(id)]'`,
		`a=(['a[$(id)]']=1)`,
		`echo; printf -v 'a[$(id)]' x`,
		`echo; read 'a[$(id)]' <<< x`,
		`for ((i = x; i < 1; i++)); do echo; done`,
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got == decision.Allow {
			t.Errorf("%q: allowed; it runs a command the policy never saw", cmd)
		} else if got != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %s, want %s", cmd, got, normalize.ReasonInvalidCommand)
		}
	}
	// What stays allowed: constant arithmetic, tests without arithmetic
	// on run-time text, names without computed subscripts.
	for _, cmd := range []string{
		`echo $((1 + 2)) $((0x1f)) $((2#101)) ${a[0]} ${a[@]} ${#a[@]} ${!a[@]}`,
		`[[ -f x ]] && echo yes`,
		`for f in a b; do echo $f; done`,
		`echo [x] | echo`,
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != decision.Allow {
			t.Errorf("%q: %s, want allow", cmd, got)
		}
	}
}

// TestReviewShellAssignmentsAreEnv: "PATH=/ws/bin git status" needs an
// environment grant for PATH; so do export/declare/local/readonly and a
// for loop's variable, which assign it just the same ("export
// PATH=/ws/evil; git status" ran /ws/evil/git with no env facet).
func TestReviewShellAssignmentsAreEnv(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["git *"], shell: "allow"}
	environment: {inject: ["GIT_*"], deny: ["PATH", "LD_*"]}`)
	for _, cmd := range []string{
		`PATH=/ws/evil git status`,
		`export PATH=/ws/evil; git status`,
		`declare -x PATH=/ws/evil; git status`,
		`readonly PATH=/ws/evil && git status`,
		`for PATH in /ws/evil; do git status; done`,
		`export LD_PRELOAD=/ws/evil.so; git status`,
		`export "$v"; git status`,
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got == decision.Allow {
			t.Errorf("%q: allowed", cmd)
		}
	}
	if got := decide(t, p, "bash", map[string]any{"command": "export GIT_DIR=x; git status"}); got != decision.Allow {
		t.Errorf("granted export: %s", got)
	}
}

// TestReviewHostIsTheHostDialled: net/http maps a non-ASCII host through
// IDNA before dialling ("127。0。0。1" and fullwidth "ｌｏｃａｌｈｏｓｔ"
// reach 127.0.0.1), and the C resolver reads a numeric last label as
// IPv4 ("2130706433", "0x7f.1", "0177.0.0.1"). Judged as written, each
// dodged a deny of the address it reaches.
func TestReviewHostIsTheHostDialled(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["http_get"]
	network: {mode: "allow", deny: ["127.0.0.1", "localhost", "169.254.169.254"]}`)
	for _, u := range []string{
		"http://127。0。0。1/", "http://ｌｏｃａｌｈｏｓｔ/", "http://ⓛocalhost/", "http://local\u00adhost/",
		"http://%EF%BD%8Cocalhost/", "http://2130706433/", "http://0x7f000001/", "http://0x7f.1/",
		"http://0177.0.0.1/", "http://127.1/", "http://0/", "http://2852039166/latest/meta-data",
		"http://169.254.43518/",
	} {
		if got := decide(t, p, "http_get", map[string]any{"url": u}); got != normalize.ReasonInvalidURL {
			t.Errorf("%q: %s, want %s", u, got, normalize.ReasonInvalidURL)
		}
	}
	for u, want := range map[string]string{
		"http://127.0.0.1/": decision.Deny, "http://LOCALHOST/": decision.Deny, "http://[::ffff:a9fe:a9fe]/": decision.Deny,
		"https://example.com/": decision.Allow, "http://xn--bcher-kva.example/": decision.Allow, "http://1e100.net/": decision.Allow,
		"http://10.0.0.1:8080/": decision.Allow, "http://a.0x/": normalize.ReasonInvalidURL,
	} {
		if got := decide(t, p, "http_get", map[string]any{"url": u}); got != want {
			t.Errorf("%q: %s, want %s", u, got, want)
		}
	}
}

// TestReviewMCPResourceServerGlob: in an MCP resource pattern the server
// is one glob segment, "**" included (pattern.Match, and the Rego
// bundle); the native matcher read a leading "**" as any number of
// segments, so "**/public/*" granted server "a" the resource
// "b/public/x".
func TestReviewMCPResourceServerGlob(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["mcp"]
	mcp: servers: [{server: "**", tools: ["read"], resources: ["public/*"]}]`)
	for _, c := range []struct {
		server, resource, want string
	}{
		{"a", "public/x", decision.Allow},
		{"a", "b/public/x", decision.Deny},
		{"a", "public/x/y", decision.Deny},
	} {
		ref := pattern.Match(pattern.MCPResource, "**/public/*", c.server+"/"+c.resource)
		if ref != (c.want == decision.Allow) {
			t.Fatalf("reference disagrees with the case %+v", c)
		}
		got := decide(t, p, "mcp", map[string]any{"server": c.server, "tool": "read", "resource": c.resource})
		if got != c.want {
			t.Errorf("%s %s: %s, want %s", c.server, c.resource, got, c.want)
		}
	}
}

// TestNamespaceDoubleStar: in a secret namespace, as in a path, "**" as a
// whole segment is zero or more segments, in pattern.Match, the Rego
// bundle and the native matcher alike ("ci/**" grants "ci", "ci/a" and
// "ci/prod/deploy"; a forbid of "prod/**" reaches every depth). The
// native matcher once read it so while the reference read one segment.
func TestNamespaceDoubleStar(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["search"]
	secrets: [{namespace: "ci/**", exposure: "inject"}, {namespace: "**", exposure: "reference_only"}, {namespace: "prod/**", exposure: "forbid"}]`)
	for ns, want := range map[string]string{"ci/a": decision.Allow, "ci/prod/deploy": decision.Allow, "ci": decision.Allow,
		"cd/a": decision.Allow, "prod": decision.Deny, "prod/db/password": decision.Deny} {
		if ref := pattern.Match(pattern.Namespace, "prod/**", ns); ref != (want == decision.Deny) {
			t.Fatalf("reference: prod/** on %q: %v", ns, ref)
		}
		n := &normalize.Normalized{Principal: "agent:a", Tenant: "acme", Action: "search", Workspace: "/ws",
			Time: "2026-01-01T00:00:00.000000Z", Paths: []normalize.PathAccess{}, Commands: [][]string{},
			Hosts: []string{}, Env: []string{}, Secrets: []string{ns}}
		if d, _ := p.Evaluate(n); d.Disposition != want {
			t.Errorf("%q: %s (%s), want %s", ns, d.Disposition, strings.Join(d.Reasons, ","), want)
		}
	}
	if !pattern.Match(pattern.Namespace, "ci/**", "ci/prod/deploy") || pattern.Match(pattern.Namespace, "ci/*", "ci/prod/deploy") {
		t.Fatal("reference: ci/** must match every depth below ci, ci/* one")
	}
	if pattern.Validate(pattern.Namespace, "ci/a**") == nil {
		t.Fatal(`"a**" in a namespace segment must be refused, as in paths`)
	}
}

// TestReviewShellHiddenCodeGaps: more text bash runs as code unseen, each
// checked against bash 5.2 (a "touch pwned" in the subscript ran): a
// name known only at run time after printf -v or test -v, a name glued to
// its option, a builtin reached through "command -p" or "builtin --",
// declare -i/-n through builtin/command, an option that is a variable's
// value, the integer-typed variables (RANDOM, SRANDOM, OPTIND, HISTCMD:
// an assignment is arithmetic) and PS4 (prompt-expanded under set -x),
// and a {NAME} redirection's computed subscript.
func TestReviewShellHiddenCodeGaps(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "printf *", "read *", "test *", "[ *", "wait *", "command *", "builtin *", "mapfile *", "set *", ": *", "exec *", "unset *"], shell: "allow"}
	environment: inject: ["*"]
	filesystem: read: ["/ws/**"]`)
	for _, cmd := range []string{
		`n='a[$(id)]'; printf -v "$n" %s x`,
		`echo; printf '-va[$(id)]' %s x`,
		`f='-va[$(id)]'; printf "$f" x`,
		`n='a[$(id)]'; [ -v "$n" ]`,
		`n='a[$(id)]'; test -v "$n"`,
		`echo & wait -n '-pa[$(id)]'`,
		`command -p read 'a[$(id)]' <<< x`,
		`builtin -- read 'a[$(id)]' <<< x`,
		`echo; builtin declare -i x='a[$(id)]'`,
		`echo; command declare -n r='a[$(id)]'; echo $r`,
		`cb=id; mapfile -C "$cb" -c 1 arr < f`,
		`RANDOM='a[$(id)]'`,
		`x='a[$(id)]'; OPTIND=$x; echo`,
		`for HISTCMD in 'a[$(id)]'; do echo; done`,
		`read SRANDOM <<< 'a[$(id)]'`,
		`PS4='$(id)'; set -x; echo`,
		`read PS4 <<< '$(id)'; set -x; echo`,
		`unset PS4; : ${PS4='$(id)'}; set -x; echo`,
		`x='a[$(id)]'; exec {b[x]}>/dev/null`,
		// test/[: a run-time word where bash's test grammar may read it
		// as an operator (-v), one that may split into several words, or
		// any run-time word beyond the shapes known safe (five words).
		`o=-v; n='a[$(id)]'; [ "$o" "$n" ]`,
		`x='-v a[$(id)]'; [ ! $x ]`,
		`x='-v a[$(id)]'; echo; test $x`,
		`x='a[$(id)]'; [ -n 1 -a "$x" ]`,
		`echo; [ * ]`,
		`echo; [ "$@" ]`,
		`o=-v; n='a[$(id)]'; [ ! "$o" "$n" ]`,
		// A length whose index is text: the index is arithmetic.
		`x='a[$(id)]'; [[ ${#b[x]} -gt 1 ]]`,
		`x='a[$(id)]'; echo $(( ${#x} + x ))`,
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %s, want %s", cmd, got, normalize.ReasonInvalidCommand)
		}
	}
	// Literal names, option arguments that are not names, and constants
	// stay allowed.
	for _, cmd := range []string{
		`read -r -d '' line < f; echo "$line"`,
		`while IFS= read -r -d '' f; do echo "$f"; done < <(echo)`,
		`read -p "Continue? " ans; echo $ans`,
		`read -t 5 -n 1 x; echo`,
		`mapfile -t -n 10 lines < f; echo`,
		`printf "%s\n" "$x"; printf "Hello $x\n"`,
		`echo & wait $!`,
		`export -n FOO; echo`,
		`[[ 5 -gt -1 ]] && echo`,
		`OPTIND=1; PS4='+ '; set -x; echo`,
		`exec {fd}>/dev/null; echo`,
		// test/[ with quoted run-time words where they can only be
		// operands.
		`f=x; [ -f "$f" ] && echo`,
		`[ "$a" = "$b" ] || echo`,
		`[ -n "$x" ]; echo`,
		`[ "$x" ]; echo`,
		`[ ! -d "$d" ]; echo`,
		`test "$x" -eq 1; echo`,
		`[ ! "$a" != "$b" ]; echo`,
		`[ "$x" -nt "$y" ]; echo`,
		// Parameters that always expand to numbers, in arithmetic.
		`[[ $? -ne 0 ]] && echo`,
		`(( $# > 0 )) && echo`,
		`[[ ${#x} -gt 3 ]] && echo`,
		`echo $(( $$ + ${#a[@]} ))`,
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != decision.Allow {
			t.Errorf("%q: %s, want allow", cmd, got)
		}
	}
}

// TestReviewShellBuiltinAssignmentsAreEnv: read, printf -v, mapfile,
// getopts, wait -p and ${NAME:=word} assign a name as NAME=value does
// ("read PATH <<< /ws/evil; git status" ran /ws/evil/git with no env
// facet, as export did).
func TestReviewShellBuiltinAssignmentsAreEnv(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["git *", "read *", "printf *", "mapfile *", "getopts *", ": *", "unset *"], shell: "allow"}
	environment: {inject: ["GIT_*"], deny: ["PATH"]}
	filesystem: read: ["/ws/**"]`)
	for _, cmd := range []string{
		`read PATH <<< /ws/evil; git status`,
		`read -r -a PATH <<< /ws/evil; git status`,
		`printf -v PATH %s /ws/evil; git status`,
		`mapfile -t PATH < f; git status`,
		`getopts a PATH; git status`,
		`unset PATH; : ${PATH:=/ws/evil}; git status`,
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got == decision.Allow {
			t.Errorf("%q: allowed", cmd)
		}
	}
	if got := decide(t, p, "bash", map[string]any{"command": "read GIT_DIR < f; git status"}); got != decision.Allow {
		t.Errorf("granted read: %s", got)
	}
}
