package normalize

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"polc.dev/polc/internal/pattern"
)

var defaultPorts = map[string]string{"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}

func urlFacets(args map[string]string, _ string, out *Normalized) *NormalizeError {
	hp, err := URLHost(args["url"])
	if err != nil {
		return err
	}
	out.Hosts = append(out.Hosts, hp)
	return nil
}

// URLHost is the host facet of a URL as the policy judges it:
// "host:port", the host lowercased (IPv6 in brackets), the port explicit
// or the scheme's default. A URL without a host, with an unknown scheme
// and no port, with an invalid host or port, or whose host is the
// unspecified address (0.0.0.0, [::]: it connects to the local host) or a
// loopback address other than 127.0.0.1 and [::1] (127.0.0.2: the local
// host under a name no rule uses) is an invalid_url error. Host rules are judged by this text, never by what
// a name resolves to.
func URLHost(raw string) (string, *NormalizeError) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", Errorf(ReasonInvalidURL, "%q: %v", raw, err)
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", Errorf(ReasonInvalidURL, "%q has no host", raw)
	}
	port := u.Port()
	if port == "" {
		port = defaultPorts[scheme]
	}
	if port == "" {
		return "", Errorf(ReasonInvalidURL, "%q: unknown scheme %q and no port", raw, u.Scheme)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", Errorf(ReasonInvalidURL, "%q: invalid port %q", raw, port)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// Connecting to the unspecified address (0.0.0.0, ::, and their
		// other spellings, which parse to it or, like "0" and "0x0", are
		// refused below) reaches the local host on Linux: a deny naming
		// 127.0.0.1, localhost and [::1] would not see it. It names no
		// host a rule could judge, so it is no host at all.
		return "", Errorf(ReasonInvalidURL, "%q: host %q is the unspecified address, which connects to the local host", raw, host)
	} else if ip != nil && ip.IsLoopback() && !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback) {
		// All of 127.0.0.0/8 is the local host (Linux answers on every
		// address of it, and a service bound to 0.0.0.0 is reached
		// there), yet rules judge the host as written: a deny naming
		// 127.0.0.1, localhost and [::1] would not see 127.0.0.2 or
		// [::ffff:127.1.2.3]. The loopback host has one spelling per
		// family; the others are no host a rule names.
		return "", Errorf(ReasonInvalidURL, "%q: host %q is a loopback address other than 127.0.0.1, which reaches the local host: write 127.0.0.1 (or [::1])", raw, host)
	} else if ip != nil && ip.To4() == nil {
		host = "[" + ip.String() + "]"
	} else if ip != nil {
		host = ip.String()
	} else {
		// The host as written must be the host dialled. net/http maps a
		// non-ASCII name through IDNA before dialling (fullwidth letters,
		// "。" for "."), so "１２７。０。０。１" would reach 127.0.0.1 while the
		// policy judged another name; host patterns are ASCII, so such a
		// name could only ever dodge a deny. And a name whose last label is
		// a number is an IPv4 address to the C resolver (inet_aton:
		// "2130706433", "0x7f.1", "0177.0.0.1" are 127.0.0.1), not the
		// name judged; net.ParseIP took every canonical IPv4 address above.
		last := ""
		for label := range strings.SplitSeq(host, ".") {
			if label == "" || strings.ContainsAny(label, ":[]/ \t") {
				return "", Errorf(ReasonInvalidURL, "%q: invalid host %q", raw, host)
			}
			last = label
		}
		for i := 0; i < len(host); i++ {
			if host[i] >= 0x80 || host[i] < 0x20 || host[i] == 0x7f {
				return "", Errorf(ReasonInvalidURL, "%q: host %q is not ASCII (use its xn-- form)", raw, host)
			}
		}
		if numericLabel(last) {
			return "", Errorf(ReasonInvalidURL, "%q: host %q is not a canonical IPv4 address", raw, host)
		}
	}
	return host + ":" + port, nil
}

// numericLabel reports whether a host's last label is a number (decimal,
// or hexadecimal with 0x) — the WHATWG URL test for an IPv4 host, and
// what inet_aton reads as one.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(h); i++ {
			if !strings.ContainsRune("0123456789abcdef", rune(h[i])) {
				return false
			}
		}
		return true
	}
	return pattern.Digits(l)
}
