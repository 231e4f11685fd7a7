package builtin_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedirectionsKeepBashSemantics: polc opens each redirection's file
// before bash starts and bash reopens it through /proc/self/fd/K when the
// redirection runs, with its own flags. Run by real bash, the rewritten
// commands do what bash does with the paths: a > truncates only when it
// runs, >> appends, a loop reopens each time, 2>&1, &>, <>, >|, subshells,
// command substitutions, functions and backquotes reach the same file,
// a here-document stays text, a missing read target and a directory fail
// when the redirection runs with bash's message naming the file as
// written, and a descriptor the command names itself is never one polc
// passes. Where polc must differ, it does so as docs/executor.md says: a
// missing write target exists (empty) from the start, and a target the
// command removes first is the file it removed.
func TestRedirectionsKeepBashSemantics(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	type files map[string]string
	cases := []struct {
		name, cmd string
		before    files
		after     files
		absent    []string
		stdout    string
		stderr    string // a substring
		class     string
	}{
		{name: "truncates only when run", cmd: "false && echo x > out/f",
			before: files{"out/f": "keep\n"}, after: files{"out/f": "keep\n"}, class: "exit_status"},
		{name: "truncates when run", cmd: "true && echo x > out/f",
			before: files{"out/f": "keep\n"}, after: files{"out/f": "x\n"}},
		{name: "append", cmd: "echo a >> out/f; echo b >> out/f",
			before: files{"out/f": "keep\n"}, after: files{"out/f": "keep\na\nb\n"}},
		{name: "loop reopens", cmd: "for i in 1 2 3; do echo $i > out/last; echo $i >> out/all; done",
			after: files{"out/last": "3\n", "out/all": "1\n2\n3\n"}},
		{name: "2>&1 and &>", cmd: "{ echo o; echo e >&2; } > out/a 2>&1; { echo o; echo e >&2; } &> out/b; echo x >& out/c",
			after: files{"out/a": "o\ne\n", "out/b": "o\ne\n", "out/c": "x\n"}},
		{name: "subshell, substitution, function, backquotes", cmd: "(echo s > out/s); echo $(echo c > out/c)`echo q > out/q`; f() { echo $1 >> out/fn; }; f 1; f 2",
			after: files{"out/s": "s\n", "out/c": "c\n", "out/q": "q\n", "out/fn": "1\n2\n"}, stdout: "\n"},
		{name: "here-document is text", cmd: "cat <<EOF > out/h\nhello > out/x < in/y\nEOF",
			after: files{"out/h": "hello > out/x < in/y\n"}, absent: []string{"out/x"}},
		{name: "substitution in a here-document body", cmd: "cat <<EOF\n$(echo hd > out/hd)body\nEOF",
			after: files{"out/hd": "hd\n"}, stdout: "body\n"},
		{name: "read, and a file written then read", cmd: "cat < in/f; echo new > out/n && cat < out/n; cat < ./out//n",
			before: files{"in/f": "input\n"}, stdout: "input\nnew\nnew\n"},
		{name: "read-write and clobber", cmd: "exec 3<> out/rw; echo q >&3; exec 3>&-; echo y >| out/c; set -C; echo z > out/c",
			before: files{"out/c": "old\n"}, after: files{"out/rw": "q\n", "out/c": "y\n"}, stderr: "out/c: cannot overwrite existing file", class: "exit_status"},
		{name: "spaces and quotes", cmd: `echo x > "out/a b"; echo y > out/it\'s; cat < 'out/a b'`,
			after: files{"out/a b": "x\n", "out/it's": "y\n"}, stdout: "x\n"},
		{name: "missing read target", cmd: "cat < in/missing || echo fallback; cat < nodir/x",
			stdout: "fallback\n", stderr: "in/missing: No such file or directory", class: "exit_status"},
		{name: "directory target", cmd: "echo x > out",
			stderr: "out: Is a directory", class: "exit_status"},
		{name: "the command's own descriptors", cmd: "exec 10< in/f 11< in/f 12>&1; echo x > out/f; cat <&10",
			before: files{"in/f": "input\n"}, after: files{"in/f": "input\n", "out/f": "x\n"}, stdout: "input\n"},
		{name: "absolute target in the workspace", cmd: "echo x > $WS/out/abs; cat < $WS/out/abs",
			after: files{"out/abs": "x\n"}, stdout: "x\n"},
		{name: "missing write target is created at the start", cmd: "test -e out/new && echo exists; false && echo x > out/new",
			after: files{"out/new": ""}, stdout: "exists\n", class: "exit_status"},
		{name: "set -C sees a created target", cmd: "set -C; echo x > out/new",
			after: files{"out/new": ""}, stderr: "out/new: cannot overwrite existing file", class: "exit_status"},
		{name: "a removed target is the file removed", cmd: "rm out/f; echo x > out/f; cat < out/f",
			before: files{"out/f": "keep\n"}, absent: []string{"out/f"}, stdout: "x\n"},
		{name: "/dev/null and descriptor files untouched", cmd: "echo x > /dev/null; echo y > /dev/stdout; echo z 2>/dev/stderr",
			stdout: "y\nz\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			os.MkdirAll(filepath.Join(ws, "out"), 0o755)
			os.MkdirAll(filepath.Join(ws, "in"), 0o755)
			for p, content := range c.before {
				os.WriteFile(filepath.Join(ws, p), []byte(content), 0o644)
			}
			cmd := strings.ReplaceAll(c.cmd, "$WS", ws)
			res, err := callables(t, ws)["bash"](context.Background(), map[string]any{"command": cmd})
			if class(err) != c.class {
				t.Fatalf("%q: class %q, want %q: %v %v", cmd, class(err), c.class, res, err)
			}
			m, _ := res.(map[string]any)
			if c.stdout != "" && m["stdout"] != c.stdout {
				t.Errorf("stdout %q, want %q (stderr %q)", m["stdout"], c.stdout, m["stderr"])
			}
			if stderr, _ := m["stderr"].(string); !strings.Contains(stderr, c.stderr) || strings.Contains(stderr, "/proc/self/fd") {
				t.Errorf("stderr %q, want it to contain %q and name the file as written", stderr, c.stderr)
			}
			for p, want := range c.after {
				b, err := os.ReadFile(filepath.Join(ws, p))
				if err != nil || string(b) != want {
					t.Errorf("%s: %q %v, want %q", p, b, err, want)
				}
			}
			for _, p := range c.absent {
				if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
					t.Errorf("%s exists", p)
				}
			}
		})
	}
}

