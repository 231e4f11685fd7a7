package polccli

import (
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

	"polc.dev/polc/chain"
)

// TestConcurrentServeKeepsEachRequest: an independent attack ran 64
// concurrent clients against polc serve and saw an allowed
// "echo notes/s24" run as another request's "rm notes/s24" (the file was
// gone, and the chain recorded an allowed echo), echo print another
// request's argument, and ParseCommand panic: the shell parser's
// expansion state was shared by every request. The same load through the
// real HTTP server, governed: each echo prints its own argument, every
// denied rm leaves its file, and the chain verifies with one terminal per
// operation. The fixed clock and seeded id source (--now, --id-seed)
// were plain counters, so concurrent requests could draw one id twice.
func TestConcurrentServeKeepsEachRequest(t *testing.T) {
	dir := t.TempDir()
	e := compileDemo(t, dir)
	stderr := e.stderr.(*lockedBuffer)
	os.WriteFile(filepath.Join(dir, "session.yaml"), []byte(
		"snapshot: out/snapshots/demo-agent.json\nprofile: governed\nworkspace: ws\nprincipal: agent:demo\ntenant: acme\n"), 0o644)
	const callers, rounds = 64, 4
	os.MkdirAll(filepath.Join(dir, "ws", "notes"), 0o755)
	for i := 0; i < callers; i++ {
		os.WriteFile(filepath.Join(dir, "ws", "notes", fmt.Sprintf("s%d", i)), []byte("keep"), 0o644)
	}
	sock := filepath.Join(dir, "polc.sock")
	ready := make(chan string, 1)
	done := make(chan error, 1)
	// A fixed clock and seeded ids (--now, --id-seed) are read by every
	// request too: each id must stay unique.
	p := &serveParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", now: "2026-03-15T12:00:00Z", idSeed: 7},
		listen: "unix:polc.sock", ready: func(addr string) { ready <- addr }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- runServe(ctx, e, p) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, stderr.String())
	}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: callers, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	execute := func(command string) (map[string]any, error) {
		body, _ := json.Marshal(map[string]any{"action": "bash", "arguments": map[string]any{"command": command}, "timeout": "30s"})
		resp, err := client.Post("http://polc/v1/execute", "application/json", strings.NewReader(string(body)))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return m, nil
	}
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds*2)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				arg := fmt.Sprintf("notes/s%d", i)
				m, err := execute(fmt.Sprintf("echo %s r%d", arg, r))
				if err != nil {
					errs <- err.Error()
					continue
				}
				res, _ := m["result"].(map[string]any)
				if want := fmt.Sprintf("%s r%d\n", arg, r); m["kind"] != "succeeded" || res["stdout"] != want {
					errs <- fmt.Sprintf("echo %s r%d: %v %v, want %q", arg, r, m["kind"], res["stdout"], want)
				}
				m, err = execute("rm " + arg)
				if err != nil {
					errs <- err.Error()
				} else if m["kind"] != "denied" || m["call_executed"] != false {
					errs <- fmt.Sprintf("rm %s: %v", arg, m)
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	n := 0
	for e := range errs {
		if n++; n <= 10 {
			t.Error(e)
		}
	}
	if n > 10 {
		t.Errorf("… and %d more", n-10)
	}
	for i := 0; i < callers; i++ {
		if b, err := os.ReadFile(filepath.Join(dir, "ws", "notes", fmt.Sprintf("s%d", i))); err != nil || string(b) != "keep" {
			t.Errorf("sentinel s%d: %q %v", i, b, err)
		}
	}
	cancel()
	if err := <-done; err != nil && err != context.Canceled {
		t.Logf("serve: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ev", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("chains: %v", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := chain.Verify(f, chain.VerifyOptions{})
	if err != nil || !res.OK() {
		t.Fatalf("the chain does not verify: %v %+v", err, res.Findings)
	}
	data, _ := os.ReadFile(files[0])
	started, terminal := 0, 0
	ids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n\x00"), "\n") {
		r, err := chain.ParseRecord([]byte(line))
		if err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		if ids[r.RecordID] {
			t.Errorf("record id %s drawn twice", r.RecordID)
		}
		ids[r.RecordID] = true
		switch r.RecordType {
		case chain.OperationStarted:
			started++
		case chain.CallableCompleted, chain.OperationDenied, chain.CallableFailed:
			terminal++
		}
	}
	if want := callers * rounds * 2; started != want || terminal != want {
		t.Errorf("%d operation_started and %d terminals, want %d each", started, terminal, want)
	}
}
