package harness_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"polc.dev/polc/harness"
)

// TestRecordedStreams parses the streams the real CLIs produced against
// the mock model API (testdata/harness, written by TestRealSpawn with
// POLC_RECORD_STREAMS) and checks the observation sequence and the
// provider event identities.
func TestRecordedStreams(t *testing.T) {
	for _, c := range []struct {
		provider string
		kinds    []harness.ObservationKind
		tool     string
		output   string
	}{
		{"claude-code", []harness.ObservationKind{"session_start", "tool_request", "tool_result", "message", "end"}, "Bash", "hello-from-bash"},
		{"codex", []harness.ObservationKind{"session_start", "error", "tool_request", "tool_result", "message", "end"}, "command_execution", "hello-from-codex"},
		{"gemini-cli", []harness.ObservationKind{"session_start", "tool_request", "tool_result", "message", "end"}, "run_shell_command", "hello-from-gemini"},
	} {
		t.Run(c.provider, func(t *testing.T) {
			f, err := os.Open(filepath.Join("..", "testdata", "harness", c.provider+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			obs, err := harness.ParseStream(c.provider, f)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []harness.ObservationKind
			for _, o := range obs {
				kinds = append(kinds, o.Kind)
				if o.Provider != c.provider || o.Line == 0 || o.EventType == "" {
					t.Errorf("observation without provider identity: %+v", o)
				}
			}
			if strings.Join(toStrings(kinds), ",") != strings.Join(toStrings(c.kinds), ",") {
				t.Fatalf("kinds = %v, want %v", kinds, c.kinds)
			}
			var req, res harness.Observation
			for _, o := range obs {
				switch o.Kind {
				case harness.ObsToolRequest:
					req = o
				case harness.ObsToolResult:
					res = o
				}
			}
			if req.Tool != c.tool || req.ToolCallID == "" || req.ToolCallID != res.ToolCallID {
				t.Errorf("request %+v and result %+v are not linked by the provider's call id", req, res)
			}
			if !strings.Contains(res.Text, c.output) || res.IsError || res.Denied {
				t.Errorf("result = %+v", res)
			}
			if obs[0].SessionID == "" || obs[0].EventID == "" {
				t.Errorf("session start without provider identity: %+v", obs[0])
			}
			if end := obs[len(obs)-1]; end.IsError {
				t.Errorf("end is an error: %+v", end)
			}
		})
	}
}

func toStrings(k []harness.ObservationKind) []string {
	var s []string
	for _, x := range k {
		s = append(s, string(x))
	}
	return s
}

// TestParseDenialsAndErrors checks the shapes the pinned CLIs were seen to
// write for refused calls and failures (docs/agent-clis.md "Stream
// formats").
func TestParseDenialsAndErrors(t *testing.T) {
	cases := []struct {
		provider, line string
		kind           harness.ObservationKind
		isError        bool
		denied         bool
	}{
		{"claude-code", `{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"Permission to use Bash has been denied","is_error":true,"tool_use_id":"toolu_1"}]},"uuid":"u1","tool_result_meta":[{"id":"toolu_1","non_execution_kind":"permission-rule","permission_decision":{"decision":"reject"}}]}`, harness.ObsToolResult, true, true},
		{"claude-code", `{"type":"result","subtype":"success","is_error":true,"result":"Not logged in","uuid":"u2"}`, harness.ObsEnd, true, false},
		{"claude-code", `{"type":"system","subtype":"api_retry","attempt":3,"uuid":"u3"}`, harness.ObsError, true, false},
		{"codex", `{"type":"item.completed","item":{"id":"item_3","type":"command_execution","command":"git push","aggregated_output":"","exit_code":null,"status":"declined"}}`, harness.ObsToolResult, true, true},
		{"codex", `{"type":"turn.failed","error":{"message":"boom"}}`, harness.ObsEnd, true, false},
		{"codex", `{"type":"error","message":"Reconnecting... 2/5"}`, harness.ObsError, true, false},
		{"gemini-cli", `{"type":"tool_result","tool_id":"t1","status":"error","output":"Tool execution denied by policy.","error":{"type":"policy_violation","message":"Tool execution denied by policy."}}`, harness.ObsToolResult, true, true},
		{"gemini-cli", `{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"max turns"}}`, harness.ObsEnd, true, false},
		{"gemini-cli", `not json`, harness.ObsError, true, false},
	}
	for _, c := range cases {
		obs, err := harness.ParseStream(c.provider, strings.NewReader(c.line))
		if err != nil || len(obs) != 1 {
			t.Fatalf("%s %s: %v %v", c.provider, c.line, obs, err)
		}
		o := obs[0]
		if o.Kind != c.kind || o.IsError != c.isError || o.Denied != c.denied {
			t.Errorf("%s %s: got %+v", c.provider, c.line, o)
		}
	}
}
