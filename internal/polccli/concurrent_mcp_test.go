package polccli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestConcurrentMCPCalls drives one polc mcp session (runMCP, in this
// process so that the race detector sees the server) with 32 clients'
// worth of concurrent tool calls over stdio: each echo answers its own
// argument, each denied touch leaves no file, calls run at once (eight
// one-second sleeps take far less than eight seconds), and when the client
// goes the session closes after them all with a chain that verifies.
func TestConcurrentMCPCalls(t *testing.T) {
	dir := mcpSetup(t, "governed")
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	stderr := &lockedBuffer{}
	e := &env{stdin: serverIn, stdout: serverOut, stderr: stderr, dir: dir}
	p := &mcpParams{runParams: runParams{scenario: "session.yaml", evidence: "ev", now: "2026-03-15T12:00:00Z", idSeed: 7}, grace: defaultCloseGrace}
	done := make(chan error, 1)
	go func() {
		err := runMCP(context.Background(), e, p)
		serverOut.Close()
		done <- err
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "polc-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	call := func(command string) (*mcp.CallToolResult, error) {
		return cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	}
	const callers, rounds = 32, 3
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds*2+8)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				want := fmt.Sprintf("c%d r%d\n", i, r)
				res, err := call(fmt.Sprintf("echo c%d r%d", i, r))
				if err != nil {
					errs <- err.Error()
					continue
				}
				if sc, _ := res.StructuredContent.(map[string]any); res.IsError || sc["stdout"] != want {
					errs <- fmt.Sprintf("echo c%d r%d: %v", i, r, sc)
				}
				res, err = call(fmt.Sprintf("touch notes/m%d", i))
				if err != nil {
					errs <- err.Error()
				} else if sc, _ := res.StructuredContent.(map[string]any); !res.IsError || sc["kind"] != "denied" {
					errs <- fmt.Sprintf("touch notes/m%d: %v", i, sc)
				}
			}
		}()
	}
	wg.Wait()
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := call("sleep 1"); err != nil || res.IsError {
				errs <- fmt.Sprintf("sleep: %v %v", res, err)
			}
		}()
	}
	wg.Wait()
	if el := time.Since(start); el > 6*time.Second {
		t.Errorf("eight one-second calls took %v: they did not run at once", el)
	}
	close(errs)
	n := 0
	for e := range errs {
		if n++; n <= 10 {
			t.Error(e)
		}
	}
	for i := range callers {
		if _, err := os.Stat(filepath.Join(dir, "ws", "notes", fmt.Sprintf("m%d", i))); err == nil {
			t.Errorf("the denied touch notes/m%d ran", i)
		}
	}
	cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runMCP: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the session did not close when the client went")
	}
	verifyClosedChain(t, dir)
}
