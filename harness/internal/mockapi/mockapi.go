// Package mockapi is a loopback model API for driving the real provider
// CLIs in tests without credentials or network. It speaks the three wire
// formats the pinned CLIs use (docs/harness.md):
//
//   - Anthropic Messages API (POST /v1/messages, SSE when "stream": true)
//     for Claude Code, pointed at it with ANTHROPIC_BASE_URL;
//   - OpenAI Responses API (POST /v1/responses, SSE) for Codex, through a
//     custom model provider with wire_api = "responses";
//   - Gemini API (POST /v1beta/models/M:streamGenerateContent?alt=sse and
//     :generateContent) for Gemini CLI, through GOOGLE_GEMINI_BASE_URL.
//
// The server is stateless: a request whose conversation does not yet hold
// a tool result is answered with one call of the scripted tool; a request
// that holds one is answered with the scripted final text. Every request
// body is recorded so that tests can assert what the provider sent (for
// example the tools it offered the model).
package mockapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Script says what the model does.
type Script struct {
	// Tool is the provider tool name to call (Bash, exec_command,
	// run_shell_command). Empty means the model answers with Text at once.
	Tool string
	// Input is the tool call's arguments.
	Input map[string]any
	// Calls, when set, replaces Tool and Input: the model makes these
	// calls one after the other, each once the previous one has a result.
	Calls []Call
	// Text is the final assistant message.
	Text string
	// OutputTokens is the output token count every Anthropic reply
	// reports (default 5): a large one makes a run cost money.
	OutputTokens int
}

// Call is one tool call of a Script.
type Call struct {
	Tool  string
	Input map[string]any
	// Force makes the call even when the request does not offer the
	// tool (a tool the plan keeps from the model); it is still made only
	// in a request that offers some tool, so that a provider's side
	// requests (titles, summaries) get text.
	Force bool
}

// Request is one recorded request.
type Request struct {
	Method, Path string
	Body         []byte
}

// Server is a running mock model API.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT.
	URL    string
	script Script
	srv    *http.Server
	mu     sync.Mutex
	reqs   []Request
}

// Start starts a server on a loopback port; it stops when the test ends.
func Start(t testing.TB, s Script) *Server {
	t.Helper()
	m, err := Listen("127.0.0.1:0", s)
	if err != nil {
		t.Fatalf("mockapi: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Listen starts a server on addr, which must be a loopback address.
func Listen(addr string, s Script) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("mockapi: %s is not a loopback address", addr)
	}
	m := &Server{URL: "http://" + ln.Addr().String(), script: s}
	m.srv = &http.Server{Handler: m}
	go m.srv.Serve(ln)
	return m, nil
}

// Close stops the server.
func (m *Server) Close() error { return m.srv.Close() }

// Requests returns the requests received so far.
func (m *Server) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.reqs...)
}

// ServeHTTP implements http.Handler.
func (m *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	m.mu.Lock()
	m.reqs = append(m.reqs, Request{Method: r.Method, Path: r.URL.String(), Body: body})
	m.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/count_tokens"):
		writeJSON(w, map[string]any{"input_tokens": 10})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages"):
		m.anthropic(w, body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses"):
		m.responses(w, body)
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, ":streamGenerateContent"):
		m.gemini(w, body, true)
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, ":generateContent"):
		m.gemini(w, body, false)
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, ":countTokens"):
		writeJSON(w, map[string]any{"totalTokens": 10})
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func sse(w http.ResponseWriter, event string, v any) {
	b, _ := json.Marshal(v)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// calls returns the script's calls.
func (m *Server) calls() []Call {
	if m.script.Calls != nil {
		return m.script.Calls
	}
	if m.script.Tool == "" {
		return nil
	}
	return []Call{{Tool: m.script.Tool, Input: m.script.Input}}
}

// nextCall returns the call to answer a request with, and its index: the
// first call whose result the conversation does not hold yet. ok is false
// when every call has a result (or none is scripted): the reply is text.
func (m *Server) nextCall(body []byte, resultMarker string) (c Call, n int, ok bool) {
	calls := m.calls()
	n = bytes.Count(body, []byte(resultMarker))
	if n >= len(calls) {
		return Call{}, n, false
	}
	return calls[n], n, true
}

func (m *Server) text() string {
	if m.script.Text == "" {
		return "Done."
	}
	return m.script.Text
}
