//go:build unix

package polccli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"polc.dev/polc/chain"
)

// TestServeCloseCancelsAfterGrace: /v1/close waits for the actions in
// flight, but not forever: an action with no timeout (here `cat` on a FIFO
// nobody writes) is cancelled once the close's grace has passed, its
// operation is recorded as cancelled, and the close answers. Before, the
// close waited for it without bound.
func TestServeCloseCancelsAfterGrace(t *testing.T) {
	dir, addr, done := startServe(t, "tcp:127.0.0.1:0")
	notes := filepath.Join(dir, "ws", "notes")
	if err := os.MkdirAll(notes, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(notes, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	executed := make(chan map[string]any, 1)
	go func() {
		m := map[string]any{}
		resp, err := http.Post("http://"+addr+"/v1/execute", "application/json",
			strings.NewReader(`{"action":"bash","arguments":{"command":"cat notes/fifo"}}`))
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
		}
		executed <- m
	}()
	// The action is in flight once cat has the FIFO open: opening it for
	// writing without blocking succeeds only then. The writer stays open
	// and silent, so cat waits.
	var w *os.File
	for deadline := time.Now().Add(10 * time.Second); ; {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			w = f
			break
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("the action did not start: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer w.Close()

	if resp, err := http.Post("http://"+addr+"/v1/close", "application/json", strings.NewReader(`{"grace":"-1s"}`)); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a negative grace: %v %v", resp, err)
	}
	start := time.Now()
	resp, err := http.Post("http://"+addr+"/v1/close", "application/json", strings.NewReader(`{"grace":"200ms"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("close: %d %s", resp.StatusCode, body)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("the close answered after %v, before its grace", el)
	}
	if m := <-executed; m["kind"] != "cancelled" {
		t.Errorf("the action in flight ended %v, want cancelled", m)
	}
	err = <-done
	done <- err // for startServe's cleanup
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	var close struct {
		Evidence struct{ Path string } `json:"evidence"`
	}
	if err := json.Unmarshal(body, &close); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, close.Evidence.Path))
	if err != nil {
		t.Fatal(err)
	}
	res, err := chain.Verify(bytes.NewReader(raw), chain.VerifyOptions{RequireClosed: true})
	if err != nil || !res.OK() || !bytes.Contains(raw, []byte(`"record_type":"operation_cancelled"`)) {
		t.Fatalf("chain: %v %+v", err, res.Findings)
	}
}
