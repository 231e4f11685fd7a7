package executor_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"polc.dev/polc/compiler"
	"polc.dev/polc/executor"
	"polc.dev/polc/snapshot"
)

// TestBudgetChildWindowWithinParentWindows: a child may lengthen its
// parent's budget window without an expansion, but windows are fixed and
// aligned to the epoch, so a longer window that is not a whole multiple of
// the parent's straddles the parent's windows. With the parent's calls: 5
// per 1h, a child with a 90m window (which compiled without an expansion)
// ran 10 calls within one of the parent's clock hours. Now such a window
// is expansion_unauthorized, and a child whose window is a multiple never
// runs more than the parent's limit within one of the parent's windows,
// however its calls are spread.
func TestBudgetChildWindowWithinParentWindows(t *testing.T) {
	const limit = 5
	parentWindow := time.Hour
	for _, c := range []struct {
		window   string
		multiple bool
	}{{"90m", false}, {"150m", false}, {"2h", true}, {"3h", true}, {"5h", true}} {
		src := `package p
policies: org: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["work", "other"]
	budgets: {calls: 5, window: "1h"}
}
policies: bot: {version: "1", extends: "org", budgets: window: "` + c.window + `"}
`
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		res := compiler.Compile(compiler.Config{Dir: dir}, []string{"p.cue"})
		if res.Diagnostics.HasErrors() {
			if c.multiple {
				t.Errorf("window %s, a multiple of the parent's: %v", c.window, res.Diagnostics)
			}
			for _, d := range res.Diagnostics.Errors() {
				if d.Code != "expansion_unauthorized" || d.Pos.Line != 9 {
					t.Errorf("window %s: %v, want expansion_unauthorized at the child's budgets.window", c.window, d)
				}
			}
			continue
		}
		if !c.multiple {
			t.Errorf("window %s, not a multiple of the parent's 1h, compiled without an expansion", c.window)
		}
		child := res.Snapshots[0]
		if child.Name != "bot" {
			t.Fatalf("snapshots %v", res.Snapshots)
		}
		// The most calls one of the parent's windows can see: in each of
		// the child's windows that meets it, the child's limit, spent
		// inside the parent's window (a fresh rig for each parent window,
		// so that no earlier spending hides any).
		childWindow := *budgetWindow(t, child)
		ran := map[int64]int{} // by the parent's window
		for h := range 12 {
			start := budgetT0.Add(time.Duration(h) * parentWindow)
			end := start.Add(parentWindow)
			r := newBudgetRig(t, child, nil, nil)
			ec := r.ctx(executor.ProfileMinimal)
			for cs := executor.BudgetWindowStart(start, childWindow); cs < end.UnixMicro(); cs += childWindow {
				at := time.UnixMicro(max(cs, start.UnixMicro())).UTC()
				r.clock.set(at)
				for range limit {
					if out := r.run(ec, "work"); out.Kind() == executor.KindSucceeded {
						ran[executor.BudgetWindowStart(at, parentWindow.Microseconds())]++
					}
				}
			}
		}
		for _, start := range slices.Sorted(maps.Keys(ran)) {
			if n := ran[start]; n > limit {
				t.Errorf("child %q (window %s, compiled without an expansion) ran %d calls within the parent's window from %s; its parent allows %d there",
					"bot", c.window, n, time.UnixMicro(start).UTC().Format(time.RFC3339), limit)
			}
		}
		if len(ran) != 12 {
			t.Errorf("window %s: calls ran in %d of the 12 parent windows, want every one", c.window, len(ran))
		}
	}
}

// budgetWindow returns the window of s's budget rules.
func budgetWindow(t *testing.T, s *snapshot.Snapshot) *int64 {
	t.Helper()
	for _, r := range s.CompiledRules {
		if b, ok := r.(*snapshot.BudgetRule); ok && b.WindowMicroseconds != nil {
			return b.WindowMicroseconds
		}
	}
	t.Fatalf("%s has no budget window", s.Name)
	return nil
}