// TestRedirectionsPolcCannotOpenAreRefused: a redirection file polc
// cannot open as the policy judged it refuses the whole command before
// bash starts, so nothing of it runs: a symlink on the way
// (symlink_refused, whether inside the workspace or outside it), a
// write target whose directory does not exist yet (not_writable: bash
// would create the file if the command made the directory first, but
// there is nothing for polc to open), and a {NAME}>&- redirection, which
// could close a descriptor polc passes and let another file take its
// number (redirect_refused). A file polc created for the command's other
// redirections is removed again.
func TestRedirectionsPolcCannotOpenAreRefused(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(ws, "out"), 0o755)
	os.WriteFile(filepath.Join(ws, "out", "f"), []byte("keep\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "f"), []byte("outside\n"), 0o644)
	os.Symlink("out", filepath.Join(ws, "link"))
	os.Symlink("f", filepath.Join(ws, "out", "flink"))
	os.Symlink(outside, filepath.Join(outside, "dlink"))
	fns := callables(t, ws)
	for cmd, want := range map[string]string{
		"echo x > link/f":                                "symlink_refused",
		"echo x > out/new; echo y > link/f":              "symlink_refused",
		"echo x >> out/flink":                            "symlink_refused",
		"cat < link/f":                                   "symlink_refused",
		"echo x > " + outside + "/dlink/f":               "symlink_refused",
		"mkdir -p out/a && echo x > out/a/f":             "not_writable",
		"echo x > out/f; exec {v}>out/lock; exec {v}>&-": "redirect_refused",
	} {
		res, err := fns["bash"](context.Background(), map[string]any{"command": "touch out/ran; " + cmd})
		if class(err) != want {
			t.Errorf("%q: %v %v, want %s", cmd, res, err, want)
		}
		if _, err := os.Stat(filepath.Join(ws, "out", "ran")); err == nil {
			t.Fatalf("%q ran", cmd)
		}
	}
	for p, want := range map[string]string{filepath.Join(ws, "out", "f"): "keep\n", filepath.Join(outside, "f"): "outside\n"} {
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%s: %q", p, b)
		}
	}
	for _, p := range []string{"out/a", "out/lock", "out/new"} {
		if _, err := os.Stat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s was made", p)
		}
	}
}

// TestPassedDescriptorsStayTheirFiles: bash reopens /proc/self/fd/K when
// a redirection runs, so K must still be the file polc opened. A command
// that frees K and has another file take its number would turn
// "> out/new" into a write of that file: "BASH_XTRACEFD=K; unset
// BASH_XTRACEFD" closed K (bash fdopens the descriptor the variable
// names and closes it on unset) when polc passed the file it created
// write-only, and "exec {y}< in/f" then took K — "echo pwn > out/new"
// wrote in/f. Every descriptor polc passes is O_PATH now (bash cannot
// fdopen it), K is never a number the command names (exec 10>&-, 10<…),
// and {NAME}>&-, which closes a number known only at run time, is
// refused (TestRedirectionsPolcCannotOpenAreRefused).
func TestPassedDescriptorsStayTheirFiles(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, cmd := range []string{
		"echo > out/new; BASH_XTRACEFD=10; unset BASH_XTRACEFD; exec {y}<in/f; echo pwn > out/new",
		"echo > out/old; BASH_XTRACEFD=10; unset BASH_XTRACEFD; exec {y}<in/f; echo pwn > out/old",
		"echo > out/new; exec 10>&-; exec {y}<in/f; echo pwn > out/new",
		"exec 10<in/f 11<&10; echo pwn > out/new; echo pwn >> out/old",
	} {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, "out"), 0o755)
		os.MkdirAll(filepath.Join(ws, "in"), 0o755)
		os.WriteFile(filepath.Join(ws, "in", "f"), []byte("input\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "out", "old"), nil, 0o644)
		res, err := callables(t, ws)["bash"](context.Background(), map[string]any{"command": cmd})
		if err != nil {
			t.Errorf("%q: %v %v", cmd, res, err)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "in", "f")); string(b) != "input\n" {
			t.Errorf("%q wrote in/f: %q", cmd, b)
		}
		for _, f := range []string{"new", "old"} {
			if b, _ := os.ReadFile(filepath.Join(ws, "out", f)); strings.Contains(cmd, "> out/"+f) && string(b) != "pwn\n" {
				t.Errorf("%q: out/%s is %q", cmd, f, b)
			}
		}
	}
}
