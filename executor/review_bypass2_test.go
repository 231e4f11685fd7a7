package executor_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReviewANSICEscapesBashReadsOtherwise: bash 5.2 reads $'\x{HH}' as a
// hex escape; the parser keeps it as text. A word using it was judged as
// text bash never used: a here-document delimiter ended the body on a line
// polc never saw end it (a command no rule judged ran under an allowlist
// of cat and echo), a redirection target opened ../outside or /dev/tcp,
// and set $'-\x{6b}' switched on set -k, making a later argument an
// environment assignment (GIT_EXTERNAL_DIFF ran a command). Only the
// escapes both read alike are accepted now.
func TestReviewANSICEscapesBashReadsOtherwise(t *testing.T) {
	if out, err := exec.Command("bash", "-c", `printf %s $'\x{41}'`).Output(); err == nil && string(out) != "A" {
		t.Logf("this bash reads $'\\x{41}' as %q, not A: the refusal below still holds", out)
	}
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["**"]}
	network: {mode: "allowlist", allow: ["example.com:443"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "true", "set *", "git diff *"], shell: "allow"}`)
	for _, cmd := range []string{
		"cat <<$'E\\x{41}'\nEA\ntouch /tmp/pwn\nE\\x{41}\necho done",
		"cat <<-$'E\\x{41}'\nEA\ntouch /tmp/pwn\nE\\x{41}",
		"echo $(cat <<$'E\\x{41}'\nEA\ntouch /tmp/pwn\nE\\x{41}\n)",
		"echo pwned > $'\\x{2e}\\x{2e}/outside/m3'",
		"cat < $'\\x{2e}\\x{2e}/outside/secret'",
		"echo exfil > $'\\x{2f}dev/tcp/127.0.0.1/8099'",
		"set $'-\\x{6b}'; git diff GIT_EXTERNAL_DIFF='touch /tmp/x'",
		"set -o $'k\\x{65}yword'; git diff GIT_EXTERNAL_DIFF='touch /tmp/x'",
		"echo x > $'\\q'",   // an escape whose reading is not pinned down
		"echo x > $'\\xzz'", // \x with no hex digit
	} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != "invalid_command" {
			t.Errorf("%q: %s, want invalid_command", cmd, got)
		}
	}
	// The escapes both read alike still pass.
	for _, cmd := range []string{"echo $'a\\x41b\\n\\t\\'\\\\'", "echo $'\\101\\0'"} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != "allow" {
			t.Errorf("%q: %s, want allow", cmd, got)
		}
	}
}

// TestReviewTildeAfterAssignmentSign: bash tilde-expands after '=' (and
// ':') in a word shaped like an assignment, a redirection target too:
// "> k=~user/marker" opened k=/home/user/marker, and through a link k=
// in the workspace, a file outside it, judged as the path k=~user/marker.
func TestReviewTildeAfterAssignmentSign(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	filesystem: {read: ["**"], write: ["**"]}
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *"], shell: "allow"}`)
	for _, cmd := range []string{"echo pwned > k=~systemd-network/marker", "cat < k=~/x", "echo x > a:~/y"} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != "invalid_command" {
			t.Errorf("%q: %s, want invalid_command", cmd, got)
		}
	}
	if got := decide(t, p, "bash", map[string]any{"command": "cat foo~ > notes~"}); got != "allow" {
		t.Errorf("a tilde bash does not expand: %s", got)
	}
}

// TestReviewMCPResourceEncodedDots: servers decode resource URIs, so
// %2e%2e, .%2E, ..%2f and ..\ reached outside a file:///ws/** grant as
// surely as .. did; they are refused as it is.
func TestReviewMCPResourceEncodedDots(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["mcp"]
	mcp: servers: [{server: "fs", tools: ["read_resource"], resources: ["file:///tmp/ws/**"]}]`)
	for _, r := range []string{
		"file:///tmp/ws/%2e%2e/outside/secret",
		"file:///tmp/ws/.%2E/outside/secret",
		"file:///tmp/ws/..%2foutside/secret",
		"file:///tmp/ws/..\\outside\\secret",
		"file:///tmp/ws/%252e%252e/outside/secret",
		// One malformed escape must not stop the decoding of the rest:
		// lenient decoders (Python's unquote) decode the valid ones.
		"file:///tmp/ws/%zz/%2e%2e/%2e%2e/outside/secret",
		"file:///tmp/ws/100%/%2e%2e/x",
	} {
		if got := decide(t, p, "mcp", map[string]any{"server": "fs", "tool": "read_resource", "resource": r}); got != "invalid_request" {
			t.Errorf("%q: %s, want invalid_request", r, got)
		}
	}
	if got := decide(t, p, "mcp", map[string]any{"server": "fs", "tool": "read_resource", "resource": "file:///tmp/ws/a%20b.txt"}); got != "allow" {
		t.Errorf("an encoded space: %s, want allow", got)
	}
}

// TestReviewProgramPathClimbs: a command pattern's '*' matches '/' and
// "..", so "./scripts/*" granted "./scripts/../../bin/x". A program path
// with a ".." segment is refused (cleaning it would be wrong after a link).
func TestReviewProgramPathClimbs(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["./scripts/*", "./scripts/* *"]}`)
	for _, cmd := range []string{"./scripts/../../bin/x", "./scripts/../x", "../scripts/run"} {
		if got := decide(t, p, "bash", map[string]any{"command": cmd}); got != "invalid_command" {
			t.Errorf("%q: %s, want invalid_command", cmd, got)
		}
	}
	if got := decide(t, p, "bash", map[string]any{"command": "./scripts/build ../out"}); got != "allow" {
		t.Errorf("a program inside scripts with a '..' argument: %s, want allow", got)
	}
}

// TestReviewEnvReadGrantsNoAssignment: the env facet is what a command
// assigns, and a read grant used to satisfy it: under read: ["PATH"],
// "PATH=./bin; cat x" ran ./bin/cat, a program no command rule judged.
// Only inject lets a command set a name.
func TestReviewEnvReadGrantsNoAssignment(t *testing.T) {
	body := `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["cat *"], shell: "allow"}
	environment: %s: ["PATH"]`
	for _, tc := range []struct{ grant, want string }{{"read", "deny"}, {"inject", "allow"}} {
		p := reviewPolicy(t, strings.Replace(body, "%s", tc.grant, 1))
		for _, cmd := range []string{"PATH=./bin; cat x", "PATH=./bin cat x", "export PATH=./bin; cat x"} {
			d, refused := evaluateReview(p, "bash", map[string]any{"command": cmd})
			if refused != "" || d.Disposition != tc.want {
				t.Errorf("%s grant, %q: %s %v (refused %q), want %s", tc.grant, cmd, d.Disposition, d.Reasons, refused, tc.want)
			}
		}
	}
}
