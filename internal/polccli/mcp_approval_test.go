package polccli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/certverifycli"
)

// TestMCPApprovals drives the real polc mcp over stdio with the SDK's
// client through an approval's life: a git push escalates with its
// approval request (in the result and written to --approval-requests);
// a retry naming it in _meta before it is approved is refused, and so
// are approvals that are forged (an untrusted key), expired, for another
// command, or filed under another request's id; the release manager's
// approval lets the retry run (a new request: the push reaches the
// remote); presented again it is refused as replayed. The chain records
// one approval_granted, and certverify verifies the certificate with the
// approver in the trust file (its text report counts the approval) and
// refuses it without.
func TestMCPApprovals(t *testing.T) {
	dir := mcpSetup(t, "certifiable")
	ws := filepath.Join(dir, "ws")
	for _, args := range [][]string{
		{"init", "-q", "--bare", filepath.Join(dir, "remote.git")},
		{"init", "-q", "-b", "main", ws},
		{"-C", ws, "-c", "user.email=ci@example.com", "-c", "user.name=ci", "commit", "-q", "--allow-empty", "-m", "init"},
		{"-C", ws, "remote", "add", "origin", "../remote.git"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	var stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &lockedBuffer{}, stderr: &stderr, dir: dir}
	polc := func(args ...string) {
		t.Helper()
		if code := Run(context.Background(), args, e); code != 0 {
			t.Fatalf("polc %v: %d\n%s", args, code, stderr.String())
		}
	}
	polc("keygen", "release-manager", "-o", "keys")
	polc("keygen", "intern", "-o", "keys")
	vkey := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, "keys", name+".vkey"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("certifier "+vkey("certifier")+"\napprover:release-manager "+vkey("release-manager")+"\n"), 0o644)

	cs, _, serr := connectStdio(t, dir, "session.yaml", "--evidence", "ev", "--cert", "cert.json", "--sign-key", "keys/certifier.key",
		"--state", "state.db", "--trust", "trust.txt", "--approvals", "approvals", "--approval-requests", "requests")
	push := map[string]any{"command": "git push -q origin main"}
	call := func(args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, map[string]any, map[string]any) {
		t.Helper()
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: args, Meta: meta})
		if err != nil {
			t.Fatalf("call: %v\n%s", err, serr.String())
		}
		sc, _ := r.StructuredContent.(map[string]any)
		om, _ := r.Meta[outcomeMetaKey].(map[string]any)
		return r, sc, om
	}
	named := func(id any) mcp.Meta { return mcp.Meta{approvalMetaKey: id} }
	// refused checks a call that polc refused before the executor: nothing
	// ran or was recorded.
	refused := func(what string, sc map[string]any, om map[string]any, code string) {
		t.Helper()
		if sc["kind"] != "refused" || sc["reason_code"] != code || sc["call_executed"] != false || om != nil {
			t.Errorf("%s: %v %v, want refused %s", what, sc, om, code)
		}
	}
	// escalated checks a call that the gate escalated again, refusing the
	// approval presented with code.
	escalated := func(what string, r *mcp.CallToolResult, sc map[string]any, code string) {
		t.Helper()
		text := r.Content[0].(*mcp.TextContent).Text
		if !r.IsError || sc["kind"] != "escalated" || sc["reason_code"] != code || sc["approval_refusal"] != code ||
			sc["call_executed"] != false || !strings.HasPrefix(text, "escalated ("+code+"): ") {
			t.Errorf("%s: %v %q, want escalated %s", what, sc, text, code)
		}
	}

	// 1. The push escalates: its approval request is in the result and
	// in requests/<id>.json, and the text says how to retry.
	r, sc, om := call(push, nil)
	ap, _ := sc["approval"].(map[string]any)
	id, _ := ap["id"].(string)
	req, _ := sc["approval_request"].(map[string]any)
	text := r.Content[0].(*mcp.TextContent).Text
	if !r.IsError || sc["kind"] != "escalated" || id == "" || req["id"] != id || req["approver_class"] != "release-manager" ||
		!strings.Contains(text, `_meta {"polc.dev/approval": "`+id+`"}`) {
		t.Fatalf("push: %v %q", sc, text)
	}
	firstRequest := om["request_id"]
	reqFile := filepath.Join("requests", id+".json")
	if _, err := os.Stat(filepath.Join(dir, reqFile)); err != nil {
		t.Fatalf("approval request file: %v", err)
	}
	approvalFile := filepath.Join("approvals", id+".approval")

	// 2. Retries that cannot present an approval are refused up front.
	_, sc, om = call(push, named(id))
	refused("not yet approved", sc, om, "approval_not_found")
	_, sc, om = call(push, named(42))
	refused("a number", sc, om, "invalid_input")
	_, sc, om = call(push, named("../"+id))
	refused("a path", sc, om, "invalid_input")
	os.WriteFile(filepath.Join(dir, approvalFile), []byte("not an approval\n"), 0o644)
	_, sc, om = call(push, named(id))
	refused("garbage", sc, om, "approval_malformed")

	// 3. Approvals the executor refuses: the push stays escalated.
	polc("approve", reqFile, "--key", "keys/intern.key", "-o", approvalFile)
	r, sc, _ = call(push, named(id))
	escalated("forged", r, sc, "approval_forged")
	created, err := chain.ParseTime(req["created_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	polc("approve", reqFile, "--key", "keys/release-manager.key", "--expires", "1m", "-o", approvalFile,
		"--now", created.Add(-10*time.Minute).Format(time.RFC3339Nano))
	r, sc, _ = call(push, named(id))
	escalated("expired", r, sc, "approval_expired")
	polc("approve", reqFile, "--key", "keys/release-manager.key", "-o", approvalFile)
	r, sc, _ = call(map[string]any{"command": "git push -q origin HEAD:release"}, named(id))
	escalated("another command", r, sc, "approval_wrong_request")

	// 4. The approved retry runs as a new request: the push reaches the
	// remote.
	r, sc, om = call(push, named(id))
	if r.IsError || om["kind"] != "succeeded" || om["call_executed"] != true || om["request_id"] == firstRequest {
		t.Fatalf("approved retry: %v %v", sc, om)
	}
	if out, err := exec.Command("git", "-C", filepath.Join(dir, "remote.git"), "log", "--oneline", "main").CombinedOutput(); err != nil || !strings.Contains(string(out), "init") {
		t.Fatalf("the push did not reach the remote: %v %s", err, out)
	}

	// 5. Presented again, it is spent.
	r, sc, _ = call(push, named(id))
	escalated("replay", r, sc, "approval_replayed")
	// Filed under the id of that new request, it approves another one.
	next := sc["approval"].(map[string]any)["id"].(string)
	signed, _ := os.ReadFile(filepath.Join(dir, approvalFile))
	os.WriteFile(filepath.Join(dir, "approvals", next+".approval"), signed, 0o644)
	_, sc, om = call(push, named(next))
	refused("filed under another id", sc, om, "approval_wrong_request")

	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, serr.String())
	}
	path, data := verifyClosedChain(t, dir)
	if n := bytes.Count(data, []byte(`"record_type":"approval_granted"`)); n != 1 {
		t.Errorf("approval_granted records: %d, want 1", n)
	}
	certverify := func(trust string) (int, string) {
		var out bytes.Buffer
		code := certverifycli.Run(context.Background(), []string{"cert", filepath.Join(dir, "cert.json"), "--chain", path,
			"--snapshot", filepath.Join(dir, "out", "snapshots", "mcp-agent.json"), "--trust", filepath.Join(dir, trust)},
			certverifycli.Env{Stdout: &out, Stderr: &out, Now: time.Now})
		return code, out.String()
	}
	if code, out := certverify("trust.txt"); code != 0 || !strings.Contains(out, "VERIFIED") || !strings.Contains(out, "approvals 1 (") {
		t.Errorf("certverify: %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(dir, "certifier-only.txt"), []byte("certifier "+vkey("certifier")+"\n"), 0o644)
	if code, out := certverify("certifier-only.txt"); code != 1 || !strings.Contains(out, "approval_forged") {
		t.Errorf("certverify without the approver key: %d\n%s", code, out)
	}
}

// TestMCPApprovalsOff: a session served without --approvals refuses a
// call that names an approval (approval_unavailable) rather than run it
// without one, and --approvals without --trust is a usage error.
func TestMCPApprovalsOff(t *testing.T) {
	dir := mcpSetup(t, "governed")
	var stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &lockedBuffer{}, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"mcp", "session.yaml", "--evidence", "ev", "--approvals", "approvals"}, e); code != 2 ||
		!strings.Contains(stderr.String(), "--approvals needs --trust FILE") {
		t.Errorf("--approvals without --trust: %d %s", code, stderr.String())
	}
	cs, _, serr := connectStdio(t, dir, "session.yaml", "--evidence", "ev")
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo hi"},
		Meta: mcp.Meta{approvalMetaKey: "00000000-0000-4000-8000-000000000001"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r.StructuredContent)
	if sc, _ := r.StructuredContent.(map[string]any); !r.IsError || sc["reason_code"] != "approval_unavailable" || r.Meta[outcomeMetaKey] != nil {
		t.Errorf("approval without --approvals: %s", b)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, serr.String())
	}
	if _, data := verifyClosedChain(t, dir); bytes.Contains(data, []byte("operation_started")) {
		t.Errorf("the refused call was recorded:\n%s", data)
	}
}

