package polccli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
	"polc.dev/polc/snapshot"
)

// TestMCPExpectSnapshot: polc mcp --expect-snapshot serves a session whose
// snapshot has the digest given, and refuses (exit 2, nothing served) one
// whose snapshot was swapped for another policy's: a governed harness
// plan pins the snapshot it read.
func TestMCPExpectSnapshot(t *testing.T) {
	t.Parallel()
	dir := mcpSetup(t, "governed")
	data, err := os.ReadFile(filepath.Join(dir, "out", "snapshots", "mcp-agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cs, cmd, stderr := connectStdio(t, dir, "session.yaml", "--evidence", "ev", "--expect-snapshot", snap.Digest)
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatalf("list tools: %v\n%s", err, stderr.String())
	}
	if err := cs.Close(); err != nil || cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("polc mcp with the snapshot's own digest: %v, exit %d\n%s", err, cmd.ProcessState.ExitCode(), stderr.String())
	}

	// Another policy's snapshot at the same path.
	var out, errb lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, dir: dir}
	os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(strings.Replace(mcpPolicy, `"sleep *"`, `"sleep *", "python3 *"`, 1)), 0o644)
	if code := Run(context.Background(), []string{"compile", "policy.cue", "-o", "out"}, e); code != 0 {
		t.Fatalf("compile: %d\n%s", code, errb.String())
	}
	out, errb = lockedBuffer{}, lockedBuffer{}
	e = &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, dir: dir}
	if code := Run(context.Background(), []string{"mcp", "session.yaml", "--evidence", "ev", "--expect-snapshot", snap.Digest}, e); code != 2 ||
		!strings.Contains(errb.String(), "--expect-snapshot: the snapshot out/snapshots/mcp-agent.json has digest ") || out.String() != "" {
		t.Fatalf("polc mcp with a swapped snapshot: exit %d, stdout %q, stderr %s", code, out.String(), errb.String())
	}
}

// TestInspectSession: the hook a governed harness plan reads its session
// with resolves the snapshot relative to the session file (as polc mcp
// does) and reports its verified digest, the profile and the backend.
func TestInspectSession(t *testing.T) {
	t.Parallel()
	dir := mcpSetup(t, "certifiable")
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/mcp-agent.json\nprofile: certifiable\nworkspace: ws\nprincipal: agent:mcp\ntenant: acme\nbackend: inprocess\n"), 0o644)
	if harness.InspectSession == nil {
		t.Fatal("polccli does not set harness.InspectSession")
	}
	f, err := harness.InspectSession(filepath.Join(dir, "session.yaml"), filepath.Join(dir, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "out", "snapshots", "mcp-agent.json"))
	snap, _ := snapshot.Parse(data)
	if f.Snapshot != filepath.Join(dir, "out", "snapshots", "mcp-agent.json") || f.SnapshotDigest != snap.Digest || f.Profile != "certifiable" || f.Backend != "inprocess" {
		t.Fatalf("facts %+v", f)
	}
	// A snapshot whose digest does not match its content is refused.
	os.WriteFile(filepath.Join(dir, "out", "snapshots", "mcp-agent.json"), []byte(strings.Replace(string(data), `"read"`, `"write"`, 1)), 0o644)
	if _, err := harness.InspectSession(filepath.Join(dir, "session.yaml"), filepath.Join(dir, "ws")); err == nil || !strings.Contains(err.Error(), "its snapshot") {
		t.Fatalf("a tampered snapshot: %v", err)
	}
}
