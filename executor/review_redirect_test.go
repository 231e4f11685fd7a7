package executor_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"polc.dev/polc/decision"
	"polc.dev/polc/normalize"
)

// redirectReviewPolicy: shell allowed for programs and builtins that
// write nothing by their own arguments, reads in the workspace, writes
// in notes/ only, no network. Whatever such a command is, bash must not
// write outside notes/, read outside the workspace or connect anywhere.
const redirectReviewPolicy = `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "ls *", "grep *", "true *", ":*", "printf *", "read *", "exec *", "cd *", "test *", "[ *", "trap *", "command *"], shell: "allow"}
	filesystem: {read: ["/ws/**"], write: ["/ws/notes/**"]}
	network: mode: "deny"
	environment: inject: ["*"]`

func checkReasons(t *testing.T, p *decision.Policy, cases map[string]string) {
	t.Helper()
	for cmd, want := range cases {
		if got := decideReasons(t, p, "bash", map[string]any{"command": cmd}); got != want {
			t.Errorf("%q: %s, want %s", cmd, got, want)
		}
	}
}

// TestReviewRedirectUnquotedBackslash: bash removes an unquoted
// backslash ("\X" is X), expand.Literal kept it. So the normalizer judged
// another file than bash opened — "cat < \/dev/tcp/127.0.0.1/9" was a read
// of /ws/\/dev/tcp/… (allowed) and bash connected to 127.0.0.1:9;
// "notes/\.\./\.\./etc/x" was a write in notes/ and bash wrote /etc/x —
// and did not see "\cd" as cd or "re\ad" as read (hidden code).
func TestReviewRedirectUnquotedBackslash(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	checkReasons(t, p, map[string]string{
		`cat < \/dev/tcp/127.0.0.1/9`:          "not_allowed:host",
		`echo x > notes/\.\./\.\./etc/x`:       normalize.ReasonPathEscape,
		`echo x > notes/.\./.\./etc/x`:         normalize.ReasonPathEscape,
		`echo x > /ws/notes/\.\./\.\./etc/x`:   normalize.ReasonPathEscape,
		`\cd / && cat < etc/shadow`:            normalize.ReasonInvalidCommand,
		`c\d / && cat < etc/shadow`:            normalize.ReasonInvalidCommand,
		`command \cd /; cat < etc/shadow`:      normalize.ReasonInvalidCommand,
		`re\ad 'a[$(id)]' <<< 1`:               normalize.ReasonInvalidCommand,
		`command \-p read 'a[$(id)]' <<< 1`:    normalize.ReasonInvalidCommand,
		`n='a[$(id)]'; printf \-v"$n" %s x`:    normalize.ReasonInvalidCommand,
		`n='a[$(id)]'; printf $'\055v'"$n" x`:  normalize.ReasonInvalidCommand,
		`echo x > notes/it\'s`:                 "allowed",
		`echo x > notes/a\ b 2> notes/a\\b`:    "allowed",
		`echo x > "notes/\.\./x"`:              "allowed", // in double quotes "\." stays
		`cat < \/ws/src/a.go > /ws/notes/a\.b`: "allowed",
	})
	// The facet is the file bash opens.
	n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
		Action: "bash", Principal: "agent:a", Tenant: "acme", Workspace: "/ws",
		Arguments: map[string]any{"command": `echo x > notes/a\ b\\c`},
	})
	if nerr != nil {
		t.Fatal(nerr)
	}
	if want := []normalize.PathAccess{{Path: `/ws/notes/a b\c`, Access: "write"}}; !slices.Equal(n.Paths, want) {
		t.Errorf("paths %v, want %v", n.Paths, want)
	}
}

// TestReviewRedirectANSICEscapes: bash decodes $'…' otherwise than
// expand.Format for \cX (a control character; \c@ is NUL, which ends the
// string), octal above \377 (it wraps: \400 is NUL, \456 is '.') and \u
// (per locale). "$'/etc/x\c@/../../ws/notes/a'" was judged as
// /ws/notes/a and bash wrote /etc/x.
func TestReviewRedirectANSICEscapes(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	checkReasons(t, p, map[string]string{
		`echo x > $'/etc/x\c@/../../ws/notes/a'`:        normalize.ReasonInvalidCommand,
		`echo x > $'/etc/x\c /../../ws/notes/a'`:        normalize.ReasonInvalidCommand,
		`echo x > $'/etc/x\400/../../ws/notes/a'`:       normalize.ReasonInvalidCommand,
		`echo x > $'notes/\456\456/\456\456/etc/x'`:     normalize.ReasonInvalidCommand,
		`cat < $'\u002fdev/tcp/127.0.0.1/9'`:            normalize.ReasonInvalidCommand,
		`echo x > $'notes/a\tb' 2> $'notes/\x41\101\n'`: "allowed",
		`echo x > $'notes/a\0/../../../etc/x'`:          "allowed", // bash: notes/a
		`echo x > $'/etc/x\0/../../ws/notes/a'`:         "not_allowed:path_write",
		`echo x > $'/ws/notes/\056\056/\056\056/etc/x'`: normalize.ReasonPathEscape,
	})
}

