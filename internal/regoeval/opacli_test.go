package regoeval_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/regoeval"
	"polc.dev/polc/internal/testutil"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// These tests run the real opa CLI, built from the module proxy at the
// version go.mod pins (scripts/opa.sh; .ci/run sets POLC_OPA).

func opaBinary(t *testing.T) string {
	bin := os.Getenv("POLC_OPA")
	if bin == "" {
		t.Skip("POLC_OPA is not set: run `export POLC_OPA=$(scripts/opa.sh)` (.ci/run does)")
	}
	return bin
}

type exampleCase struct {
	policy string
	req    *normalize.Normalized
	want   decision.Decision
}

// examples compiles the shipped examples and evaluates a set of requests
// natively: the reference the real OPA must reproduce.
func examples(t *testing.T) ([]*snapshot.Snapshot, []exampleCase) {
	res := compiler.Compile(compiler.Config{Dir: "../.."}, []string{"examples"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	n := &normalize.Normalizer{Now: func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }}
	reqs := []normalize.ActionRequest{
		{Action: "bash", Arguments: map[string]any{"command": "git diff --stat"}},
		{Action: "bash", Arguments: map[string]any{"command": "git push origin main"}},
		{Action: "bash", Arguments: map[string]any{"command": "git push --force origin main"}},
		{Action: "bash", Arguments: map[string]any{"command": "go test ./... && git status"}},
		{Action: "read_file", Arguments: map[string]any{"path": "src/main.go"}},
		{Action: "write_file", Arguments: map[string]any{"path": "/tmp/payments/out.txt"}},
		{Action: "http_get", Arguments: map[string]any{"url": "https://ci-status.acme.internal/x"}},
		{Action: "mcp:github/merge_pr", Arguments: map[string]any{}},
		{Action: "mcp:github/delete_repo", Arguments: map[string]any{}},
	}
	var cases []exampleCase
	for _, s := range res.Snapshots {
		pol, err := decision.Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, ar := range reqs {
			ar.Principal, ar.Tenant, ar.Workspace = "agent:payments-reviewer", "acme", "/workspace/payments"
			req, nerr := n.Normalize(ar)
			if nerr != nil {
				t.Fatal(nerr)
			}
			d, _ := pol.Evaluate(req)
			cases = append(cases, exampleCase{s.Name, req, d})
		}
	}
	return res.Snapshots, cases
}

func decodeDecision(t *testing.T, v any) decision.Decision {
	raw, _ := json.Marshal(v)
	var d decision.Decision
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decision %s: %v", raw, err)
	}
	return d
}

func TestOPAEvalBundle(t *testing.T) {
	bin := opaBinary(t)
	snaps, cases := examples(t)
	dir := t.TempDir()
	bb, err := compiler.WriteBundle(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	bundlePath := filepath.Join(dir, "bundle.tar.gz")
	os.WriteFile(bundlePath, bb, 0o644)
	for i, c := range cases {
		in, _ := json.Marshal(map[string]any{"policy": c.policy, "request": c.req})
		inPath := filepath.Join(dir, fmt.Sprintf("in%d.json", i))
		os.WriteFile(inPath, in, 0o644)
		out, err := exec.Command(bin, "eval", "-b", bundlePath, "-i", inPath, "--format", "json", "data.polc.decision").Output()
		if err != nil {
			t.Fatalf("opa eval: %v", err)
		}
		var rs struct {
			Result []struct {
				Expressions []struct{ Value any } `json:"expressions"`
			} `json:"result"`
		}
		if err := json.Unmarshal(out, &rs); err != nil || len(rs.Result) != 1 {
			t.Fatalf("opa eval output %s: %v", out, err)
		}
		got := decodeDecision(t, rs.Result[0].Expressions[0].Value)
		if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s %v: opa eval differs from native:\n%s", c.policy, c.req.Action, diff)
		}
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// server is a running `opa run --server`.
type server struct {
	addr   string
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, valid once exited is closed
	output *bytes.Buffer
}

// startServer runs opa run --server and waits until it answers or exits.
func startServer(t *testing.T, bin string, args ...string) *server {
	s := &server{addr: freePort(t), exited: make(chan struct{}), output: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--server", "--addr", s.addr, "--log-level", "error"}, args...)...)
	cmd.Stdout, cmd.Stderr = s.output, s.output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { cancel(); <-s.exited })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return s
		default:
		}
		resp, err := http.Get("http://" + s.addr + "/health?bundles")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("opa server did not become ready:\n%s", s.output)
	return nil
}

func queryServer(t *testing.T, addr string, c exampleCase) decision.Decision {
	body, _ := json.Marshal(map[string]any{"input": map[string]any{"policy": c.policy, "request": c.req}})
	resp, err := http.Post("http://"+addr+"/v1/data/polc/decision", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct{ Result any }
	if err := json.Unmarshal(raw, &out); err != nil || out.Result == nil {
		t.Fatalf("server answered %s: %v", raw, err)
	}
	return decodeDecision(t, out.Result)
}

func rsaKeys(t *testing.T, dir string) (priv, pub string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	pubDER, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	priv, pub = filepath.Join(dir, "priv.pem"), filepath.Join(dir, "pub.pem")
	os.WriteFile(priv, privPEM, 0o600)
	os.WriteFile(pub, pubPEM, 0o644)
	return priv, pub
}

func TestOPAServerBundles(t *testing.T) {
	bin := opaBinary(t)
	snaps, cases := examples(t)
	dir := t.TempDir()
	privPath, pubPath := rsaKeys(t, dir)
	priv, _ := os.ReadFile(privPath)

	unsigned, err := compiler.WriteBundle(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := compiler.WriteBundle(snaps, &compiler.SigningConfig{Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "unsigned.tar.gz"), unsigned, 0o644)
	os.WriteFile(filepath.Join(dir, "signed.tar.gz"), signed, 0o644)
	tampered := tamper(t, signed)
	os.WriteFile(filepath.Join(dir, "tampered.tar.gz"), tampered, 0o644)

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unsigned", []string{"--bundle", filepath.Join(dir, "unsigned.tar.gz")}},
		{"signed", []string{"--bundle", "--verification-key", pubPath, filepath.Join(dir, "signed.tar.gz")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, bin, tc.args...)
			select {
			case <-srv.exited:
				t.Fatalf("opa exited: %v\n%s", srv.err, srv.output)
			default:
			}
			for _, c := range cases {
				got := queryServer(t, srv.addr, c)
				if diff := cmp.Diff(c.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s %s: server differs from native:\n%s", c.policy, c.req.Action, diff)
				}
			}
		})
	}
	t.Run("tampered", func(t *testing.T) {
		srv := startServer(t, bin, "--bundle", "--verification-key", pubPath, filepath.Join(dir, "tampered.tar.gz"))
		select {
		case <-srv.exited:
			if srv.err == nil {
				t.Fatalf("opa accepted a tampered signed bundle:\n%s", srv.output)
			}
			if !strings.Contains(srv.output.String(), "digest mismatch") {
				t.Errorf("opa refused the bundle for another reason:\n%s", srv.output)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("opa is serving a tampered signed bundle:\n%s", srv.output)
		}
	})
}

// tamper is testutil.TamperBundle, failing t on error.
func tamper(t *testing.T, bundle []byte) []byte {
	t.Helper()
	b, err := testutil.TamperBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var _ = regoeval.Query
