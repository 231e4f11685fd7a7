package normalize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var fixedNow = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }

func norm(t *testing.T, ws, action string, args map[string]any) (*Normalized, *NormalizeError) {
	t.Helper()
	n := &Normalizer{Now: fixedNow}
	return n.Normalize(ActionRequest{Action: action, Arguments: args, Principal: "agent:a", Tenant: "t", Workspace: ws})
}

func TestNormalizeBash(t *testing.T) {
	cases := []struct {
		cmd   string
		argv  [][]string
		shell bool
		env   []string
	}{
		{"git status --short", [][]string{{"git", "status", "--short"}}, false, nil},
		{`git commit -m "a b" 'c d' e\ f`, [][]string{{"git", "commit", "-m", "a b", "c d", "e f"}}, false, nil},
		{"go test ./... && git status", [][]string{{"go", "test", "./..."}, {"git", "status"}}, true, nil},
		{"a; b", [][]string{{"a"}, {"b"}}, true, nil},
		{"a || b", [][]string{{"a"}, {"b"}}, true, nil},
		{"cat x | grep y", [][]string{{"cat", "x"}, {"grep", "y"}}, true, nil},
		{"echo $(rm -rf /)", [][]string{{"echo", "$(rm -rf /)"}, {"rm", "-rf", "/"}}, true, nil},
		{"echo `id`", [][]string{{"echo", "$(id)"}, {"id"}}, true, nil},
		{"ls > out", [][]string{{"ls"}}, true, nil},
		{"cat < in", [][]string{{"cat"}}, true, nil},
		{"ls\nrm x", [][]string{{"ls"}, {"rm", "x"}}, true, nil},
		{"echo $HOME", [][]string{{"echo", "$HOME"}}, true, nil},
		{"FOO=1 make", [][]string{{"make"}}, false, []string{"FOO"}},
		{"sleep 1 &", [][]string{{"sleep", "1"}}, true, nil},
		{"(cd /; ls)", [][]string{{"cd", "/"}, {"ls"}}, true, nil},
		{"X=1", nil, true, []string{"X"}},
	}
	for _, c := range cases {
		n, err := norm(t, "/ws", "bash", map[string]any{"command": c.cmd})
		if err != nil {
			t.Errorf("%q: %v", c.cmd, err)
			continue
		}
		want := c.argv
		if want == nil {
			want = [][]string{}
		}
		if diff := cmp.Diff(want, n.Commands); diff != "" {
			t.Errorf("%q: commands:\n%s", c.cmd, diff)
		}
		if n.ShellControl != c.shell {
			t.Errorf("%q: shell_control = %v", c.cmd, n.ShellControl)
		}
		wantEnv := c.env
		if wantEnv == nil {
			wantEnv = []string{}
		}
		if diff := cmp.Diff(wantEnv, n.Env); diff != "" {
			t.Errorf("%q: env:\n%s", c.cmd, diff)
		}
	}
	for _, bad := range []struct{ cmd, reason string }{
		{"echo 'unterminated", ReasonInvalidCommand},
		{"if then", ReasonInvalidCommand},
		{"", ReasonEmptyCommand},
		{"   # only a comment", ReasonEmptyCommand},
	} {
		if _, err := norm(t, "/ws", "bash", map[string]any{"command": bad.cmd}); err == nil || err.Reason != bad.reason {
			t.Errorf("%q: got %v, want %s", bad.cmd, err, bad.reason)
		}
	}
}

func TestNormalizePaths(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "src"), 0o755)
	os.Symlink(outside, filepath.Join(ws, "link"))
	os.Symlink(filepath.Join(ws, "src"), filepath.Join(ws, "inner"))
	ok := map[string]string{
		"src/a.go":          ws + "/src/a.go",
		"./src/../b":        ws + "/b",
		ws + "/src/x":       ws + "/src/x",
		"/etc/passwd":       "/etc/passwd",
		"/usr/../etc/hosts": "/etc/hosts",
		"inner/new.txt":     ws + "/src/new.txt",
		".":                 ws,
	}
	for in, want := range ok {
		n, err := norm(t, ws, "read_file", map[string]any{"path": in})
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if n.Paths[0].Path != want || n.Paths[0].Access != "read" {
			t.Errorf("%q: got %+v, want %s", in, n.Paths, want)
		}
	}
	for _, in := range []string{"../x", "src/../../x", ws + "/../x", "link/secret", "link"} {
		if _, err := norm(t, ws, "write_file", map[string]any{"path": in}); err == nil || err.Reason != ReasonPathEscape {
			t.Errorf("%q: got %v, want path_escape", in, err)
		}
	}
	n, _ := norm(t, ws, "edit_file", map[string]any{"path": "src/a.go"})
	if len(n.Paths) != 2 || n.Paths[0].Access != "read" || n.Paths[1].Access != "write" {
		t.Errorf("edit_file accesses: %+v", n.Paths)
	}
}