// TestReviewRedirectLocaleTranslation: bash translates $"…" through the
// message catalog TEXTDOMAIN/TEXTDOMAINDIR and the locale name, which an
// earlier line of the command sets: with a catalog in notes/ (written
// there first), '> $"notes/a"' wrote ../outside and '$"echo" x' ran
// another program than echo.
func TestReviewRedirectLocaleTranslation(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	pre := "TEXTDOMAINDIR=/ws/notes TEXTDOMAIN=d LC_ALL=C.UTF-8 LANGUAGE=xx\n"
	checkReasons(t, p, map[string]string{
		pre + `echo x > $"notes/a"`: normalize.ReasonInvalidCommand,
		pre + `cat < $"notes/a"`:    normalize.ReasonInvalidCommand,
		pre + `$"echo" x`:           normalize.ReasonInvalidCommand,
		pre + `echo $"hello"`:       normalize.ReasonInvalidCommand, // its translation is expanded (TestReviewAllowlistTranslatedString)
	})
}

// TestReviewRedirectDescriptorReopen: on Linux /dev/fd/N, /dev/stdin,
// /dev/stdout and /dev/stderr open anew the file descriptor N holds, with
// the redirection's access: "exec 3< src/a.go; echo x > /dev/fd/3"
// truncated and wrote src/a.go, which the policy judged as a read only.
func TestReviewRedirectDescriptorReopen(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	checkReasons(t, p, map[string]string{
		`exec 3</ws/src/a.go; echo x > /dev/fd/3`:                    "not_allowed:path_write",
		`{ echo x > /dev/stdin; } < src/a.go`:                        "not_allowed:path_write",
		`{ echo x > /dev/stdout; } 1< src/a.go`:                      "not_allowed:path_write",
		`exec {fd}< src/a.go; echo x >> /dev/fd/10`:                  "not_allowed:path_write",
		`exec 3< src/a.go 4<&3; echo x > /dev/fd/4`:                  "not_allowed:path_write",
		`exec 3< src/a.go; exec 5<&3-; echo x > /dev/fd/5`:           "not_allowed:path_write",
		`exec 3< src/a.go; exec 4< /dev/fd/3; echo > /dev/fd/4`:      "not_allowed:path_write",
		`exec 3< src/a.go; { echo x > /dev/fd/11; } 3< /dev/null`:    "not_allowed:path_write", // bash saved fd 3 as 11
		`exec 3> notes/log; cat < /dev/fd/3`:                         "allowed",
		`echo err > /dev/stderr; echo out > /dev/stdout`:             "allowed",
		`cat < src/a.go > /dev/stdout 2> /dev/stderr`:                "allowed",
		`while read -r l; do echo "$l" > /dev/stderr; done < list`:   "allowed",
		`exec 3< in; while read -u 3 l; do echo > /dev/stderr; done`: "allowed",
		`exec > notes/log 2>&1; echo x > /dev/stdout`:                "allowed",
		`{ echo > /dev/fd/10; } 3< /dev/null`:                        "allowed",
		`exec 3>&1; ls 2>&1 1>&3 | grep x > /dev/stderr`:             "allowed",
	})
}

