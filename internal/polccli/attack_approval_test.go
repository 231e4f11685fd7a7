package polccli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const attackApprovalPolicy = `package p

policies: agent: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: {
		allow: ["bash"]
		approve: [{pattern: "bash:touch *", approver: "release-manager", expires_after: "1h"}]
	}
	filesystem: {read: ["**"], write: ["**"]}
	subprocess: {mode: "allowlist", allow: ["touch *"]}
}
`

// attackRun runs polc with args in dir and returns its exit code and
// output.
func attackRun(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	code := Run(context.Background(), args, e)
	return code, stdout.String(), stderr.String()
}

// attackApprovalSetup compiles attackApprovalPolicy, makes a certifier and
// a release-manager key and the trust file naming the latter.
func attackApprovalSetup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(attackApprovalPolicy), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws"), 0o755)
	for _, args := range [][]string{{"compile", "policy.cue", "-o", "out"}, {"keygen", "release-manager", "-o", "keys"}} {
		if code, _, stderr := attackRun(t, dir, args...); code != 0 {
			t.Fatalf("%v: %d\n%s", args, code, stderr)
		}
	}
	vkey, err := os.ReadFile(filepath.Join(dir, "keys", "release-manager.vkey"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("approver:release-manager "+string(bytes.TrimSpace(vkey))+"\n"), 0o644)
	return dir
}

func attackScenario(command string, approvals ...string) string {
	s := "snapshot: out/snapshots/agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:ci\ntenant: acme\n"
	if len(approvals) > 0 {
		s += "approvals: [" + strings.Join(approvals, ", ") + "]\n"
	}
	return s + "actions:\n  - {id: act, action: bash, arguments: {command: " + command + "}}\n"
}

