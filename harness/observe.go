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
// (ADR-0121 D7), and a provider-native tool call does not become a polc
// action.
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
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Observation
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		out = append(out, p.parse(sc.Bytes(), n)...)
	}
	return out, sc.Err()
}
