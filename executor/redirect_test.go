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

// TestShellRedirectionsAreFacets: bash opens a redirection's file itself,
// whatever program runs, so with shell allowed for read-only programs
// "echo x > /etc/cron.d/x" wrote anywhere; and it connects to
// /dev/tcp/HOST/PORT itself, under a policy that denies the network.
// Each redirection is a path (or host) facet the policy judges.
func TestShellRedirectionsAreFacets(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash"]
	subprocess: {mode: "allowlist", allow: ["echo *", "cat *", "exec *", "make *", "cd *", "command *", ": *"], shell: "allow"}
	filesystem: {read: ["/ws/**"], write: ["/ws/out/**"]}
	network: {mode: "allowlist", allow: ["github.com:443"]}
	environment: read: ["*"]`)
	checkReasons(t, p, map[string]string{
		// Writes and reads the policy grants, and what opens no file.
		`echo x > out/log`:                     "allowed",
		`echo x >> /ws/out/log 2>&1`:           "allowed",
		`cat < src/a.go > out/b`:               "allowed",
		`echo x &> out/log; echo y >| out/l2`:  "allowed",
		`echo x 2>/dev/null >&2; cat <&0`:      "allowed",
		`exec 3>&1 4<&- 5>&3-; echo`:           "allowed",
		`cat <<EOF > out/f` + "\nhi\nEOF":      "allowed",
		`cat <<< hi > "out/with space"`:        "allowed",
		`echo > /dev/stderr; cat < /dev/fd/3`:  "allowed",
		`echo x > >(cat) 2> >(cat >&2)`:        "allowed",
		`echo > /dev/tcp/github.com/443`:       "allowed",
		`(cd out && make) > /ws/out/build.log`: "allowed",
		// Writes it does not grant: denied by the filesystem rules.
		`echo x > /etc/cron.d/x`:         "not_allowed:path_write",
		`echo x >> src/a.go`:             "not_allowed:path_write",
		`echo x >& /etc/passwd`:          "not_allowed:path_write",
		`exec 3<>src/a.go`:               "not_allowed:path_write",
		`exec 3<>/etc/x`:                 "not_allowed:path_read,not_allowed:path_write",
		`cat < /etc/shadow`:              "not_allowed:path_read",
		`echo x > out/../src/a`:          "not_allowed:path_write",
		`echo x > '/etc/'"passwd"`:       "not_allowed:path_write",
		`f() { echo x > /etc/x; }; echo`: "not_allowed:path_write",
		`echo $(echo > /etc/x)`:          "not_allowed:path_write",
		`echo x > ../escape`:             normalize.ReasonPathEscape,
		`cat < /dev/tcp/evil.example/80`: "not_allowed:host",
		`exec 3<>/dev/udp/10.0.0.1/53`:   "not_allowed:host",
		`echo > /dev/tcp/GitHub.com/80`:  "not_allowed:host",
		// Targets known only at run time, and relative ones after a
		// directory change: refused.
		`f=/etc/x; echo > "$f"`:               normalize.ReasonInvalidCommand,
		`echo > /etc/pass*`:                   normalize.ReasonInvalidCommand,
		`echo > /etc/pass{w..w}d`:             normalize.ReasonInvalidCommand,
		`echo > ~/.bashrc`:                    normalize.ReasonInvalidCommand,
		`f=/etc/x; echo >& $f`:                normalize.ReasonInvalidCommand,
		`echo > $(echo /etc/x)`:               normalize.ReasonInvalidCommand,
		`cd /etc && echo x > passwd`:          normalize.ReasonInvalidCommand,
		`command -p cd /etc; echo x > passwd`: normalize.ReasonInvalidCommand,
		`c=cd; $c /etc; echo x > passwd`:      normalize.ReasonInvalidCommand,
		`echo > /dev/tcp/github.com/https`:    normalize.ReasonInvalidCommand,
		`echo > /dev/tcp/git%68ub.com/443`:    normalize.ReasonInvalidCommand,
		`echo > /dev/tcp/2130706433/80`:       normalize.ReasonInvalidCommand,
		`echo > /dev/tcp/[::1]/80`:            normalize.ReasonInvalidCommand,
	})
}

// decideReasons is the normalization refusal's reason, or the decision's
// reasons joined by commas.
func decideReasons(t *testing.T, p *decision.Policy, action string, args map[string]any) string {
	t.Helper()
	d, refused := evaluateReview(p, action, args)
	if refused != "" {
		return refused
	}
	return strings.Join(d.Reasons, ",")
}

// TestShellRedirectionFacetsExact pins the facets themselves: the path
// cleaned against the workspace, the access per operator, one entry per
// path and access, and /dev/tcp as "host:port".
func TestShellRedirectionFacetsExact(t *testing.T) {
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
		Action: "bash", Principal: "agent:a", Tenant: "acme", Workspace: ws,
		Arguments: map[string]any{"command": `cat < a <> ./out//b > out/b 2>>/tmp/log >&/tmp/log; echo > /dev/tcp/::1/80 >/dev/tcp/0:0::1/80 </dev/udp/Host.Example/53`},
	})
	if nerr != nil {
		t.Fatal(nerr)
	}
	var got []string
	for _, pa := range n.Paths {
		got = append(got, pa.Access+" "+strings.TrimPrefix(pa.Path, ws))
	}
	want := []string{"read /a", "read /out/b", "write /out/b", "write /tmp/log"}
	if !slices.Equal(got, want) {
		t.Errorf("paths %q, want %q", got, want)
	}
	if want := []string{"[::1]:80", "host.example:53"}; !slices.Equal(n.Hosts, want) {
		t.Errorf("hosts %q, want %q", n.Hosts, want)
	}
}

// TestRedirectWordOffsets: ParseCommand gives each redirection's target
// word as byte offsets into the command (a runner that opens the files
// itself replaces exactly those words), none for a file a descriptor
// file reopens; the descriptor numbers the redirections name (N>, >&M,
// >&M-); and whether a {NAME}>&- closes a descriptor known only at run
// time.
func TestRedirectWordOffsets(t *testing.T) {
	cmd := "echo x > \"out/a b\" 2>&1 3>&5- <in/f; cat <<EOF >>out/'h'\n> not/a/target\nEOF\n" +
		"(echo `echo q > out/q`) &> out/c; exec 10<in/g; echo > /dev/fd/10"
	c, err := normalize.ParseCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	reopened := 0
	for _, r := range c.Redirects {
		if r.End == 0 {
			reopened++
			continue
		}
		words = append(words, cmd[r.Start:r.End])
	}
	want := []string{`"out/a b"`, "in/f", "out/'h'", "out/q", "out/c", "in/g", "/dev/fd/10"}
	if !slices.Equal(words, want) {
		t.Errorf("words %q, want %q", words, want)
	}
	if reopened == 0 {
		t.Errorf("no reopened file: %+v", c.Redirects)
	}
	if !slices.Equal(c.FDs, []int{1, 2, 3, 5, 10}) || c.ClosesNamedFD {
		t.Errorf("FDs %v, ClosesNamedFD %v", c.FDs, c.ClosesNamedFD)
	}
	c, err = normalize.ParseCommand("exec {v}>out/lock; exec {v}>&-")
	if err != nil || !c.ClosesNamedFD {
		t.Errorf("{v}>&-: %+v %v", c, err)
	}
}
