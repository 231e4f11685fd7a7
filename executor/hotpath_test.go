package executor

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/normalize"
)

// TestFormatTime checks that chain.FormatTime, which stage 2 uses, writes
// TimeLayout as Format does, over random instants, zones and the edges of
// the four-digit years.
func TestFormatTime(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+1800), time.FixedZone("minus", -11*3600)}
	times := []time.Time{
		{}, time.Unix(0, 0), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 1000, time.UTC), time.Date(2026, 2, 28, 23, 59, 59, 999, time.UTC),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		times = append(times, time.Unix(rng.Int64N(400e9)-100e9, rng.Int64N(1e9)))
	}
	for _, tm := range times {
		for _, z := range zones {
			tz := tm.In(z)
			if got, want := chain.FormatTime(tz), tz.UTC().Format(normalize.TimeLayout); got != want {
				t.Fatalf("chain.FormatTime(%v) = %q, want %q", tz, got, want)
			}
		}
	}
}

type ctxKey string

// TestAttemptCtx checks that the callable's context behaves like
// context.WithValue over its parent.
func TestAttemptCtx(t *testing.T) {
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), ctxKey("k"), "v"), time.Hour)
	c := &attemptCtx{Context: parent, id: "attempt"}
	if id, ok := AttemptFromContext(c); !ok || id != "attempt" {
		t.Fatalf("AttemptFromContext = %q, %v", id, ok)
	}
	if c.Value(ctxKey("k")) != "v" {
		t.Fatal("the parent's values are lost")
	}
	if _, ok := AttemptFromContext(parent); ok {
		t.Fatal("the parent has an attempt id")
	}
	dl, ok := c.Deadline()
	if pdl, _ := parent.Deadline(); !ok || !dl.Equal(pdl) {
		t.Fatal("the parent's deadline is lost")
	}
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()
	cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the parent did not cancel a context derived from the callable's")
	}
	if c.Err() != context.Canceled {
		t.Fatalf("Err = %v", c.Err())
	}
}

// TestWorkspaceCache checks that the cached workspace check answers as
// the check does, whatever was checked before.
func TestWorkspaceCache(t *testing.T) {
	cases := []struct {
		ws, clean string
		ok        bool
	}{
		{"/ws/a/../b/", "/ws/b", true}, {"/ws/a/../b/", "/ws/b", true}, {"rel", "", false}, {"/ws/a/../b/", "/ws/b", true},
		{"/x\x00", "", false}, {"/x\x00", "", false}, {"/", "/", true}, {"", "", false}, {"/ws//c", "/ws/c", true},
	}
	for i, c := range cases {
		var out normalize.Normalized
		err := normalize.StartInto(&out, "a", "p", "t", c.ws, nil, time.Unix(0, 0))
		if (err == nil) != c.ok || (c.ok && out.Workspace != c.clean) {
			t.Fatalf("%d: workspace %q: %v, %q", i, c.ws, err, out.Workspace)
		}
	}
}
