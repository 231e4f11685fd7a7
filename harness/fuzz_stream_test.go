package harness_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"polc.dev/polc/harness"
)

// addStreamSeeds seeds with the streams the real CLIs produced
// (testdata/harness): each whole, each line alone, and truncations of
// both, under their own provider and under another one.
func addStreamSeeds(f *testing.F) {
	for i, p := range harness.Providers {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "harness", p+".jsonl"))
		if err != nil {
			f.Fatal(err)
		}
		own, other := uint8(i), uint8(i+1)
		f.Add(own, data)
		f.Add(other, data)
		f.Add(own, data[:len(data)/2])
		f.Add(own, bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n\n")))
		for _, line := range bytes.Split(data, []byte("\n")) {
			f.Add(own, line)
			if len(line) > 1 {
				f.Add(own, line[:len(line)-1])
				f.Add(own, line[:len(line)/2])
			}
		}
	}
	f.Add(uint8(0), []byte(`{"type":"assistant","error":"`+string(bytes.Repeat([]byte("e"), 5000))+`"}`))
	// Three-byte runes across the 4096-byte cut.
	f.Add(uint8(0), []byte(`{"type":"assistant","error":"`+strings.Repeat("€", 2000)+`"}`))
}

// parse runs ParseStream on a reader of data, failing the test when it
// does not return within a few seconds: the stream is read as the
// provider writes it, so a parser that stalls stalls the run.
func parse(t *testing.T, provider string, data []byte) ([]harness.Observation, error) {
	type result struct {
		obs []harness.Observation
		err error
	}
	done := make(chan result, 1)
	go func() {
		obs, err := harness.ParseStream(provider, bytes.NewReader(data))
		done <- result{obs, err}
	}()
	select {
	case r := <-done:
		return r.obs, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("ParseStream(%s, %q) did not return", provider, data)
		return nil, nil
	}
}

var knownKinds = map[harness.ObservationKind]bool{
	harness.ObsSessionStart: true, harness.ObsToolRequest: true, harness.ObsToolResult: true,
	harness.ObsMessage: true, harness.ObsError: true, harness.ObsEnd: true,
}

// FuzzParseStream: whatever a provider writes to stdout, ParseStream
// neither panics nor stalls, and every observation it returns has a kind
// from the closed set, names the provider, and points (Line, 1-based) at
// a non-blank line of the stream, in stream order. Observations feed the
// run report and the attestation, which must never see an unknown kind or
// a line that does not exist.
func FuzzParseStream(f *testing.F) {
	addStreamSeeds(f)
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		provider := harness.Providers[int(sel)%len(harness.Providers)]
		obs, err := parse(t, provider, data)
		if err != nil {
			return // only a read error (an oversized line is an error observation)
		}
		lines := bytes.Split(data, []byte("\n"))
		last := 0
		for _, o := range obs {
			if !knownKinds[o.Kind] {
				t.Fatalf("%s %q: unknown kind in %+v", provider, data, o)
			}
			if o.Provider != provider {
				t.Fatalf("%s %q: provider %q in %+v", provider, data, o.Provider, o)
			}
			if o.Line < 1 || o.Line > len(lines) || o.Line < last {
				t.Fatalf("%s %q: line %d out of range or order (%d lines, previous %d)", provider, data, o.Line, len(lines), last)
			}
			if len(bytes.TrimSpace(lines[o.Line-1])) == 0 {
				t.Fatalf("%s %q: observation from blank line %d: %+v", provider, data, o.Line, o)
			}
			last = o.Line
		}
	})
}

// FuzzParseStreamFields checks what Observation's doc promises about its
// contents: Text is truncated (to 4096 bytes and an ellipsis, maxObsText)
// at a rune boundary (a stream of valid UTF-8 gives valid UTF-8 text),
// Raw is kept for session starts only and is then exactly the event's line
// (what the attestation reads), and the observation encodes as JSON (it is
// written to the run report).
func FuzzParseStreamFields(f *testing.F) {
	addStreamSeeds(f)
	const maxText = 4096 + len("…")
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		provider := harness.Providers[int(sel)%len(harness.Providers)]
		obs, err := parse(t, provider, data)
		if err != nil {
			return
		}
		lines := bytes.Split(data, []byte("\n"))
		for _, o := range obs {
			if len(o.Text) > maxText {
				t.Fatalf("%s: text of %d bytes in a %s observation (line %d)", provider, len(o.Text), o.Kind, o.Line)
			}
			if utf8.Valid(data) && !utf8.ValidString(o.Text) {
				t.Fatalf("%s: clipped text of a %s observation (line %d) is not UTF-8", provider, o.Kind, o.Line)
			}
			if o.Kind != harness.ObsSessionStart && o.Raw != nil {
				t.Fatalf("%s %q: raw event kept for a %s observation", provider, data, o.Kind)
			}
			if o.Kind == harness.ObsSessionStart && o.Line >= 1 && o.Line <= len(lines) &&
				!bytes.Equal(o.Raw, bytes.TrimSuffix(lines[o.Line-1], []byte("\r"))) {
				t.Fatalf("%s %q: session start's raw event %q is not line %d", provider, data, o.Raw, o.Line)
			}
			if _, err := json.Marshal(o); err != nil {
				t.Fatalf("%s %q: observation %+v does not encode: %v", provider, data, o, err)
			}
		}
	})
}
