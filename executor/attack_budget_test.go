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

// TestAttackBudgetVersionWindowReset: a new version of a policy that only
// lengthens its budget window is a narrowing to polc diff ("narrowed
// budgets.window"), but the ledger keys usage by the window's length, so the
// new version starts from zero inside a window where the old one already
// used the whole budget: with calls: 2, four calls run within one 2h window
// of the new version.
func TestAttackBudgetVersionWindowReset(t *testing.T) {
	v1 := compilePolicy(t, budgetPolicy(`{calls: 2, window: "1h"}`))
	v2 := compilePolicy(t, budgetPolicy(`{calls: 2, window: "2h"}`))
	if v1.PolicyID != v2.PolicyID {
		t.Fatal("test setup: same policy id expected")
	}
	ledger := executor.NewMemoryLedger()
	shared := func(c *executor.Config) { c.Budgets = ledger }
	at := budgetT0.Add(10 * time.Minute) // 12:10, inside the 2h window [12:00, 14:00)
	total := 0
	for _, snap := range []*snapshot.Snapshot{v1, v2} {
		r := newBudgetRig(t, snap, nil, shared)
		r.clock.set(at)
		ec := r.ctx(executor.ProfileMinimal)
		for range 2 {
			r.run(ec, "work")
		}
		total += int(r.calls.Load())
	}
	if total > 2 {
		t.Errorf("%d calls ran within one 2h window of a policy limited to calls: 2 (v1 used its budget; v2, a narrowing by polc diff, started again)", total)
	}
}
