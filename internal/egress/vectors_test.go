package egress

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// hostForm is a way to write a host, and what the proxy must make of it.
type hostForm struct {
	text string
	// class: "allow" (valid, admitted), "deny" (valid, refused by Admit),
	// "bad" (cannot be normalised unambiguously: 400).
	class string
}

var hostForms = []hostForm{
	{"allowed.test", "allow"},
	{"ALLOWED.TEST", "allow"},
	{"Allowed.Test.", "allow"},
	{"127.0.0.1", "allow"},
	{"[::1]", "allow"},
	{"[0:0:0:0:0:0:0:1]", "allow"},
	{"[::ffff:127.0.0.1]", "allow"},
	{"denied.test", "deny"},
	{"DENIED.test.", "deny"},
	{"xn--dnied-bsa.test", "deny"},
	{"under_score.test", "deny"},
	{"192.0.2.1", "deny"},
	{"[2001:db8::1]", "deny"},
	{"allowed.test..", "bad"},
	{".allowed.test", "bad"},
	{"allowed..test", "bad"},
	{"allowed%2etest", "bad"},
	{"allowed.test%00", "bad"},
	{"allowed.test\\", "bad"},
	{"user@allowed.test", "bad"},
	{"denied.test@allowed.test", "bad"},
	{"allowed.test\\@denied.test", "bad"},
	{"denied.test#@allowed.test", "bad"},
	{"127.0.0.2", "bad"},
	{"127.1", "bad"},
	{"2130706433", "bad"},
	{"0x7f.0.0.1", "bad"},
	{"0177.0.0.1", "bad"},
	{"127.0.0.1.", "bad"},
	{"0.0.0.0", "bad"},
	{"[::]", "bad"},
	{"::1", "bad"},
	{"[::1%25lo]", "bad"},
	{"[127.0.0.1]", "bad"},
	{"[::1", "bad"},
	{"ａllowed.test", "bad"},
	{"allowed.test\x01", "bad"},
	{"", "bad"},
}

// portForm is a way to write the port: "" writes none.
type portForm struct {
	text  string
	class string // "ok", "none", "bad"
}

func portForms(own int) []portForm {
	return []portForm{
		{"", "none"},
		{":" + strconv.Itoa(own), "ok"},
		{":80", "ok"},
		{":443", "ok"},
		{":65535", "ok"},
		{":", "bad"},
		{":0", "bad"},
		{":65536", "bad"},
		{":080", "bad"},
		{":-1", "bad"},
		{":+80", "bad"},
		{":8o", "bad"},
		{":0x50", "bad"},
		{":99999999999999999999", "bad"},
	}
}

// uriForms write a request-target from an authority.
var uriForms = []struct {
	name  string
	write func(authority string) string
	// for: the methods this form is right for ("http" or "connect").
	for_ string
}{
	{"absolute", func(a string) string { return "http://" + a + "/p?q" }, "http"},
	{"absolute-bare", func(a string) string { return "http://" + a }, "http"},
	{"absolute-upper", func(a string) string { return "HTTP://" + a + "/" }, "http"},
	{"https", func(a string) string { return "https://" + a + "/" }, ""},
	{"authority", func(a string) string { return a }, "connect"},
	{"origin", func(a string) string { return "/p" }, ""},
	{"asterisk", func(a string) string { return "*" }, ""},
}

var vectorMethods = []struct {
	name  string
	class string // "http", "connect", "unsupported"
}{
	{"GET", "http"}, {"POST", "http"}, {"HEAD", "http"}, {"CONNECT", "connect"},
	{"TRACE", "unsupported"}, {"PROPFIND", "unsupported"}, {"get", "unsupported"},
}

// TestNegativeVectors sends every method × request-target form × host
// form × port form as a raw request and checks the status class, that
// only admitted destinations are dialled, and that the log has one entry
// per connection that agrees.
func TestNegativeVectors(t *testing.T) {
	r := newRig(t, func(p *Proxy) { p.MaxLog = 1 << 20 })
	type vec struct {
		req      string
		want     int  // 400, 403, 405; 0: admitted (200 or 502)
		loose    bool // 400 will do for a 405: the target is malformed too
		admitted bool
	}
	var vecs []vec
	for _, m := range vectorMethods {
		for _, u := range uriForms {
			for _, h := range hostForms {
				for _, p := range portForms(r.allowed.port()) {
					authority := h.text + p.text
					uri := u.write(authority)
					want, loose := 0, false
					valid := h.class != "bad" && p.class != "bad"
					switch {
					case m.class == "unsupported":
						// The method is judged first, but only once
						// net/http could read the request line.
						want, loose = 405, !(valid && u.for_ == "http")
					case u.for_ != m.class:
						want = 400
					case h.class == "bad" || p.class == "bad" || p.class == "none" && m.class == "connect":
						want = 400
					case h.class == "deny":
						want = 403
					}
					// The Host header names the host too, as a client
					// would; it must change nothing.
					vecs = append(vecs, vec{req: fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", m.name, uri, authority), want: want, loose: loose, admitted: want == 0})
				}
			}
		}
	}
	if testing.Short() {
		vecs = vecs[:len(vecs)/10]
	}
	for _, v := range vecs {
		before := len(r.dialed())
		resp := r.raw(v.req)
		got := status(resp)
		dialled := len(r.dialed()) - before
		switch {
		case v.want == 0 && got != 200 && got != 502:
			t.Errorf("%q: want it admitted (200 or 502), got:\n%s", v.req, resp)
		case v.want != 0 && got != v.want && !(v.loose && got == 400):
			t.Errorf("%q: want %d, got:\n%s", v.req, v.want, resp)
		case v.admitted && dialled != 1 || !v.admitted && dialled != 0:
			t.Errorf("%q: %d dials", v.req, dialled)
		}
	}
	log := r.waitLog(len(vecs))
	if len(log) != len(vecs) {
		t.Fatalf("log has %d entries for %d connections", len(log), len(vecs))
	}
	for i, l := range log {
		if l.Admitted != vecs[i].admitted || vecs[i].want != 0 && l.Status != vecs[i].want && !(vecs[i].loose && l.Status == 400) {
			t.Errorf("%q: log entry %+v", vecs[i].req, l)
		}
		if !l.Admitted && (l.BytesUp != 0 || l.BytesDown != 0) {
			t.Errorf("%q: refused but bytes moved: %+v", vecs[i].req, l)
		}
		if l.Admitted && (l.Host == "" || strings.ContainsAny(l.Host, "[]") || l.Host != strings.ToLower(l.Host)) {
			t.Errorf("%q: host %q not in Admit's form", vecs[i].req, l.Host)
		}
	}
	if n := len(r.denied.requests()); n != 0 {
		t.Errorf("denied.test got %d requests", n)
	}
	t.Logf("%d vectors", len(vecs))
}
