package executor_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/snapshot"
)

// compileNamed compiles src and returns the snapshot of policy name.
func compileNamed(t *testing.T, src, name string) *snapshot.Snapshot {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
	if res.Diagnostics.HasErrors() {
		t.Fatal(res.Diagnostics)
	}
	for _, s := range res.Snapshots {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no snapshot %q", name)
	return nil
}

// TestAttackBudgetChildWindowNotMultiple: a child may lengthen its parent's
// budget window without an expansion (docs/composition.md: "a shorter
// window than the parent's is a widening"), but windows are fixed and
// aligned to the epoch, so a longer window that is not a multiple of the
// parent's straddles the parent's windows: with the parent's calls: 5 per
// 1h, the child (window 90m) runs 10 calls within one of the parent's
// clock hours, and the parent denies the 6th of them on the same history.
func TestAttackBudgetChildWindowNotMultiple(t *testing.T) {
	src := `package p
policies: org: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["work", "other"]
	budgets: {calls: 5, window: "1h"}
}
policies: bot: {version: "1", extends: "org", budgets: window: "90m"}
`
	parent, child := compileNamed(t, src, "org"), compileNamed(t, src, "bot")
	// A 90m boundary B that is half past an hour: the parent's hour
	// [B-30m, B+30m) straddles two of the child's windows.
	b := time.UnixMicro(executor.BudgetWindowStart(budgetT0, (90 * time.Minute).Microseconds()))
	for b.Minute() != 30 {
		b = b.Add(90 * time.Minute)
	}
	hour := time.UnixMicro(executor.BudgetWindowStart(b.Add(-20*time.Minute), time.Hour.Microseconds()))
	if !hour.Equal(time.UnixMicro(executor.BudgetWindowStart(b.Add(10*time.Minute), time.Hour.Microseconds()))) {
		t.Fatal("test setup: both batches must fall in one parent window")
	}
	ran := map[string]int{}
	for _, snap := range []*snapshot.Snapshot{parent, child} {
		r := newBudgetRig(t, snap, nil, nil)
		ec := r.ctx(executor.ProfileMinimal)
		for _, at := range []time.Time{b.Add(-20 * time.Minute), b.Add(10 * time.Minute)} {
			r.clock.set(at)
			for range 5 {
				r.run(ec, "work")
			}
		}
		ran[snap.Name] = int(r.calls.Load())
	}
	if ran["bot"] > 5 {
		t.Errorf("child %q (compiled without an expansion) ran %d calls within the parent's window from %s; its parent %q allows 5 there (parent ran %d)",
			"bot", ran["bot"], hour.UTC().Format(time.RFC3339), "org", ran["org"])
	}
}
