package mockapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// offered lists the tool names a request offers the model, across the
// three wire formats.
func offered(body []byte) []string {
	var req struct {
		Tools []struct {
			Type                 string `json:"type"`
			Name                 string `json:"name"`
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
			// Tools of a Responses API namespace (Codex's MCP servers).
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var names []string
	for _, t := range req.Tools {
		if t.Type == "namespace" {
			// Named ns__tool here, as Claude names MCP tools.
			for _, x := range t.Tools {
				names = append(names, t.Name+"__"+x.Name)
			}
			continue
		}
		if t.Name != "" {
			names = append(names, t.Name)
		}
		for _, f := range t.FunctionDeclarations {
			names = append(names, f.Name)
		}
	}
	return names
}

// namespaces lists the Responses API namespaces a request offers.
func namespaces(body []byte) []string {
	var req struct {
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	json.Unmarshal(body, &req)
	var out []string
	for _, t := range req.Tools {
		if t.Type == "namespace" {
			out = append(out, t.Name)
		}
	}
	return out
}

// OfferedTools returns the tool names the given request offered the model.
func OfferedTools(r Request) []string { return offered(r.Body) }

// wantsTool returns the call to make in reply to body, if any: the next
// scripted call, when the request offers its tool (or, for a forced call,
// any tool).
func (m *Server) wantsTool(body []byte, marker string) (Call, int, bool) {
	c, n, ok := m.nextCall(body, marker)
	tools := offered(body)
	if !ok || len(tools) == 0 || !c.Force && !slices.Contains(tools, c.Tool) {
		return Call{}, 0, false
	}
	return c, n, true
}

// anthropic answers a Messages API request.
func (m *Server) anthropic(w http.ResponseWriter, body []byte) {
	var req struct {
		Stream bool   `json:"stream"`
		Model  string `json:"model"`
	}
	json.Unmarshal(body, &req)
	call, n, tool := m.wantsTool(body, `"type":"tool_result"`)
	id := fmt.Sprintf("toolu_mock_%d", n+1)
	var block map[string]any
	stop := "end_turn"
	if tool {
		block = map[string]any{"type": "tool_use", "id": id, "name": call.Tool, "input": call.Input}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": m.text()}
	}
	out := 5
	if m.script.OutputTokens > 0 {
		out = m.script.OutputTokens
	}
	usage := map[string]any{"input_tokens": 10, "output_tokens": out}
	msg := map[string]any{"id": "msg_mock", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		msg["content"] = []any{block}
		msg["stop_reason"] = stop
		writeJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "message_start", map[string]any{"type": "message_start", "message": msg})
	if tool {
		in, _ := json.Marshal(call.Input)
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": id, "name": call.Tool, "input": map[string]any{}}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(in)}})
	} else {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": m.text()}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": out}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// responses answers an OpenAI Responses API request (always streamed).
func (m *Server) responses(w http.ResponseWriter, body []byte) {
	var req struct {
		Model string `json:"model"`
	}
	json.Unmarshal(body, &req)
	call, n, tool := m.wantsTool(body, `"type":"function_call_output"`)
	w.Header().Set("Content-Type", "text/event-stream")
	resp := map[string]any{"id": "resp_mock", "object": "response", "model": req.Model, "status": "in_progress", "output": []any{}}
	sse(w, "response.created", map[string]any{"type": "response.created", "response": resp})
	var item map[string]any
	if tool {
		args, _ := json.Marshal(call.Input)
		item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_mock_%d", n+1), "call_id": fmt.Sprintf("call_mock_%d", n+1),
			"name": call.Tool, "arguments": string(args), "status": "completed"}
		for _, ns := range namespaces(body) {
			if name, ok := strings.CutPrefix(call.Tool, ns+"__"); ok {
				item["namespace"], item["name"] = ns, name
			}
		}
	} else {
		item = map[string]any{"type": "message", "id": "msg_mock_1", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": m.text(), "annotations": []any{}}}}
		sse(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_mock_1",
			"output_index": 0, "content_index": 0, "delta": m.text()})
	}
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	resp["status"] = "completed"
	resp["output"] = []any{item}
	resp["usage"] = map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": resp})
}

// gemini answers a generateContent or streamGenerateContent request.
func (m *Server) gemini(w http.ResponseWriter, body []byte, stream bool) {
	call, _, tool := m.wantsTool(body, `"functionResponse"`)
	var part map[string]any
	if tool {
		part = map[string]any{"functionCall": map[string]any{"name": call.Tool, "args": call.Input}}
	} else {
		part = map[string]any{"text": m.text()}
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}},
			"finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		"modelVersion":  "mock",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "", resp)
}
