package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentClients runs 32 clients at once, a mix of plain HTTP and
// CONNECT to admitted and refused hosts (and malformed requests), with
// MaxConns below 32 so some wait, and checks each got its own answer and
// the log has exactly one entry per connection, each agreeing with what
// its client asked.
func TestConcurrentClients(t *testing.T) {
	r := newRig(t, func(p *Proxy) { p.MaxConns = 8 })
	type outcome struct {
		id     int
		kind   string
		host   string
		status int
		body   string
		err    error
	}
	const n = 32
	results := make([]outcome, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			o := outcome{id: i}
			defer func() { results[i] = o }()
			c, err := net.Dial("tcp", r.addr)
			if err != nil {
				o.err = err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			switch i % 4 {
			case 0: // plain HTTP, admitted
				o.kind, o.host = "http", "allowed.test"
				fmt.Fprintf(c, "POST http://allowed.test:%d/c%d HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s", r.allowed.port(), i, len(fmt.Sprint(i)), fmt.Sprint(i))
			case 1: // plain HTTP, refused
				o.kind, o.host = "http", "denied.test"
				fmt.Fprintf(c, "GET http://denied.test:%d/c%d HTTP/1.1\r\n\r\n", r.denied.port(), i)
			case 2: // CONNECT with TLS inside, admitted
				o.kind, o.host = "connect", "secure.test"
				fmt.Fprintf(c, "CONNECT secure.test:%d HTTP/1.1\r\n\r\n", r.tls.port())
			case 3: // CONNECT refused, or malformed
				o.kind = "connect"
				if i%8 == 3 {
					o.host = "denied.test"
					fmt.Fprintf(c, "CONNECT denied.test:%d HTTP/1.1\r\n\r\n", r.denied.port())
				} else {
					fmt.Fprintf(c, "CONNECT allowed.test HTTP/1.1\r\n\r\n")
				}
			}
			resp, err := readRespErr(br)
			if err != nil {
				o.err = err
				return
			}
			o.status = resp.StatusCode
			if i%4 == 2 && resp.StatusCode == 200 {
				tc := tls.Client(&bufConn{c, br}, &tls.Config{InsecureSkipVerify: true})
				fmt.Fprintf(tc, "GET /c%d HTTP/1.1\r\nHost: secure.test\r\nConnection: close\r\n\r\n", i)
				b, err := io.ReadAll(tc)
				o.body, o.err = string(b), err
				return
			}
			b, err := io.ReadAll(resp.Body)
			o.body, o.err = string(b), err
		})
	}
	// Log is read while connections are served: the race detector checks
	// it against the handlers' writes.
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		<-start
		for {
			r.p.Log()
			r.p.Dropped()
			if r.idle() && len(r.p.Log()) == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	close(start)
	wg.Wait()
	<-polled

	for _, o := range results {
		if o.err != nil {
			t.Errorf("client %d: %v", o.id, o.err)
			continue
		}
		want, wantBody := 0, ""
		switch {
		case o.id%4 == 0:
			want, wantBody = 200, fmt.Sprintf("allowed says POST /c%d (%d body bytes)", o.id, len(fmt.Sprint(o.id)))
		case o.id%4 == 2:
			want, wantBody = 200, fmt.Sprintf("secure says GET /c%d (0 body bytes)", o.id)
		case o.host == "denied.test":
			want, wantBody = 403, "not on the list"
		default:
			want, wantBody = 400, "no port"
		}
		if o.status != want || !strings.Contains(o.body, wantBody) {
			t.Errorf("client %d: %d %q, want %d with %q", o.id, o.status, o.body, want, wantBody)
		}
	}

	log := r.waitLog(n)
	if len(log) != n {
		t.Fatalf("log has %d entries for %d connections", len(log), n)
	}
	// Accept order is the scheduler's; compare the entries as a multiset.
	var got, want []string
	for _, l := range log {
		got = append(got, fmt.Sprintf("%s %s %v %d", l.Method, l.Host, l.Admitted, l.Status))
		if l.Admitted && (l.BytesUp == 0 || l.BytesDown == 0 || l.Error != "") || !l.Admitted && (l.BytesUp != 0 || l.BytesDown != 0) {
			t.Errorf("entry %+v", l)
		}
	}
	for _, o := range results {
		switch {
		case o.id%4 == 0:
			want = append(want, "POST allowed.test true 200")
		case o.id%4 == 1:
			want = append(want, "GET denied.test false 403")
		case o.id%4 == 2:
			want = append(want, "CONNECT secure.test true 200")
		case o.host == "denied.test":
			want = append(want, "CONNECT denied.test false 403")
		default:
			want = append(want, "CONNECT  false 400")
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, d := range r.dialed() {
		if strings.HasPrefix(d, "denied.test") {
			t.Errorf("dialled %s", d)
		}
	}
	if n := len(r.denied.requests()); n != 0 {
		t.Errorf("denied.test got %d requests", n)
	}
}
