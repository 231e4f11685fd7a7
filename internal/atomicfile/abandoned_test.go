//go:build unix

package atomicfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestAbandonedSkipsLiveWriters: Abandoned lists the temporary files of
// WriteFile that nobody holds (their writer was killed before the rename)
// and not the one a writer is still working on (here, stopped in its
// then callback), nor other files.
func TestAbandonedSkipsLiveWriters(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		".cert.json.tmp-123": "partial", // a killed writer's
		".a.tmp-":            "",        // no suffix: not WriteFile's
		"b.tmp-1":            "",        // not hidden: not WriteFile's
		"cert.json":          "{}",
	} {
		os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644)
	}
	listed := make(chan []Temp, 1)
	err := WriteFileThen(filepath.Join(dir, "live.json"), []byte("{}"), 0o644, func() error {
		temps, locks, err := Abandoned(dir)
		for _, f := range locks {
			f.Close()
		}
		listed <- temps
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Temp{{Path: filepath.Join(dir, ".cert.json.tmp-123"), Target: "cert.json", Suffix: "123"}}
	if got := <-listed; !slices.Equal(got, want) {
		t.Errorf("while live.json is written: %+v, want %+v", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "live.json")); err != nil || string(b) != "{}" {
		t.Errorf("live.json: %q %v", b, err)
	}
	// The lock is the caller's until it closes the file: a second look
	// does not list it.
	temps, locks, err := Abandoned(dir)
	if err != nil || len(temps) != 1 {
		t.Fatalf("%+v %v", temps, err)
	}
	again, _, _ := Abandoned(dir)
	if len(again) != 0 {
		t.Errorf("listed while held: %+v", again)
	}
	locks[0].Close()
}