// TestReviewRedirectThroughSymlink: bash opens the path as written and
// the kernel follows its links where they stand. NormalizePath cleans
// "l/.." away before resolving, and resolves no dangling link: with
// notes/l -> ../../outside, "echo x > notes/l/../x" was judged as a write
// of notes/x and bash wrote outside/x beside the workspace; with
// notes/dangling -> ../../outside/new, "echo x > notes/dangling" was
// judged as notes/dangling and bash created outside/new. A link to
// /dev/stdout or /dev/fd/N reopens a descriptor of bash's.
func TestReviewRedirectThroughSymlink(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	for _, d := range []string{"ws/notes/sub", "ws/src/deep", "outside"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"ws/notes/l": "../../outside", "ws/notes/l2": "../src/deep", "ws/notes/dangling": "../../outside/new",
		"ws/notes/out": "/dev/stdout", "ws/notes/in": "/dev/fd/3", "ws/notes/loop": "loop",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "exec *"], shell: "allow"}
	filesystem: {read: ["**"], write: ["notes/**"]}`)
	refused := normalize.ReasonInvalidCommand + "|" + normalize.ReasonPathEscape
	for cmd, want := range map[string]string{
		`echo x > notes/l/../x`:             "not_allowed:path_write",
		`echo x > notes/l2/../a.go`:         "not_allowed:path_write",
		`echo x > ` + ws + `/notes/l/../x`:  "not_allowed:path_write",
		`echo x > notes/dangling`:           "not_allowed:path_write",
		`echo x >> notes/dangling`:          "not_allowed:path_write",
		`echo x > notes/loop`:               normalize.ReasonInvalidCommand + "|" + normalize.ReasonInvalidPath,
		`echo x > notes/out`:                refused,
		`exec 3< src/a.go; echo > notes/in`: refused,
		`echo x > notes/sub/../x`:           "allowed",
		`echo x > notes/../notes/x`:         "allowed",
		`echo x > notes/l2/x`:               "not_allowed:path_write", // judged where it leads
		`echo x > notes/nosuch/../x`:        "allowed",                // bash's open fails
	} {
		n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
			Action: "bash", Principal: "agent:a", Tenant: "acme", Workspace: ws,
			Arguments: map[string]any{"command": cmd},
		})
		got := ""
		if nerr != nil {
			got = nerr.Reason
		} else {
			d, _ := p.Evaluate(n)
			got = strings.Join(d.Reasons, ",")
		}
		if !slices.Contains(strings.Split(want, "|"), got) {
			t.Errorf("%q: %s, want %s", cmd, got, want)
		}
	}
	// The facets: the path as written and the file it leads to.
	n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
		Action: "bash", Principal: "agent:a", Tenant: "acme", Workspace: ws,
		Arguments: map[string]any{"command": `echo x > notes/dangling 2> notes/l/../y`},
	})
	if nerr != nil {
		t.Fatal(nerr)
	}
	want := []normalize.PathAccess{
		{Path: ws + "/notes/dangling", Access: "write"}, {Path: root + "/outside/new", Access: "write"},
		{Path: ws + "/notes/y", Access: "write"}, {Path: root + "/y", Access: "write"},
	}
	if !slices.Equal(n.Paths, want) {
		t.Errorf("paths %v, want %v", n.Paths, want)
	}
}

// TestReviewRedirectCoprocCommandWord: bash names a coprocess only before
// a compound command; "coproc bash < script" runs bash, but the parser
// keeps "bash" as the coprocess's name when a redirection (or a
// declaration builtin) follows, so no argv said bash: it was allowed under
// an allowlist without bash, and ran notes/evil.sh (or a here-string).
// A coprocess also assigns NAME and NAME_PID (COPROC by default).
func TestReviewRedirectCoprocCommandWord(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	checkReasons(t, p, map[string]string{
		`coproc bash < /ws/notes/evil.sh`:        normalize.ReasonInvalidCommand,
		`coproc bash 2>/dev/null <<< 'rm -rf ~'`: normalize.ReasonInvalidCommand,
		`coproc bash export x=1`:                 normalize.ReasonInvalidCommand,
		`coproc $x { cat; }`:                     normalize.ReasonInvalidCommand,
		`coproc bash`:                            "not_allowed:command,not_allowed:shell",
		`coproc N { cat; } > /ws/notes/log`:      "allowed",
		`coproc cat`:                             "allowed",
	})
	for cmd, want := range map[string][]string{
		`coproc N { cat; }`:   {"N", "N_PID"},
		`coproc cat notes/in`: {"COPROC", "COPROC_PID"},
		`coproc { cat; }`:     {"COPROC", "COPROC_PID"},
	} {
		n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
			Action: "bash", Principal: "agent:a", Tenant: "acme", Workspace: "/ws",
			Arguments: map[string]any{"command": cmd},
		})
		if nerr != nil {
			t.Fatalf("%q: %v", cmd, nerr)
		}
		if !slices.Equal(n.Env, want) {
			t.Errorf("%q: env %q, want %q", cmd, n.Env, want)
		}
	}
}

// TestReviewRedirectTrapChangesDir: trap runs its text in the shell
// itself, before each command for DEBUG: "trap 'cd /' DEBUG; cat <
// etc/shadow" read /etc/shadow, judged as /ws/etc/shadow.
func TestReviewRedirectTrapChangesDir(t *testing.T) {
	p := reviewPolicy(t, redirectReviewPolicy)
	checkReasons(t, p, map[string]string{
		`trap 'cd /' DEBUG; cat < etc/shadow`:       normalize.ReasonInvalidCommand,
		`trap 'cd /' DEBUG; cat < /ws/src/a.go`:     "allowed",
		`command trap 'cd /' DEBUG; echo > notes/x`: normalize.ReasonInvalidCommand,
		`trap 'echo bye' EXIT; echo > /ws/notes/x`:  "allowed",
	})
}

// TestReviewRedirectGlobCommandWord: bash expands a command word's glob
// or brace before running it — "c? /" runs cd when the workspace has a
// file named cd, "{cd,/}" is "cd /" — so, under a policy that denies
// only some commands, the relative target after it was judged against
// the workspace while bash opened it elsewhere.
func TestReviewRedirectGlobCommandWord(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allow", deny: ["rm *"], shell: "allow"}
	filesystem: {read: ["/ws/**"], write: ["/ws/notes/**"]}
	environment: inject: ["*"]`)
	checkReasons(t, p, map[string]string{
		`c? / && cat < etc/shadow`:   normalize.ReasonInvalidCommand,
		`{cd,/}; cat < etc/shadow`:   normalize.ReasonInvalidCommand,
		`[c]d /; cat < etc/shadow`:   normalize.ReasonInvalidCommand,
		`ls *.go > notes/list`:       "allowed",
		`ls ?.go; cat < src/a.go`:    "allowed",
		`[ -f x ] && cat < src/a.go`: "allowed", // "[" alone is no glob
	})
}
