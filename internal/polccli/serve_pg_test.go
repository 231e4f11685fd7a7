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
	"sync"
	"testing"
	"time"

	"polc.dev/polc/internal/certverifycli"
	"polc.dev/polc/internal/pgtest"
)

// TestServePostgres is docs/scale.md's run at test scale: two polc serve
// processes' sessions (certifiable, signed) write evidence and state to
// one PostgreSQL database while requests run through both at once; polc
// evidence export writes their chains, and certverify verifies each
// certificate against its exported chain.
func TestServePostgres(t *testing.T) {
	dsn := pgtest.Schema(t)
	dir := t.TempDir()
	e := compileDemo(t, dir)
	stderr := e.stderr.(*lockedBuffer)
	if code := Run(context.Background(), []string{"keygen", "certifier", "-o", "keys"}, e); code != 0 {
		t.Fatalf("keygen: %d\n%s", code, stderr.String())
	}
	type server struct {
		client *http.Client
		done   chan error
		cert   string
	}
	var servers []*server
	for i := range 2 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("session%d.yaml", i)), []byte(fmt.Sprintf(
			"snapshot: out/snapshots/demo-agent.json\nprofile: certifiable\nworkspace: ws%d\nprincipal: agent:demo\ntenant: acme\n", i)), 0o644)
		sock := filepath.Join(dir, fmt.Sprintf("polc%d.sock", i))
		ready := make(chan string, 1)
		srv := &server{done: make(chan error, 1), cert: fmt.Sprintf("cert%d.json", i)}
		p := &serveParams{runParams: runParams{scenario: fmt.Sprintf("session%d.yaml", i), evidence: dsn, state: dsn,
			cert: srv.cert, signKey: "keys/certifier.key"},
			listen: "unix:" + sock, ready: func(addr string) { ready <- addr }}
		go func() { srv.done <- runServe(context.Background(), e, p) }()
		select {
		case <-ready:
		case err := <-srv.done:
			t.Fatalf("serve %d stopped: %v\n%s", i, err, stderr.String())
		}
		srv.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		servers = append(servers, srv)
	}
	call := func(s *server, path, body string) map[string]any {
		resp, err := s.client.Post("http://polc"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s: %d %s", path, body, resp.StatusCode, b)
		}
		return m
	}
	var wg sync.WaitGroup
	for i, s := range servers {
		for j := range 6 {
			wg.Go(func() {
				body := fmt.Sprintf(`{"action":"write_file","arguments":{"path":"notes/n%d-%d.txt","content":"x\n"}}`, i, j)
				if m := call(s, "/v1/execute", body); m["kind"] != "succeeded" {
					t.Errorf("server %d write %d: %v", i, j, m)
				}
				if m := call(s, "/v1/execute", `{"action":"bash","arguments":{"command":"rm -rf notes"},"timeout":"10s"}`); m["kind"] != "denied" {
					t.Errorf("server %d rm: %v", i, m)
				}
			})
		}
	}
	wg.Wait()
	var chains []string
	for i, s := range servers {
		m := call(s, "/v1/close", "")
		ev, _ := m["evidence"].(map[string]any)
		if ev == nil || ev["store"] == nil || ev["path"] != nil {
			t.Fatalf("close %d: %v", i, m)
		}
		chains = append(chains, ev["chain_id"].(string))
		if err := <-s.done; err != nil {
			t.Fatalf("serve %d: %v\n%s", i, err, stderr.String())
		}
	}
	if err := runEvidenceExport(context.Background(), e, dsn, nil, "exported"); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr.String())
	}
	vkey, err := os.ReadFile(filepath.Join(dir, "keys", "certifier.vkey"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "trust.txt"), []byte("certifier "+strings.TrimSpace(string(vkey))+"\n"), 0o644)
	for i, id := range chains {
		var out bytes.Buffer
		if code := certverifycli.Run(context.Background(), []string{"cert", filepath.Join(dir, servers[i].cert),
			"--chain", filepath.Join(dir, "exported", id+".jsonl"),
			"--snapshot", filepath.Join(dir, "out", "snapshots", "demo-agent.json"), "--trust", filepath.Join(dir, "trust.txt")},
			certverifycli.Env{Stdout: &out, Stderr: &out, Now: time.Now}); code != 0 {
			t.Fatalf("certverify chain %s: %d\n%s", id, code, out.String())
		}
		// A session that stopped before writing its certificate: polc
		// evidence certify mints it from the database itself.
		recert := fmt.Sprintf("recert%d.json", i)
		if code := Run(context.Background(), []string{"evidence", "certify", dsn, id, "--snapshot", "out/snapshots/demo-agent.json",
			"--cert", recert, "--sign-key", "keys/certifier.key"}, e); code != 0 {
			t.Fatalf("evidence certify %s from the database: %d\n%s", id, code, stderr.String())
		}
		out.Reset()
		if code := certverifycli.Run(context.Background(), []string{"cert", filepath.Join(dir, recert),
			"--chain", filepath.Join(dir, "exported", id+".jsonl"),
			"--snapshot", filepath.Join(dir, "out", "snapshots", "demo-agent.json"), "--trust", filepath.Join(dir, "trust.txt")},
			certverifycli.Env{Stdout: &out, Stderr: &out, Now: time.Now}); code != 0 {
			t.Fatalf("certverify of the certificate certified from the database, chain %s: %d\n%s", id, code, out.String())
		}
	}
	missing := "00000000-0000-4000-8000-000000000000"
	if code := Run(context.Background(), []string{"evidence", "certify", dsn, missing, "--snapshot", "out/snapshots/demo-agent.json",
		"--cert", "none.json"}, e); code != ExitUsage || !strings.Contains(stderr.String(), "no such chain "+missing) {
		t.Fatalf("certify of a chain the database does not hold: %d\n%s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "none.json")); err == nil {
		t.Error("a certificate was written for a chain the database does not hold")
	}
}
