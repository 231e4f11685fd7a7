package egress

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"polc.dev/polc/normalize"
)

func TestParseTarget(t *testing.T) {
	good := []struct {
		method, uri string
		host        string
		port        int
		path        string
	}{
		{"CONNECT", "example.com:443", "example.com", 443, ""},
		{"CONNECT", "EXAMPLE.Com.:8443", "example.com", 8443, ""},
		{"CONNECT", "[2001:DB8::1]:443", "2001:db8::1", 443, ""},
		{"CONNECT", "[::ffff:192.0.2.1]:443", "192.0.2.1", 443, ""},
		{"CONNECT", "192.0.2.1:1", "192.0.2.1", 1, ""},
		{"CONNECT", "127.0.0.1:65535", "127.0.0.1", 65535, ""},
		{"CONNECT", "[::1]:22", "::1", 22, ""},
		{"CONNECT", "xn--bcher-kva.example:443", "xn--bcher-kva.example", 443, ""},
		{"CONNECT", "under_score.example:443", "under_score.example", 443, ""},
		{"GET", "http://example.com", "example.com", 80, "/"},
		{"GET", "http://example.com/", "example.com", 80, "/"},
		{"GET", "HTTP://Example.COM./a/b?c=d", "example.com", 80, "/a/b?c=d"},
		{"GET", "http://example.com?q", "example.com", 80, "/?q"},
		{"POST", "http://example.com:8080/x", "example.com", 8080, "/x"},
		{"GET", "http://[2001:db8::1]/", "2001:db8::1", 80, "/"},
		{"GET", "http://[2001:db8::1]:81/p", "2001:db8::1", 81, "/p"},
		{"GET", "http://example.com//double/slash", "example.com", 80, "//double/slash"},
		{"GET", "http://example.com/%2e%2e/", "example.com", 80, "/%2e%2e/"},
		{"GET", "http://example.com/a\\b", "example.com", 80, "/a\\b"},
	}
	for _, g := range good {
		got, err := parseTarget(g.method, g.uri)
		if err != nil {
			t.Errorf("parseTarget(%q, %q): %v", g.method, g.uri, err)
			continue
		}
		if got.host != g.host || got.port != g.port || got.path != g.path {
			t.Errorf("parseTarget(%q, %q) = %+v, want host %q port %d path %q", g.method, g.uri, got, g.host, g.port, g.path)
		}
	}

	bad := []struct{ method, uri, want string }{
		{"CONNECT", "example.com", "no port"},
		{"CONNECT", "example.com:", "port"},
		{"CONNECT", ":443", "no host"},
		{"CONNECT", "", "no host"},
		{"CONNECT", "/rpc", "not host:port"},
		{"CONNECT", "http://example.com:443", "not host:port"},
		{"CONNECT", "user@example.com:443", "userinfo"},
		{"CONNECT", "example.com:0", "1..65535"},
		{"CONNECT", "example.com:65536", "1..65535"},
		{"CONNECT", "example.com:0443", "leading zeros"},
		{"CONNECT", "example.com:+443", "1..65535"},
		{"CONNECT", "example.com:-1", "1..65535"},
		{"CONNECT", "example.com:44 3", "printable ASCII"},
		{"CONNECT", "2001:db8::1:443", "brackets"},
		{"CONNECT", "[192.0.2.1]:443", "not an IPv6"},
		{"CONNECT", "[fe80::1%25eth0]:443", "not an IPv6"},
		{"CONNECT", "[::1:443", "unclosed"},
		{"CONNECT", "[::1]x:443", "after ']'"},
		{"CONNECT", "exa%6dple.com:443", "'%'"},
		{"CONNECT", "exa\u00e4mple.com:443", "printable ASCII"},
		{"CONNECT", "ex..ample.com:443", "empty label"},
		{"CONNECT", ".example.com:443", "empty label"},
		{"CONNECT", "example.com..:443", "empty label"},
		{"CONNECT", "192.0.2.1.:443", "trailing dot"},
		{"CONNECT", "0.0.0.0:443", "unspecified"},
		{"CONNECT", "[::]:443", "unspecified"},
		{"CONNECT", "127.0.0.2:443", "loopback"},
		{"CONNECT", "2130706433:443", "canonical IPv4"},
		{"CONNECT", "0x7f.1:443", "canonical IPv4"},
		{"CONNECT", "0177.0.0.1:443", "canonical IPv4"},
		{"CONNECT", "example.com\\.evil:443", "not a letter"},
		{"CONNECT", strings.Repeat("a", 64) + ".example:443", "63"},
		{"CONNECT", strings.Repeat("a.", 127) + "aa:443", "253"},
		{"GET", "/index.html", "absolute form"},
		{"GET", "*", "absolute form"},
		{"OPTIONS", "*", "absolute form"},
		{"GET", "https://example.com/", "CONNECT"},
		{"GET", "ftp://example.com/", "not an http:// URL"},
		{"GET", "example.com:80", "not an http:// URL"},
		{"GET", "http:/example.com/", "not an http:// URL"},
		{"GET", "http://", "no host"},
		{"GET", "http:///path", "no host"},
		{"GET", "http://allowed.test@denied.test/", "userinfo"},
		{"GET", "http://allowed.test:@denied.test/", "userinfo"},
		{"GET", "http://example.com:/", "port"},
		{"GET", "http://example.com:80:80/", "more than one"},
		{"GET", "http://example.com/#frag", "fragment"},
		{"GET", "http://example.com#frag", "fragment"},
		{"GET", "http://denied.test\\@allowed.test/", "userinfo"},
		{"GET", "http://denied.test\\.allowed.test/", "not a letter"},
		{"GET", "http://example.com/\x7f", "printable ASCII"},
		{"GET", "http://ｅxample.com/", "printable ASCII"},
		{"GET", "http://example.com/%", "two hex digits"},
		{"GET", "http://example.com/%4", "two hex digits"},
		{"GET", "http://example.com/?%zz", "two hex digits"},
	}
	for _, b := range bad {
		got, err := parseTarget(b.method, b.uri)
		if err == nil {
			t.Errorf("parseTarget(%q, %q) = %+v, want an error", b.method, b.uri, got)
			continue
		}
		if !strings.Contains(err.Error(), b.want) {
			t.Errorf("parseTarget(%q, %q): %v, want it to mention %q", b.method, b.uri, err, b.want)
		}
	}
}

