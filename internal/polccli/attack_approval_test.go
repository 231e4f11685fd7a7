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

// TestAttackApprovalRequestTargetNotBound: what polc approvals show prints
// (action, target commands, principal) is not bound to the subject digest
// that polc approve signs, and polc approve checks neither the request's
// integrity nor its origin. Whoever can write the approval-requests
// directory (an agent whose write roots hold it, or anyone on the way to
// the approver) rewrites the target of a harmful request to a harmless
// one: the approver reads "touch notes.txt", signs, and the approval lifts
// the gate for "touch DEPLOYED".
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
	// The attacker rewrites only what the approver reads: the file stays
	// canonical JSON (the members keep their order).
	data, _ := os.ReadFile(reqs[0])
	forged := bytes.Replace(data, []byte(`"commands":[["touch","DEPLOYED"]]`), []byte(`"commands":[["touch","notes.txt"]]`), 1)
	if bytes.Equal(forged, data) {
		t.Fatalf("request has no touch DEPLOYED target:\n%s", data)
	}
	os.WriteFile(reqs[0], forged, 0o644)
	_, shown, _ := attackRun(t, dir, "approvals", "show", reqs[0])
	approverSees := strings.Contains(shown, "touch notes.txt") && !strings.Contains(shown, "DEPLOYED")
	code, _, stderr = attackRun(t, dir, "approve", reqs[0], "--key", "keys/release-manager.key", "-o", "a.approval", "--now", "2026-03-15T12:05:00Z")
	if code != 0 {
		t.Logf("polc approve refused the rewritten request (held): %d %s", code, stderr)
		return
	}
	os.WriteFile(filepath.Join(dir, "retry.yaml"), []byte(attackScenario("touch DEPLOYED", "a.approval")), 0o644)
	code, stdout, stderr = attackRun(t, dir, "run", "retry.yaml", "--evidence", "ev2", "--state", "state.db",
		"--trust", "trust.txt", "--id-seed", "8", "--now", "2026-03-15T12:06:00Z")
	if _, err := os.Stat(filepath.Join(dir, "ws", "DEPLOYED")); err == nil && approverSees {
		t.Fatalf("the approver was shown %q and signed; the approval ran touch DEPLOYED:\n%s", shown, stdout)
	}
	t.Logf("held: %d\n%s%s", code, stdout, stderr)
}
