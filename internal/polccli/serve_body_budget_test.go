package polccli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/internal/strictjson"
)

// TestServeDecodeCostBound: decodeCost, which a body takes from the
// server's budget before it is decoded, is at least what decoding holds,
// for the shapes that cost the most per byte of text (small objects,
// empty arrays, long member lists) and for plain long strings.
func TestServeDecodeCostBound(t *testing.T) {
	const n = 1 << 20
	list := func(elem string) string {
		return "[" + strings.Repeat(elem+",", n/(len(elem)+1)-1) + elem + "]"
	}
	members := func(k int, v string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range k {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"%x":%s`, i, v)
		}
		return b.String() + "}"
	}
	for name, in := range map[string]string{
		"one-member objects":   list(`{"a":0}`),
		"empty objects":        list(`{}`),
		"empty arrays":         list(`[]`),
		"zeros":                list(`0`),
		"empty strings":        list(`""`),
		"nested objects":       list(`{"a":{"b":{}}}`),
		"eight-member objects": list(members(8, "0")),
		"nine-member objects":  list(members(9, "0")),
		"one large object":     members(n/12, "0"),
		"long string":          `{"content":"` + strings.Repeat("x", n) + `"}`,
		"escaped string":       `{"content":"` + strings.Repeat(`\n`, n/2) + `"}`,
	} {
		data := []byte(in)
		shape, err := jcs.Check(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		v, err := strictjson.Value(data)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(v)
		runtime.KeepAlive(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		if cost := decodeCost(len(data), shape); held > cost {
			t.Errorf("%s: decoding %d bytes holds %d bytes, more than decodeCost's %d", name, len(data), held, cost)
		} else {
			t.Logf("%s: %d bytes hold %d, cost %d (%.1fx)", name, len(data), held, cost, float64(cost)/float64(max(held, 1)))
		}
	}
}

// postBody posts body to /v1/execute and returns the status, the
// Retry-After header and the error code.
func postBody(t *testing.T, addr string, body io.Reader) (int, string, string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/execute", "application/json", body)
	if err != nil {
		t.Error(err)
		return 0, "", ""
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), errorCode(t, resp)
}

// writeBody is an execute request writing size bytes to notes/NAME.
func writeBody(name string, size int) []byte {
	prefix := `{"action":"write_file","arguments":{"path":"notes/` + name + `","content":"`
	body := make([]byte, 0, size)
	body = append(body, prefix...)
	for len(body) < size-3 {
		body = append(body, 'x')
	}
	return append(body, `"}}`...)
}

// TestConcurrentServeBodyBudget: the bodies in flight share the server's
// --body-budget (their bytes from the first one, then what decoding
// them builds). Two clients that send the headers of 4 MiB bodies and
// then stall hold 8 of its 10 MiB: every other large request is refused
// at once with 503 server_busy and Retry-After, and runs once they are
// gone. Sixteen concurrent 4 MiB requests then each get 200 or 503, and
// the heap never grows by much more than the budget. Before, there was no
// budget: each 16 MiB body cost about 125 MB, whatever the number in
// flight.
func TestConcurrentServeBodyBudget(t *testing.T) {
	const budget, size = 10 << 20, 4 << 20
	_, addr, _ := startServeWith(t, "tcp:127.0.0.1:0", func(p *serveParams) { p.bodyBudget = budget })
	var stalled []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n{\"action\"", size)
		stalled = append(stalled, c)
	}
	// The stalled bodies are admitted once a request of more than the
	// 2 MiB they leave is refused.
	probe := writeBody("probe", 3<<20)
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, _, _ := postBody(t, addr, bytes.NewReader(probe))
		if status == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stalled bodies were not admitted: %d", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	body := writeBody("big", size)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r io.Reader = bytes.NewReader(body)
			if i%2 == 1 {
				r = io.MultiReader(r) // no Content-Length: chunked
			}
			if status, retry, code := postBody(t, addr, r); status != http.StatusServiceUnavailable || retry != "1" || code != "server_busy" {
				t.Errorf("a request while the budget is held: %d, Retry-After %q, %q", status, retry, code)
			}
		}()
	}
	wg.Wait()
	for _, c := range stalled {
		c.Close()
	}
	// What can never fit is refused as such, not as busy. The server
	// gives the stalled bodies' budget back when it sees their
	// connections close, which a loaded machine may take a moment to do:
	// busy is the right answer until then.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, _, code := postBody(t, addr, bytes.NewReader(writeBody("huge", budget/2+1)))
		if status == http.StatusServiceUnavailable && code == "server_busy" && time.Now().Before(deadline) {
			continue
		}
		if status != http.StatusBadRequest || code != "invalid_input" {
			t.Errorf("a body that cannot fit: %d %q", status, code)
		}
		break
	}

	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var ok, busy atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch status, retry, code := postBody(t, addr, bytes.NewReader(body)); {
			case status == http.StatusOK:
				ok.Add(1)
			case status == http.StatusServiceUnavailable && retry == "1" && code == "server_busy":
				busy.Add(1)
			default:
				t.Errorf("request %d: %d %q %q", i, status, retry, code)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	if ok.Load() == 0 {
		t.Errorf("no request ran (%d busy)", busy.Load())
	}
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	if growth > 3*budget {
		t.Errorf("16 concurrent %d-byte bodies grew the heap by %d bytes, a budget of %d", size, growth, budget)
	}
	t.Logf("%d ran, %d busy; the heap grew by %d MiB", ok.Load(), busy.Load(), growth>>20)
	if status, _, _ := postBody(t, addr, bytes.NewReader(body)); status != http.StatusOK {
		t.Errorf("after the load: %d", status)
	}
}

// TestServeBodyErrorsArePositioned: a body that is not I-JSON is refused
// with the line and column of its first problem and what it is, in JSON's
// terms: a truncated body said only "unexpected EOF", a syntax error had
// no position, and 1e400 named the server's Go types ("cannot unmarshal
// number 1e400 into Go value of type float64"). The answer over HTTP is
// the same message, before anything is decoded.
func TestServeBodyErrorsArePositioned(t *testing.T) {
	cases := map[string]string{
		`{"action":"bash","arguments":{"x":1`:                   `1:36: unexpected end of input in object`,
		`{"action":"bash","arguments":{"x":"ab`:                 `1:38: unterminated string`,
		`{"action":"bash","arguments":{"x":1e400}}`:             `1:35: number 1e400 out of range (beyond a finite IEEE 754 double)`,
		`{"action":"bash","timeout":-1e999}`:                    `1:28: number -1e999 out of range (beyond a finite IEEE 754 double)`,
		"{\n\"action\":\"bash\",\n \"arguments\": {,}}":         `3:16: expected a member name`,
		`{"action":"bash"} x`:                                   `1:19: unexpected data after the top-level value`,
		`{"action":"bash","arguments":{"path":"a","path":"b"}}`: `1:42: member "arguments.path" given twice`,
		"{\"action\":\"bash\",\"arguments\":{\"x\":\"\xff\"}}":  `1:36: invalid UTF-8 in string`,
	}
	for body, want := range cases {
		var req executeRequest
		if err := decodeBody([]byte(body), &req); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", body, err, want)
		}
	}
	_, addr, _ := startServe(t, "tcp:127.0.0.1:0")
	for body, want := range cases {
		resp, err := http.Post("http://"+addr+"/v1/execute", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || m.Error.Code != "invalid_input" || m.Error.Message != want {
			t.Errorf("%q: %d %+v, want %s", body, resp.StatusCode, m.Error, want)
		}
	}
}
