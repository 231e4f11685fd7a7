package compiler

import (
	"testing"

	"polc.dev/polc/normalize"
)

// TestHostNeverRequestedAgreesWithTheNormalizer: a host pattern without
// a wildcard is warned about exactly when no request the normalizer
// accepts carries that host: URLHost refuses it, or gives it another
// spelling.
func TestHostNeverRequestedAgreesWithTheNormalizer(t *testing.T) {
	hosts := []string{
		"example.com", "api.example.com", "localhost", "127.0.0.1", "[::1]", "10.0.0.1", "0.0.0.1",
		"127.0.0.2", "127.255.255.254", "0.0.0.0", "[::]", "[::0]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]",
		"[::ffff:127.0.0.2]", "[::ffff:10.0.0.1]", "[2001:db8::1]", "[2001:0db8::1]", "127.1", "2130706433",
		"0x7f.0.0.1", "127.000.0.1", "1.2.3.04", "host1", "a.b1", "a.1", "[fe80::1]", "255.255.255.255",
	}
	for _, h := range hosts {
		for _, p := range []string{h, h + ":8080"} {
			why := hostNeverRequested(p)
			u := "http://" + p + "/"
			if h == p {
				u = "http://" + h + ":80/"
			}
			got, err := normalize.URLHost(u)
			want := p
			if h == p {
				want = h + ":80"
			}
			requested := err == nil && got == want
			if requested != (why == "") {
				t.Errorf("%q: URLHost(%q) = %q, %v; hostNeverRequested = %q", p, u, got, err, why)
			}
		}
	}
}
