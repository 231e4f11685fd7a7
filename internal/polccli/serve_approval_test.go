package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/keys"
)

// TestServeApprovals: an escalated git push answers with its approval
// request; polc approve signs it; POST /v1/approvals adds the approval to
// the session and the client's retry (a new request) passes the gate and
// reaches the call; the same approval on a third request is refused as
// replayed, and a malformed one is a 400.
func TestServeApprovals(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	stderr := e.stderr.(*lockedBuffer)
	if code := Run(context.Background(), []string{"keygen", "rm", "-o", "keys"}, e); code != 0 {
		t.Fatalf("keygen: %s", stderr.String())
	}
	vkey, _ := os.ReadFile(filepath.Join(dir, "keys", "rm.vkey"))
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("approver:release-manager "+string(vkey)), 0o644)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	sock := filepath.Join(dir, "polc.sock")
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", state: "state.db", trust: "trust.txt"},
		listen: "unix:polc.sock", ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(context.Background(), e, p) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, stderr.String())
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	call := func(path, body string) (int, map[string]any, []byte) {
		t.Helper()
		resp, err := client.Post("http://polc"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %s", path, b)
		}
		return resp.StatusCode, m, b
	}
	push := `{"action":"bash","arguments":{"command":"git push origin main"}}`
	_, m, _ := call("/v1/execute", push)
	if m["kind"] != "escalated" || m["approval_request"] == nil {
		t.Fatalf("push: %v", m)
	}
	req, _ := json.Marshal(m["approval_request"])
	os.WriteFile(filepath.Join(dir, "req.json"), append(req, '\n'), 0o644)
	if code := Run(context.Background(), []string{"approve", "req.json", "--key", "keys/rm.key", "-o", "push.approval"}, e); code != 0 {
		t.Fatalf("approve: %s", stderr.String())
	}
	signed, _ := os.ReadFile(filepath.Join(dir, "push.approval"))
	body, _ := json.Marshal(map[string]string{"approval": string(signed)})
	if status, m, _ := call("/v1/approvals", string(body)); status != http.StatusOK || m["approver_class"] != "release-manager" {
		t.Fatalf("POST /v1/approvals: %d %v", status, m)
	}
	if status, m, _ := call("/v1/approvals", `{"approval":"not an approval"}`); status != http.StatusBadRequest || m["error"].(map[string]any)["code"] != "approval_malformed" {
		t.Fatalf("malformed approval: %d %v", status, m)
	}
	// The same approval again is held once; one signed by a key the
	// trust file does not name is refused before it is held.
	if status, m, _ := call("/v1/approvals", string(body)); status != http.StatusOK || m["duplicate"] != true {
		t.Fatalf("POST of the same approval: %d %v", status, m)
	}
	if code := Run(context.Background(), []string{"keygen", "rm", "-o", "other"}, e); code != 0 {
		t.Fatalf("keygen: %s", stderr.String())
	}
	if code := Run(context.Background(), []string{"approve", "req.json", "--key", "other/rm.key", "-o", "forged.approval"}, e); code != 0 {
		t.Fatalf("approve: %s", stderr.String())
	}
	forged, _ := os.ReadFile(filepath.Join(dir, "forged.approval"))
	fbody, _ := json.Marshal(map[string]string{"approval": string(forged)})
	if status, m, _ := call("/v1/approvals", string(fbody)); status != http.StatusForbidden || m["error"].(map[string]any)["code"] != "approval_forged" {
		t.Fatalf("untrusted approval: %d %v", status, m)
	}
	// The retry passes the gate and reaches the call (there is no git
	// repository in the workspace, so the push itself fails).
	if _, m, _ := call("/v1/execute", push); m["kind"] == "escalated" || m["call_executed"] != true {
		t.Fatalf("retry: %v", m)
	}
	if _, m, _ := call("/v1/execute", push); m["kind"] != "escalated" || m["reason_code"] != "approval_replayed" || m["approval_refusal"] != "approval_replayed" {
		t.Fatalf("replay: %v", m)
	}
	if status, m, _ := call("/v1/close", `{}`); status != http.StatusOK {
		t.Fatalf("close: %d %v", status, m)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
}

// TestServeApprovalsBounded: POST /v1/approvals holds at most
// MaxSessionApprovals valid approvals (each later escalation verifies every
// one): past it the answer is 429 approval_limit and nothing is held.
func TestServeApprovalsBounded(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	stderr := e.stderr.(*lockedBuffer)
	if code := Run(context.Background(), []string{"keygen", "rm", "-o", "keys"}, e); code != 0 {
		t.Fatalf("keygen: %s", stderr.String())
	}
	vkey, _ := os.ReadFile(filepath.Join(dir, "keys", "rm.vkey"))
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("approver:release-manager "+string(vkey)), 0o644)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	signer, err := keys.ReadSigner(filepath.Join(dir, "keys", "rm.key"))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", state: "state.db", trust: "trust.txt", now: "2026-03-15T12:00:00Z"},
		listen: "unix:polc.sock", ready: func(addr string) { ready <- addr }}
	go func() { done <- runServe(context.Background(), e, p) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, stderr.String())
	}
	sock := filepath.Join(dir, "polc.sock")
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	now := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	post := func(i int) (int, string) {
		t.Helper()
		a := &approval.Approval{
			Version: 1, ApprovalID: executor.NewUUID(), RequestID: executor.NewUUID(), Decision: approval.DecisionApprove,
			ApproverClass: "release-manager", GateID: "polc.approval", KeyID: fmt.Sprintf("%s+%08x", signer.Name(), signer.KeyHash()),
			Nonce: fmt.Sprintf("%064x", i+1), PolicyDigest: strings.Repeat("b", 64), SubjectDigest: strings.Repeat("c", 64),
			IssuedAt: chain.FormatTime(now.Add(-time.Minute)), ExpiresAt: chain.FormatTime(now.Add(30 * time.Minute)),
		}
		signed, err := approval.Sign(a, signer)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]string{"approval": string(signed)})
		resp, err := client.Post("http://polc/v1/approvals", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range MaxSessionApprovals {
		if status, b := post(i); status != http.StatusOK {
			t.Fatalf("approval %d: %d %s", i, status, b)
		}
	}
	if status, b := post(MaxSessionApprovals); status != http.StatusTooManyRequests || !strings.Contains(b, "approval_limit") {
		t.Fatalf("approval past the limit: %d %s", status, b)
	}
	if status, b := post(0); status != http.StatusOK || !strings.Contains(b, `"duplicate":true`) {
		t.Fatalf("a held approval again: %d %s", status, b)
	}
	resp, err := client.Post("http://polc/v1/close", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}
}
