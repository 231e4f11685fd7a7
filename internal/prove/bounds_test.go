package prove_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/internal/diag"
	. "polc.dev/polc/internal/prove"
)

// manyDenies are n filesystem denies "/**/*x*y*/**" of random short
// words over 16 letters, as in blowupDenies: the policy whose vet took
// minutes and gigabytes at 200 denies.
func manyDenies(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, 1+r.IntN(3))
		for i := range b {
			b[i] = byte('a' + r.IntN(16))
		}
		return string(b)
	}
	var out []string
	for len(out) < n {
		if d := fmt.Sprintf("/**/*%s*%s*/**", word(), word()); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func deniesPolicy(denies []string) map[string]any {
	return base(map[string]any{
		"actions":    map[string]any{"allow": []string{"write_file"}},
		"filesystem": map[string]any{"write": []string{"/**"}, "deny": denies},
	})
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// maxRSS bounds the memory of a child's questions: a generous bound, far
// under the gigabytes the product searches took.
const maxRSS = 1 << 30

// inChild runs the test named in a child process, which the parent kills
// after limit: a search that runs away is stopped, not leaked. It
// reports whether this is the child.
func inChild(t *testing.T, env string, limit time.Duration) bool {
	t.Helper()
	if os.Getenv(env) == "1" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("still running after %v (killed)\n%s", time.Since(start).Round(time.Second), out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
	return false
}

// TestBoundsManyDenies: a hundred such denies (four times the repro's):
// vet's findings and two properties over them are answered exactly — no
// rule left unanalysed, "never write:/x/**" failing (/x is not denied),
// "never" of one deny's own pattern holding (the union of the denies is
// what the search forbids) — in seconds and under 1 GB.
func TestBoundsManyDenies(t *testing.T) {
	if !inChild(t, "POLC_BOUNDS_CHILD", 20*time.Second) {
		return
	}
	denies := manyDenies(100)
	snaps := compileDecls(t, map[string]any{"p": deniesPolicy(denies)})
	pr := prover(t, snaps)
	start := time.Now()
	fs, err := pr.Lint(pr.Policies["p"], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Code == CodeUnanalysed {
			t.Errorf("under the default budget: %s", f.Message)
		}
	}
	t.Logf("lint: %d findings in %v", len(fs), time.Since(start).Round(time.Millisecond))
	if r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:/x/**")}); r.Status != Fails {
		t.Errorf("never write:/x/**: %s %s, want fails", r.Status, r.Reason)
	}
	if r := check(t, pr, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:"+denies[0])}); r.Status != Holds {
		t.Errorf("never write:%s: %s %s, want holds", denies[0], r.Status, r.Reason)
	}
	if rss := peakRSS(t); rss > maxRSS {
		t.Errorf("peak RSS %d MB, over %d MB", rss>>20, maxRSS>>20)
	} else {
		t.Logf("peak RSS %d MB, %v", rss>>20, time.Since(start).Round(time.Millisecond))
	}
}

// TestBoundsUndecided: with a budget too small for them, the questions
// are undecided, never answered by a partial search: vet's findings are
// a subset of those of the full budget (no false finding), the rules
// left out are named by one rules_unanalysed finding (and every rule
// neither reported nor left out has no finding under the full budget
// either), and a property that holds is undecided with the bound as its
// reason. A cancelled context stops a question with its error.
func TestBoundsUndecided(t *testing.T) {
	snaps := compileDecls(t, map[string]any{"p": deniesPolicy(blowupDenies)})
	full := prover(t, snaps)
	want, err := full.Lint(full.Policies["p"], nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func(f Finding) string { return f.Code + " " + f.RuleID }
	wantKeys := map[string]bool{}
	for _, f := range want {
		wantKeys[key(f)] = true
	}
	small := prover(t, snaps)
	small.Budget = 20_000
	got, err := small.Lint(small.Policies["p"], nil)
	if err != nil {
		t.Fatal(err)
	}
	var notes []Finding
	for _, f := range got {
		if f.Code == CodeUnanalysed {
			notes = append(notes, f)
			continue
		}
		if !wantKeys[key(f)] {
			t.Errorf("small budget: %s, which the full budget does not find", f.Message)
		}
	}
	if len(notes) != 1 {
		t.Fatalf("small budget: %d %s findings, want 1: %v", len(notes), CodeUnanalysed, got)
	}
	if !strings.Contains(notes[0].Message, "20000 units") || notes[0].RuleID != "" {
		t.Errorf("note: %+v", notes[0])
	}
	n, _ := strconv.Atoi(strings.Fields(notes[0].Message)[0])
	if n == 0 || n+len(got)-1 < len(want) {
		t.Errorf("%d rules left out, %d findings of %d: some rule is neither judged nor named", n, len(got)-1, len(want))
	}
	t.Logf("small budget: %d findings of %d, %s", len(got)-1, len(want), notes[0].Message)
	if diag.CodeRulesUnanalysed != CodeUnanalysed {
		t.Fatal("code mismatch")
	}

	prop := Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:"+blowupDenies[0])}
	if r := check(t, full, prop); r.Status != Holds {
		t.Fatalf("full budget: %s %s, want holds", r.Status, r.Reason)
	}
	small.Budget = 500
	if r := check(t, small, prop); r.Status != Undecided || !strings.Contains(r.Reason, "work bound of 500 units") {
		t.Errorf("budget 500: %s %q, want undecided for the bound", r.Status, r.Reason)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := full.Check(ctx, Property{Policy: "p", Kind: Never, Pattern: pat(t, "write:/**")}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v, want context.Canceled", err)
	}
}
