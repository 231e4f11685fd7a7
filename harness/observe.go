package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// ObservationKind is the closed set of things a provider stream reports.
type ObservationKind string

// Observation kinds.
const (
	ObsSessionStart ObservationKind = "session_start"
	ObsToolRequest  ObservationKind = "tool_request"
	ObsToolResult   ObservationKind = "tool_result"
	ObsMessage      ObservationKind = "message"
	ObsError        ObservationKind = "error"
	ObsEnd          ObservationKind = "end"
)

// Observation is one event a provider reported about itself. It carries
// the provider's own event identity and is what the provider claims, not
// something polc verified: it is never an evidence record or a gate result
// (docs/harness.md "Plan, preflight, spawn"), and a provider-native tool
// call does not become a polc action.
type Observation struct {
	Kind     ObservationKind `json:"kind"`
	Provider string          `json:"provider"`
	// Line is the 1-based stdout line the event came from.
	Line int `json:"line"`
	// EventType is the provider's event type (system/init, item.completed, tool_use…).
	EventType string `json:"event_type"`
	// EventID is the provider's identity for the event (uuid, item id,
	// tool id), "" when the provider gives none.
	EventID   string `json:"event_id"`
	SessionID string `json:"session_id"`
	// ToolCallID links a tool request to its result.
	ToolCallID string          `json:"tool_call_id"`
	Tool       string          `json:"tool"`
	Input      json.RawMessage `json:"input,omitempty"`
	// Text is a message's text, a tool result's output or an error
	// message, truncated and with secret values redacted.
	Text    string `json:"text"`
	IsError bool   `json:"is_error"`
	// Denied is true when the provider reports that it refused the call.
	Denied bool `json:"denied"`
	// Raw is the provider's event, for session starts (whose fields the
	// attestation reads); nil otherwise.
	Raw json.RawMessage `json:"-"`
}

const maxObsText = 4096

func clip(s string) string {
	if len(s) > maxObsText {
		// Cut before a rune, not inside one: clipped text stays UTF-8.
		i := maxObsText
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		return s[:i] + "…"
	}
	return s
}

// ParseStream parses a recorded provider stream (one JSON event per line)
// into observations, as Spawn does while the provider runs.
func ParseStream(provider string, r io.Reader) ([]Observation, error) {
	p, ok := providers[provider]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", provider)
	}
	var out []Observation
	err := parseLines(p, r, func(o Observation) { out = append(out, o) })
	return out, err
}

// MaxLine is the longest stream line (in bytes, without its newline) that
// is parsed. A longer line is reported as an error observation and
// skipped; the lines after it are parsed as usual.
const MaxLine = 16 << 20

// parseLines reads r line by line and emits the observations of each
// non-blank line. Memory stays bounded by MaxLine whatever the input: an
// oversized line is consumed to its end, never kept whole.
func parseLines(p providerImpl, r io.Reader, emit func(Observation)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	size, n, blank := 0, 0, true
	for {
		chunk, err := br.ReadSlice('\n')
		blank = blank && len(bytes.TrimSpace(chunk)) == 0
		if size+len(chunk) <= MaxLine+1 {
			line = append(line, chunk...)
		}
		size += len(chunk)
		if err == bufio.ErrBufferFull {
			continue
		}
		if size > 0 {
			n++
			if bytes.HasSuffix(chunk, []byte("\n")) {
				size--
			}
			switch {
			case blank:
			case size > MaxLine:
				emit(Observation{Kind: ObsError, Provider: p.name(), Line: n, EventType: "oversized", IsError: true,
					Text: fmt.Sprintf("line of %d bytes exceeds the %d-byte limit; skipped", size, MaxLine)})
			default:
				l := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
				for _, o := range p.parse(l, n) {
					emit(o)
				}
			}
		}
		line, size, blank = line[:0], 0, true
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