// FuzzParseTarget checks what parseTarget accepts: a host in the form Admit
// is promised, a port in range, a path that cannot name another host, and
// agreement with net/url and normalize.URLHost about which host and port
// the target names.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "[::1]:443", "http://example.com/", "http://Example.com.:8080/a?b", "http://[2001:db8::1]/",
		"http://a@b/", "http://b/#x", "2130706433:80", "http://0x7f.1/", "http://[::ffff:127.0.0.1]/", "http://x:0/", "/x", "*",
		"http://a..b/", "http://a.b./", "http://1.2.3.4./", "http://%41/", "http://\xff/", "HTTP://A/",
	} {
		f.Add("CONNECT", s)
		f.Add("GET", s)
	}
	f.Fuzz(func(t *testing.T, method, uri string) {
		got, err := parseTarget(method, uri)
		if err != nil {
			return
		}
		h := got.host
		if h == "" || h != strings.ToLower(h) || strings.HasSuffix(h, ".") || strings.ContainsAny(h, "[]%@/ ") {
			t.Fatalf("parseTarget(%q, %q): host %q is not in Admit's form", method, uri, h)
		}
		if strings.Contains(h, ":") && net.ParseIP(h) == nil {
			t.Fatalf("parseTarget(%q, %q): host %q has ':' but is no IPv6 address", method, uri, h)
		}
		if got.port < 1 || got.port > 65535 {
			t.Fatalf("parseTarget(%q, %q): port %d", method, uri, got.port)
		}
		// What is admitted is what normalize.URLHost says the same URL
		// names, and normalising again changes nothing.
		hp, nerr := normalize.URLHost("http://" + got.authority())
		if nerr != nil || hp != got.authority() && !(strings.Contains(h, ":") && hp == "["+h+"]:"+strconv.Itoa(got.port)) {
			t.Fatalf("parseTarget(%q, %q) = %s, normalize.URLHost says %q, %v", method, uri, got.authority(), hp, nerr)
		}
		again, err := parseTarget("CONNECT", got.authority())
		if err != nil || again.host != got.host || again.port != got.port {
			t.Fatalf("parseTarget(%q, %q) = %s does not parse to itself: %+v %v", method, uri, got.authority(), again, err)
		}
		var u *url.URL
		if method == "CONNECT" {
			if got.path != "" {
				t.Fatalf("CONNECT with a path %q", got.path)
			}
			u, err = url.Parse("http://" + uri)
		} else {
			// The path is the target's own text after the authority.
			if !strings.HasPrefix(got.path, "/") || !strings.HasSuffix(uri, got.path[1:]) || strings.ContainsAny(got.path, "# \r\n") {
				t.Fatalf("parseTarget(%q, %q): path %q", method, uri, got.path)
			}
			u, err = url.Parse(uri)
		}
		if err != nil {
			t.Fatalf("parseTarget accepted %q, which net/url refuses: %v", uri, err)
		}
		uh := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		if ip := net.ParseIP(uh); ip != nil {
			if !ip.Equal(net.ParseIP(h)) {
				t.Fatalf("parseTarget(%q, %q): host %q, net/url says %q", method, uri, h, uh)
			}
		} else if uh != h {
			t.Fatalf("parseTarget(%q, %q): host %q, net/url says %q", method, uri, h, uh)
		}
		if u.User != nil {
			t.Fatalf("parseTarget accepted %q with userinfo", uri)
		}
	})
}
