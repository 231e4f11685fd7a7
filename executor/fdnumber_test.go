package executor_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/normalize"
)

// bashWrites runs src under real bash in the rig's workspace (the
// rig's recording wrappers as PATH, a 5 s limit, its own process group)
// and returns the workspace files whose content bash changed or that it
// made, absolute.
func bashWrites(t *testing.T, r *shellRig, src string) []string {
	t.Helper()
	if err := r.reset(); err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	filepath.WalkDir(r.ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			before[p], _ = os.ReadFile(p)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bash, "-c", src)
	cmd.Dir = r.ws
	cmd.Env = []string{"PATH=" + r.bin, "FUNCNEST=50", "HOME=" + filepath.Join(r.ws, "sub")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Run()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var changed []string
	filepath.WalkDir(r.ws, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			if old, ok := before[p]; !ok || !bytes.Equal(old, b) {
				changed = append(changed, p)
			}
		}
		return nil
	})
	return changed
}

// TestHugeDescriptorNumberIsRefused: bash reads the digits before a
// redirection operator as its descriptor only when the number fits in an
// int (bash 5.2: 2147483648 and above do not); otherwise they are a word
// of the command and the redirection is of the operator's default
// descriptor. The parser took "2147483648<victim.txt" as descriptor
// 2147483648, so it judged victim.txt a read only and "> /dev/stdin" as
// reopening nothing, while bash made victim.txt stdin and truncated it
// through /dev/stdin (and ran "cat 2147483648", an argv never judged).
// Such a redirection is refused; one that fits is judged as before. Every
// file bash writes must be one judged as a write, and every argv it
// executes one judged.
func TestHugeDescriptorNumberIsRefused(t *testing.T) {
	r := newShellRig(t)
	for _, src := range []string{
		"cat 2147483648<victim.txt >/dev/stdin",
		"cat 2147483648< victim.txt > /dev/fd/0",
		"cat 99999999999999999999<victim.txt >/dev/stdin",
		"cat 4294967296<a >/dev/stdin",
		"echo x 2147483648>out/x",
		"cat 02147483648<victim.txt",
	} {
		n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
			Action: "bash", Arguments: map[string]any{"command": src}, Principal: "agent:a", Tenant: "acme", Workspace: r.ws,
		})
		if nerr == nil || nerr.Reason != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %v, want %s", src, nerr, normalize.ReasonInvalidCommand)
		}
		if nerr != nil {
			continue // refused: nothing runs
		}
		for _, p := range bashWrites(t, r, src) {
			if !slices.Contains(n.Paths, normalize.PathAccess{Path: p, Access: "write"}) {
				t.Errorf("%q: bash wrote %s; polc judged %v", src, p, n.Paths)
			}
		}
		execd, _, err := r.run(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, argv := range execd {
			if !slices.ContainsFunc(n.Commands, func(j []string) bool { return r.covers(j, argv) }) {
				t.Errorf("%q: bash executed %q; polc judged %q", src, argv, n.Commands)
			}
		}
	}
}

// TestDescriptorNumberThatFitsIsJudged: the largest number bash takes as
// a descriptor is still one, and judged as such.
func TestDescriptorNumberThatFitsIsJudged(t *testing.T) {
	r := newShellRig(t)
	for _, src := range []string{"cat 2147483647<victim.txt", "cat 0002147483647<victim.txt", "echo 3>out/x"} {
		n, nerr := (&normalize.Normalizer{}).Normalize(normalize.ActionRequest{
			Action: "bash", Arguments: map[string]any{"command": src}, Principal: "agent:a", Tenant: "acme", Workspace: r.ws,
		})
		if nerr != nil {
			t.Errorf("%q: %v, want it judged", src, nerr)
			continue
		}
		if len(n.Commands) != 1 || len(n.Commands[0]) != 1 {
			t.Errorf("%q: judged %q, want the program alone", src, n.Commands)
		}
	}
}
