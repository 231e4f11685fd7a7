package polccli

import (
	"os"
	"strings"
	"testing"
	"time"
)

// Progress is for terminals only: on a pipe (CI logs, the goldens, a
// redirect) nothing is started and nothing printed.
func TestProgressOnlyOnATerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if p := startProgress(&env{stderr: w}, "vet"); p != nil {
		p.stop()
		t.Fatal("progress started on a pipe")
	}
	var b lockedBuffer
	if p := startProgress(&env{stderr: &b}, "vet"); p != nil {
		p.stop()
		t.Fatal("progress started on a buffer")
	}
	var nilp *progress
	nilp.setStage("load")
	nilp.stop()
}

// After its delay the line shows the command, its stage and the seconds
// spent, rewritten in place; stop erases it, and a second stop is a no-op.
func TestProgressLine(t *testing.T) {
	var b lockedBuffer
	p := newProgress(&b, "vet", 10*time.Millisecond)
	p.setStage("resolve")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), "polc vet: resolve… 0s") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	p.stop()
	p.stop()
	out := b.String()
	if !strings.HasPrefix(out, "\r\x1b[Kpolc vet: resolve… 0s") || !strings.HasSuffix(out, "\r\x1b[K") {
		t.Fatalf("progress output %q", out)
	}
	// Fast commands print nothing at all.
	var quiet lockedBuffer
	q := newProgress(&quiet, "vet", time.Hour)
	q.stop()
	if quiet.String() != "" {
		t.Fatalf("a command faster than the delay printed %q", quiet.String())
	}
}
