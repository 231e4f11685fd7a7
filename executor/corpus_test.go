package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/compiler"
	"polc.dev/polc/decision"
	"polc.dev/polc/internal/compiletest"
	"polc.dev/polc/normalize"
)

// TestDecisionCorpus runs testdata/decisions/*.cue on both engines.
func TestDecisionCorpus(t *testing.T) {
	files, _ := filepath.Glob("../testdata/decisions/*.cue")
	if len(files) < 4 {
		t.Fatalf("only %d corpus files", len(files))
	}
	total := 0
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			res := compiler.Vet(compiler.Config{Dir: ".."}, []string{strings.TrimPrefix(f, "../")})
			if res.Diagnostics.HasErrors() {
				t.Fatal(res.Diagnostics)
			}
			eng := compiletest.OPA(t, res.Snapshots)
			pols := map[string]*decision.Policy{}
			for _, s := range res.Snapshots {
				p, err := decision.Compile(s)
				if err != nil {
					t.Fatal(err)
				}
				pols[s.Name] = p
			}
			for _, tc := range res.Tests {
				if tc.Note == "" {
					t.Errorf("%s: tests[%d] has no note", tc.Pos, tc.Index)
				}
				req, nerr := (&normalize.Normalizer{}).Normalize(tc.Request)
				decisions := map[string]decision.Decision{}
				if nerr != nil {
					decisions["normalizer"] = decision.Decision{Disposition: decision.Deny, Reasons: []string{nerr.Reason}}
				} else {
					decisions["native"], _ = pols[tc.Policy].Evaluate(req)
					d, err := eng.Evaluate(context.Background(), tc.Policy, req)
					if err != nil {
						t.Fatal(err)
					}
					decisions["opa"] = d
				}
				for engine, d := range decisions {
					if msg := tc.Want.Check(d); msg != "" {
						t.Errorf("%s: tests[%d] (%s): %s: %s", tc.Pos, tc.Index, tc.Note, engine, msg)
					}
				}
				total++
			}
		})
	}
	if total < 40 {
		t.Errorf("only %d corpus cases", total)
	}
	_ = os.Getenv
}