// TestConcurrentMCPApprovalSpentOnce: eight calls at once naming the same
// approval reach the gate together; exactly one spends it and passes (the
// push runs and fails: there is no repository), the others are refused as
// replayed.
func TestConcurrentMCPApprovalSpentOnce(t *testing.T) {
	dir := mcpSetup(t, "governed")
	var stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &lockedBuffer{}, stderr: &stderr, dir: dir}
	polc := func(args ...string) {
		t.Helper()
		if code := Run(context.Background(), args, e); code != 0 {
			t.Fatalf("polc %v: %d\n%s", args, code, stderr.String())
		}
	}
	polc("keygen", "release-manager", "-o", "keys")
	vkey, _ := os.ReadFile(filepath.Join(dir, "keys", "release-manager.vkey"))
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("approver:release-manager "+string(vkey)), 0o644)
	cs, _, serr := connectStdio(t, dir, "session.yaml", "--evidence", "ev", "--state", "state.db", "--trust", "trust.txt",
		"--approvals", "approvals", "--approval-requests", "requests")
	push := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "git push origin main"}}
	r, err := cs.CallTool(context.Background(), push)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := r.StructuredContent.(map[string]any)["approval"].(map[string]any)["id"].(string)
	polc("approve", id, "--dir", "requests", "--key", "keys/release-manager.key", "-o", filepath.Join("approvals", id+".approval"))
	const n = 8
	kinds := make(chan string, n)
	for range n {
		go func() {
			// Its own params: the client writes into the call's _meta.
			r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: push.Arguments,
				Meta: mcp.Meta{approvalMetaKey: id}})
			if err != nil {
				kinds <- err.Error()
				return
			}
			sc, _ := r.StructuredContent.(map[string]any)
			om, _ := r.Meta[outcomeMetaKey].(map[string]any)
			if om["kind"] == "escalated" {
				kinds <- "escalated " + fmt.Sprint(sc["reason_code"])
				return
			}
			kinds <- "passed " + fmt.Sprint(om["call_executed"])
		}()
	}
	got := map[string]int{}
	for range n {
		got[<-kinds]++
	}
	if got["passed true"] != 1 || got["escalated approval_replayed"] != n-1 {
		t.Errorf("outcomes %v: want one passed, %d replayed", got, n-1)
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("polc mcp: %v\n%s", err, serr.String())
	}
	if _, data := verifyClosedChain(t, dir); bytes.Count(data, []byte(`"record_type":"approval_granted"`)) != 1 {
		t.Errorf("approval_granted records: want 1")
	}
}
