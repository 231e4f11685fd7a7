//go:build unix

package polccli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// waitFIFOReader waits until a process has fifo open for reading (opening
// it for writing without blocking succeeds only then) and returns the
// writer, which stays open and silent so that the reader waits.
func waitFIFOReader(t *testing.T, fifo string) *os.File {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return f
		}
		if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
			t.Fatalf("the call did not start: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawStdio is an MCP client over polc mcp's stdin and stdout written by
// hand, so that a test can do what the SDK's client does not: go away
// (close polc's stdin) with a call still unanswered.
type rawStdio struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *lockedBuffer
}

func startRawStdio(t *testing.T, dir string, args ...string) *rawStdio {
	t.Helper()
	r := &rawStdio{cmd: polcCommand(dir, append([]string{"mcp"}, args...)...), stderr: &lockedBuffer{}}
	r.cmd.Stderr = r.stderr
	var err error
	if r.in, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.out = bufio.NewReader(out)
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	r.send(t, mcpInitialize)
	if m := r.recv(t); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r
}

func (r *rawStdio) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(r.in, msg+"\n"); err != nil {
		t.Fatal(err)
	}
}

// recv reads one message (nil at the end of the output).
func (r *rawStdio) recv(t *testing.T) map[string]any {
	t.Helper()
	line, err := r.out.ReadBytes('\n')
	if err != nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%v: %q", err, line)
	}
	return m
}

// wait waits for the process to exit, and fails the test if it does not
// exit 0 within a minute.
func (r *rawStdio) wait(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("polc mcp: %v\n%s", err, r.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("polc mcp still runs\n%s", r.stderr.String())
	}
}

const catFIFO = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"cat notes/fifo"}}}`

// TestMCPDisconnectWaitsForCallsInFlight: when the client goes (closes
// polc mcp's stdin) while a call runs (cat on a FIFO nobody writes), the
// session's close waits for the call for --grace, not less, then cancels
// it: the chain records the operation cancelled, then task_closed, and
// the process exits 0. The client's going does not cancel the call at
// once, although the SDK cancels every request in flight when its input
// ends.
func TestMCPDisconnectWaitsForCallsInFlight(t *testing.T) {
	dir := mcpSetup(t, "governed")
	fifo := filepath.Join(dir, "ws", "notes", "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRawStdio(t, dir, "session.yaml", "--evidence", "ev", "--grace", "500ms")
	r.send(t, catFIFO)
	w := waitFIFOReader(t, fifo)
	defer w.Close()
	start := time.Now()
	r.in.Close()
	r.wait(t)
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Errorf("the session closed after %v, before its grace", el)
	}
	_, data := verifyClosedChain(t, dir)
	if !bytes.Contains(data, []byte(`"record_type":"operation_cancelled"`)) {
		t.Errorf("the call in flight was not recorded cancelled:\n%s", data)
	}
}

// TestMCPClosesOnSignal: SIGTERM closes the session as the client's going
// does — a call in flight is awaited for the grace, then cancelled, and
// its answer (cancelled) still reaches the client, which is there; a call
// after the close began is refused — and the process exits 0 with the
// chain closed.
func TestMCPClosesOnSignal(t *testing.T) {
	dir := mcpSetup(t, "governed")
	fifo := filepath.Join(dir, "ws", "notes", "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRawStdio(t, dir, "session.yaml", "--evidence", "ev", "--grace", "3s")
	r.send(t, catFIFO)
	w := waitFIFOReader(t, fifo)
	defer w.Close()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Sent once the close has begun (the signal is delivered
	// asynchronously: a call read before it is handled rightly runs) and
	// before it finishes (it waits the grace for the call in flight):
	// refused.
	time.Sleep(500 * time.Millisecond)
	r.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo late"}}}`)
	seen := map[float64]map[string]any{}
	for m := r.recv(t); m != nil; m = r.recv(t) {
		if id, ok := m["id"].(float64); ok {
			seen[id] = m
		}
	}
	r.in.Close()
	r.wait(t)
	res, _ := seen[2]["result"].(map[string]any)
	if sc, _ := res["structuredContent"].(map[string]any); res["isError"] != true || sc["kind"] != "cancelled" {
		t.Errorf("the call in flight: %v", seen[2])
	}
	if late, _ := seen[3]["result"].(map[string]any); late != nil && late["isError"] != true {
		t.Errorf("a call after SIGTERM ran: %v", seen[3])
	}
	_, data := verifyClosedChain(t, dir)
	if bytes.Contains(data, []byte("late")) {
		t.Errorf("the late call is in the chain")
	}
}

// TestMCPClientCancelsCall: the client's notifications/cancelled for a
// call cancels it at once (the close's grace, 30s here, is not waited
// for): the command is gone within seconds and the chain records the
// operation cancelled.
func TestMCPClientCancelsCall(t *testing.T) {
	dir := mcpSetup(t, "governed")
	fifo := filepath.Join(dir, "ws", "notes", "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRawStdio(t, dir, "session.yaml", "--evidence", "ev")
	r.send(t, catFIFO)
	w := waitFIFOReader(t, fifo)
	defer w.Close() // open and silent: cat waits, unless cancelled
	r.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
	// With no reader left, opening the FIFO for writing fails (ENXIO).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, syscall.ENXIO) {
			break
		}
		if err == nil {
			f.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call still runs: %v", err)
		}
	}
	r.in.Close()
	r.wait(t)
	_, data := verifyClosedChain(t, dir)
	if !bytes.Contains(data, []byte(`"record_type":"operation_cancelled"`)) {
		t.Errorf("the cancelled call is not recorded cancelled:\n%s", data)
	}
}
