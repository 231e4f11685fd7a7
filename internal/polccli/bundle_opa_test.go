package polccli

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/internal/testutil"
)

// TestOPAVerifiesKeygenBundle runs what docs/bundle.md tells a user to
// run, end to end, against the real opa (POLC_OPA): polc keygen
// --key-format pem, polc compile --sign-key, then opa run --server
// --bundle --verification-key with the public key. OPA serves the signed
// bundle, refuses a copy whose data was changed after signing, and refuses
// the bundle under another key.
func TestOPAVerifiesKeygenBundle(t *testing.T) {
	bin := os.Getenv("POLC_OPA")
	if bin == "" {
		t.Skip("POLC_OPA is not set: run `export POLC_OPA=$(scripts/opa.sh)` (.ci/run does)")
	}
	dir := t.TempDir()
	e := compileDemo(t, dir) // an environment in dir
	examples, _ := filepath.Abs("../../examples")
	req := `{"action": "mcp:github/merge_pr", "arguments": {}, "principal": "agent:payments-reviewer", "tenant": "acme", "workspace": "/workspace/payments", "time": "2026-11-30T12:00:00Z"}`
	if err := os.WriteFile(filepath.Join(dir, "req.json"), []byte(req), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout := e.stdout.(*lockedBuffer)
	before := len(stdout.String()) // compileDemo's output
	for _, args := range [][]string{
		{"normalize", "--input", "req.json"},
		{"keygen", "bundle", "-o", "keys", "--key-format", "pem"},
		{"keygen", "other", "-o", "keys", "--key-format", "pem"},
		{"compile", examples, "-o", "signed", "--sign-key", "keys/bundle.pem"},
	} {
		if code := Run(context.Background(), args, e); code != 0 {
			t.Fatalf("polc %v: exit %d\n%s", args, code, e.stderr.(*lockedBuffer).String())
		}
		if args[0] == "normalize" {
			req = stdout.String()[before:]
		}
	}
	signed := filepath.Join(dir, "signed", "bundle.tar.gz")
	data, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(dir, "tampered.tar.gz")
	if err := os.WriteFile(tampered, tamperBundle(t, data), 0o644); err != nil {
		t.Fatal(err)
	}
	pub, other := filepath.Join(dir, "keys", "bundle.pub.pem"), filepath.Join(dir, "keys", "other.pub.pem")

	out, code := runOPA(t, bin, req, "--verification-key", pub, "--signing-alg", "ES256", signed)
	if code != 0 || !strings.Contains(out, `"disposition":"escalate"`) {
		t.Fatalf("opa did not serve the signed bundle (exit %d):\n%s", code, out)
	}
	out, code = runOPA(t, bin, req, "--verification-key", pub, "--signing-alg", "ES256", tampered)
	if code == 0 || !strings.Contains(out, "digest mismatch") {
		t.Errorf("opa did not refuse the tampered bundle for its digest (exit %d):\n%s", code, out)
	}
	out, code = runOPA(t, bin, req, "--verification-key", other, "--signing-alg", "ES256", signed)
	if code == 0 || !strings.Contains(out, "verify") {
		t.Errorf("opa did not refuse the bundle under another key (exit %d):\n%s", code, out)
	}
}

// runOPA starts opa run --server --bundle ARGS... and asks it for the
// decision on a normalized request for the payments reviewer. It returns the answer (or opa's output when it
// exited) and opa's exit code (0 while it serves).
func runOPA(t *testing.T, bin, normalized string, args ...string) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var output lockedBuffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--server", "--addr", addr, "--log-level", "error", "--bundle"}, args...)...)
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cancel(); <-exited }()
	req := `{"input": {"policy": "payments-reviewer", "request": ` + normalized + `}}`
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case <-exited:
			return output.String(), cmd.ProcessState.ExitCode()
		default:
		}
		resp, err := http.Get("http://" + addr + "/health?bundles")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			continue
		}
		resp, err = http.Post("http://"+addr+"/v1/data/polc/decision", "application/json", strings.NewReader(req))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body), 0
	}
	t.Fatalf("opa neither served nor exited:\n%s", output.String())
	return "", 0
}

// tamperBundle is testutil.TamperBundle, failing t on error.
func tamperBundle(t *testing.T, bundle []byte) []byte {
	t.Helper()
	b, err := testutil.TamperBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