// TestAttackApprovalRequestTargetNotBound: whoever can write an approval
// request file (an agent, anyone on the way to the approver) rewrites
// what the approver reads — the command "touch DEPLOYED" to "touch
// notes.txt" — and keeps the subject_digest that polc approve signs. The
// file must be self-checking: polc approvals show and polc approve
// recompute the subject digest from the action, arguments, principal,
// tenant and workspace the file shows, and refuse the edited file
// (approval_request_mismatch, exit 2); the unedited one is shown as the
// exact arguments and its approval lifts the gate.
func TestAttackApprovalRequestTargetNotBound(t *testing.T) {
	dir := attackApprovalSetup(t)
	os.WriteFile(filepath.Join(dir, "harm.yaml"), []byte(attackScenario("touch DEPLOYED")), 0o644)
	code, stdout, stderr := attackRun(t, dir, "run", "harm.yaml", "--evidence", "ev1", "--state", "state.db",
		"--approval-requests", "requests", "--id-seed", "7", "--now", "2026-03-15T12:00:00Z")
	if !strings.Contains(stdout, "escalated") {
		t.Fatalf("the harmful command did not escalate: %d\n%s%s", code, stdout, stderr)
	}
	reqs, _ := filepath.Glob(filepath.Join(dir, "requests", "*.json"))
	if len(reqs) != 1 {
		t.Fatalf("approval requests: %v", reqs)
	}
	data, _ := os.ReadFile(reqs[0])
	// The attacker rewrites only what the approver reads: the file stays
	// canonical JSON (the members keep their order).
	forged := bytes.ReplaceAll(data, []byte(`touch DEPLOYED`), []byte(`touch notes.txt`))
	forged = bytes.ReplaceAll(forged, []byte(`"touch","DEPLOYED"`), []byte(`"touch","notes.txt"`))
	if bytes.Equal(forged, data) {
		t.Fatalf("request has no touch DEPLOYED:\n%s", data)
	}
	os.WriteFile(reqs[0], forged, 0o644)
	code, shown, stderr := attackRun(t, dir, "approvals", "show", reqs[0])
	if code != 2 || !strings.Contains(stderr, "approval_request_mismatch") || strings.Contains(shown, "notes.txt") {
		t.Errorf("approvals show of the edited request: exit %d, want 2 and approval_request_mismatch\n%s%s", code, shown, stderr)
	}
	code, _, stderr = attackRun(t, dir, "approve", reqs[0], "--key", "keys/release-manager.key", "-o", "a.approval", "--now", "2026-03-15T12:05:00Z")
	if code != 2 || !strings.Contains(stderr, "approval_request_mismatch") {
		t.Errorf("approve of the edited request: exit %d, want 2 and approval_request_mismatch\n%s", code, stderr)
	}
	if code == 0 {
		os.WriteFile(filepath.Join(dir, "retry.yaml"), []byte(attackScenario("touch DEPLOYED", "a.approval")), 0o644)
		attackRun(t, dir, "run", "retry.yaml", "--evidence", "ev2", "--state", "state.db",
			"--trust", "trust.txt", "--id-seed", "8", "--now", "2026-03-15T12:06:00Z")
		if _, err := os.Stat(filepath.Join(dir, "ws", "DEPLOYED")); err == nil {
			t.Fatalf("the approver was shown %q and signed; the approval ran touch DEPLOYED", shown)
		}
		return
	}

	// The file as polc wrote it: shown as the exact arguments, signed,
	// and its approval lifts the gate for the command it showed.
	os.WriteFile(reqs[0], data, 0o644)
	code, shown, stderr = attackRun(t, dir, "approvals", "show", reqs[0])
	if code != 0 || !strings.Contains(shown, `"command" = "touch DEPLOYED"`) || !strings.Contains(shown, "workspace:") {
		t.Fatalf("approvals show: %d\n%s%s", code, shown, stderr)
	}
	if code, _, stderr = attackRun(t, dir, "approve", reqs[0], "--key", "keys/release-manager.key", "-o", "a.approval", "--now", "2026-03-15T12:05:00Z"); code != 0 {
		t.Fatalf("approve: %d\n%s", code, stderr)
	}
	os.WriteFile(filepath.Join(dir, "retry.yaml"), []byte(attackScenario("touch DEPLOYED", "a.approval")), 0o644)
	code, stdout, stderr = attackRun(t, dir, "run", "retry.yaml", "--evidence", "ev2", "--state", "state.db",
		"--trust", "trust.txt", "--id-seed", "8", "--now", "2026-03-15T12:06:00Z")
	if _, err := os.Stat(filepath.Join(dir, "ws", "DEPLOYED")); err != nil {
		t.Fatalf("the approved request did not run: %d\n%s%s", code, stdout, stderr)
	}
}

// TestApprovalRequestsDirInWorkspaceRefused: an --approval-requests
// directory inside the workspace (directly or through a symlink) is where
// the agent could plant requests: polc run refuses it (exit 2).
func TestApprovalRequestsDirInWorkspaceRefused(t *testing.T) {
	dir := attackApprovalSetup(t)
	os.WriteFile(filepath.Join(dir, "harm.yaml"), []byte(attackScenario("touch DEPLOYED")), 0o644)
	os.MkdirAll(filepath.Join(dir, "ws", "sub"), 0o755)
	os.Symlink("ws/sub", filepath.Join(dir, "link"))
	os.Symlink("ws/missing", filepath.Join(dir, "dangling"))
	for _, reqDir := range []string{"ws/requests", "ws", "link/requests", "dangling"} {
		code, stdout, stderr := attackRun(t, dir, "run", "harm.yaml", "--evidence", "ev-"+filepath.Base(reqDir), "--state", "state.db",
			"--approval-requests", reqDir, "--now", "2026-03-15T12:00:00Z")
		if code != 2 || !strings.Contains(stderr, "--approval-requests") {
			t.Errorf("--approval-requests %s: exit %d, want 2\n%s%s", reqDir, code, stdout, stderr)
		}
	}
}
