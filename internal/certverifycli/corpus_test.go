package certverifycli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/certverifycli"
	"polc.dev/polc/internal/evidencegen"
)

const corpusDir = "../../testdata/evidence"

// TestCorpusUpToDate regenerates the mutation corpus and compares it with
// testdata/evidence byte for byte. POLC_UPDATE=1 rewrites it.
func TestCorpusUpToDate(t *testing.T) {
	if os.Getenv("POLC_UPDATE") != "" {
		if err := evidencegen.WriteCorpus(corpusDir); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]byte{}
	for _, c := range evidencegen.Corpus() {
		files, err := evidencegen.CaseFiles(c)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			want[filepath.Join(c.Name, name)] = b
		}
	}
	got := map[string][]byte{}
	err := filepath.WalkDir(corpusDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(corpusDir, p)
		got[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s differs from the generator's output (run POLC_UPDATE=1 go test ./internal/certverifycli)", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s is not produced by the generator", name)
		}
	}
}

type caseFile struct {
	Description string               `json:"description"`
	Args        []string             `json:"args"`
	ExitCode    int                  `json:"exit_code"`
	Findings    []evidencegen.Expect `json:"findings"`
}

type report struct {
	Verdict  string          `json:"verdict"`
	ExitCode int             `json:"exit_code"`
	Findings []chain.Finding `json:"findings"`
}

// TestCorpus runs certverify on every case directory and checks the exit
// code and the exact multiset of finding codes (and sequences where pinned).
func TestCorpus(t *testing.T) {
	dirs, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 40 {
		t.Fatalf("corpus has %d cases, want at least 40", len(dirs))
	}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(corpusDir, d.Name())
			raw, err := os.ReadFile(filepath.Join(dir, "case.json"))
			if err != nil {
				t.Fatal(err)
			}
			var c caseFile
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			rep, code, stderr := runCase(t, dir, c.Args)
			if code != c.ExitCode {
				t.Errorf("%s: exit %d, want %d\nfindings: %v\nstderr: %s", c.Description, code, c.ExitCode, rep.Findings, stderr)
			}
			if rep.ExitCode != code {
				t.Errorf("report exit_code %d, process exit %d", rep.ExitCode, code)
			}
			var gotCodes, wantCodes []string
			for _, f := range rep.Findings {
				gotCodes = append(gotCodes, string(f.Code))
			}
			for _, e := range c.Findings {
				wantCodes = append(wantCodes, string(e.Code))
				if e.Sequence == nil {
					continue
				}
				if !slices.ContainsFunc(rep.Findings, func(f chain.Finding) bool {
					return f.Code == e.Code && f.Sequence != nil && *f.Sequence == *e.Sequence
				}) {
					t.Errorf("%s: no %s finding at sequence %d in %v", c.Description, e.Code, *e.Sequence, rep.Findings)
				}
			}
			sort.Strings(gotCodes)
			sort.Strings(wantCodes)
			if strings.Join(gotCodes, ",") != strings.Join(wantCodes, ",") {
				t.Errorf("%s: findings %v, want %v\n%v", c.Description, gotCodes, wantCodes, rep.Findings)
			}
		})
	}
}

func runCase(t *testing.T, dir string, args []string) (report, int, string) {
	t.Helper()
	var mapped []string
	for _, a := range args {
		if _, err := os.Stat(filepath.Join(dir, a)); err == nil && !strings.HasPrefix(a, "-") {
			a = filepath.Join(dir, a)
		}
		mapped = append(mapped, a)
	}
	mapped = append(mapped, "--format", "json")
	var stdout, stderr bytes.Buffer
	clock := time.Unix(0, 0)
	code := certverifycli.Run(context.Background(), mapped, certverifycli.Env{Stdout: &stdout, Stderr: &stderr, Now: func() time.Time { return clock }})
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	return rep, code, stderr.String()
}