func TestNormalizeURLsAndMCP(t *testing.T) {
	hosts := map[string]string{
		"https://API.GitHub.com/repos":  "api.github.com:443",
		"http://example.com:8080/x":     "example.com:8080",
		"http://user:pw@10.0.0.1/":      "10.0.0.1:80",
		"https://[::1]/":                "[::1]:443",
		"wss://stream.example.com/feed": "stream.example.com:443",
	}
	for in, want := range hosts {
		n, err := norm(t, "/ws", "http_get", map[string]any{"url": in})
		if err != nil || n.Hosts[0] != want {
			t.Errorf("%q: got %v %v, want %s", in, n, err, want)
		}
	}
	for _, in := range []string{"gopher://x/", "https:///nohost", "http://a..b/", "http://x:0/", "::::"} {
		if _, err := norm(t, "/ws", "http_get", map[string]any{"url": in}); err == nil || err.Reason != ReasonInvalidURL {
			t.Errorf("%q: got %v, want invalid_url", in, err)
		}
	}
	n, err := norm(t, "/ws", "mcp:github/create_issue", map[string]any{})
	if err != nil || n.Action != "mcp" || n.MCP.Server != "github" || n.MCP.Tool != "create_issue" || n.MCP.Resource != nil {
		t.Errorf("shorthand: %+v %v", n, err)
	}
	n, err = norm(t, "/ws", "mcp", map[string]any{"server": "fs", "tool": "read", "resource": "file:///a"})
	if err != nil || *n.MCP.Resource != "file:///a" {
		t.Errorf("resource: %+v %v", n, err)
	}
}

func TestNormalizeRejects(t *testing.T) {
	cases := []struct {
		name, ws, action string
		args             map[string]any
		reason           string
	}{
		{"unknown action", "/ws", "teleport", map[string]any{}, ReasonUnknownAction},
		{"relative workspace", "ws", "bash", map[string]any{"command": "ls"}, ReasonInvalidRequest},
		{"unknown argument", "/ws", "bash", map[string]any{"command": "ls", "cwd": "/"}, ReasonInvalidRequest},
		{"missing argument", "/ws", "read_file", map[string]any{}, ReasonInvalidRequest},
		{"non-string", "/ws", "read_file", map[string]any{"path": 3}, ReasonInvalidRequest},
		{"NUL", "/ws", "read_file", map[string]any{"path": "a\x00b"}, ReasonInvalidEncoding},
		{"empty path", "/ws", "read_file", map[string]any{"path": ""}, ReasonInvalidPath},
		{"bad shorthand", "/ws", "mcp:github", map[string]any{}, ReasonInvalidRequest},
		// "repo/*" matched "repo/..": resources are judged by segments.
		{"mcp resource dot-dot", "/ws", "mcp", map[string]any{"server": "github", "tool": "read", "resource": "repo/.."}, ReasonInvalidRequest},
		{"mcp resource dot", "/ws", "mcp", map[string]any{"server": "github", "tool": "read", "resource": "./repo/x"}, ReasonInvalidRequest},
	}
	for _, c := range cases {
		if _, err := norm(t, c.ws, c.action, c.args); err == nil || err.Reason != c.reason {
			t.Errorf("%s: got %v, want %s", c.name, err, c.reason)
		}
	}
}

func FuzzNormalizeBash(f *testing.F) {
	for _, s := range []string{"ls -la", "a && b | c", "echo $(x) `y` <<EOF\nz\nEOF", "for i in 1; do x; done",
		"cat < a <> b >> /c/../d 2>&1 >&e >/dev/tcp/h/1", "exec 3>&- {x}<f; cd d; echo >/abs",
		// Words whose bytes are not UTF-8 once decoded, or as written.
		`cat $'\xff'`, `cat $'\377' < $'\xc3'`, "cat \xff", `cat $'\xc3'$'\xa9'`, `echo $'a\x00b'`, "cat a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		n, err := (&Normalizer{Now: fixedNow}).Normalize(ActionRequest{Action: "bash", Arguments: map[string]any{"command": cmd}, Workspace: "/ws"})
		if err != nil {
			return
		}
		if err := n.CheckText(); err != nil {
			t.Fatalf("%q: accepted but %v", cmd, err)
		}
		if len(n.Commands) > 1 && !n.ShellControl {
			t.Fatalf("%q: several commands without shell_control", cmd)
		}
		if (len(n.Paths) > 0 || len(n.Hosts) > 0) && !n.ShellControl {
			t.Fatalf("%q: redirection facets without shell_control", cmd)
		}
		for _, pa := range n.Paths {
			if !filepath.IsAbs(pa.Path) || filepath.Clean(pa.Path) != pa.Path || pa.Access != "read" && pa.Access != "write" {
				t.Fatalf("%q: path facet %+v", cmd, pa)
			}
		}
		for _, h := range n.Hosts {
			if _, err := URLHost("tcp://" + h); err != nil || strings.ToLower(h) != h {
				t.Fatalf("%q: host facet %q", cmd, h)
			}
		}
	})
}
