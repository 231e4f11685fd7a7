package egress

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"polc.dev/polc/normalize"
)

// target is the destination a request line names, in the form Admit is
// given and the proxy dials.
type target struct {
	host string // lowercase, IPv6 without brackets, no trailing dot
	port int
	// path is the origin-form request-target sent to the destination
	// ("/p?q"); empty for CONNECT.
	path string
}

// authority is host:port as it is dialled and as the Host header names it
// (IPv6 in brackets).
func (t target) authority() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// hostHeader is the Host header sent to the destination: the authority,
// without the port when it is http's default.
func (t target) hostHeader() string {
	if t.port == 80 {
		if strings.Contains(t.host, ":") {
			return "[" + t.host + "]"
		}
		return t.host
	}
	return t.authority()
}

// maxQuoted bounds how much of a client's text a refusal reason repeats:
// reasons go into the connection log, which must not grow by what a
// client chooses to send.
const maxQuoted = 200

// quote is strconv.Quote of s cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) > maxQuoted {
		return strconv.Quote(s[:maxQuoted]) + "..."
	}
	return strconv.Quote(s)
}

// parseTarget parses the request-target of a request line: the authority
// form "host:port" for CONNECT and the absolute form
// "http://host[:port][/path][?query]" for every other method. It accepts
// only what it can normalise unambiguously: the host must be an ASCII DNS
// name (letters, digits, '-', '_', '.'; one trailing dot is dropped), a
// canonical IPv4 address, or an IPv6 address in brackets (no zone), and
// must also be a host that normalize.URLHost accepts, so the proxy refuses
// every host the policy's own URL rules refuse (the unspecified address,
// loopback addresses other than 127.0.0.1 and ::1, names whose last label
// is a number). Userinfo, percent-encoding in the host, bytes that are
// not printable ASCII, fragments, malformed percent-escapes in the path,
// and ports that are not a canonical decimal in 1..65535 are errors.
func parseTarget(method, uri string) (target, error) {
	for i := 0; i < len(uri); i++ {
		if uri[i] <= ' ' || uri[i] >= 0x7f {
			return target{}, fmt.Errorf("request target %s has a byte that is not printable ASCII at offset %d (IDNs must be sent in their xn-- form, other bytes percent-encoded)", quote(uri), i)
		}
	}
	if method == "CONNECT" {
		if strings.ContainsAny(uri, "/?#") {
			return target{}, fmt.Errorf("CONNECT target %s is not host:port", quote(uri))
		}
		host, port, err := parseAuthority(uri, 0)
		return target{host: host, port: port}, err
	}
	const scheme = "http://"
	if len(uri) < len(scheme) || !strings.EqualFold(uri[:len(scheme)], scheme) {
		switch lower := strings.ToLower(uri); {
		case strings.HasPrefix(uri, "/") || uri == "*":
			return target{}, fmt.Errorf("request target %s is not in absolute form: a request to a proxy names its destination (http://host/path)", quote(uri))
		case strings.HasPrefix(lower, "https://"):
			return target{}, fmt.Errorf("request target %s is https: tunnel it with CONNECT", quote(uri))
		default:
			return target{}, fmt.Errorf("request target %s is not an http:// URL", quote(uri))
		}
	}
	rest := uri[len(scheme):]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, path := rest[:end], rest[end:]
	if strings.Contains(path, "#") {
		return target{}, fmt.Errorf("request target %s has a fragment", quote(uri))
	}
	for i := 0; i < len(path); i++ {
		if path[i] == '%' && (i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2])) {
			return target{}, fmt.Errorf("request target %s has a '%%' that is not followed by two hex digits", quote(uri))
		}
	}
	switch {
	case path == "":
		path = "/"
	case path[0] == '?':
		path = "/" + path
	}
	host, port, err := parseAuthority(authority, 80)
	if err != nil {
		return target{}, err
	}
	return target{host: host, port: port, path: path}, nil
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// parseAuthority parses host[:port]; defPort is the port when none is
// written, 0 if one must be.
func parseAuthority(a string, defPort int) (string, int, error) {
	if a == "" {
		return "", 0, fmt.Errorf("request target names no host")
	}
	if strings.Contains(a, "@") {
		// Userinfo in the authority ("allowed.test@denied.test") is read
		// differently by different parsers; a proxy request never needs it.
		return "", 0, fmt.Errorf("authority %s has userinfo ('@')", quote(a))
	}
	var host, port string
	hasPort := false
	if a[0] == '[' {
		i := strings.IndexByte(a, ']')
		if i < 0 {
			return "", 0, fmt.Errorf("authority %s has an unclosed '['", quote(a))
		}
		host = a[1:i]
		switch rest := a[i+1:]; {
		case rest == "":
		case rest[0] == ':':
			port, hasPort = rest[1:], true
		default:
			return "", 0, fmt.Errorf("authority %s has text after ']' that is not a port", quote(a))
		}
		if ip := net.ParseIP(host); ip == nil || !strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("authority %s: %s in brackets is not an IPv6 address", quote(a), quote(host))
		}
	} else {
		switch strings.Count(a, ":") {
		case 0:
			host = a
		case 1:
			i := strings.IndexByte(a, ':')
			host, port, hasPort = a[:i], a[i+1:], true
		default:
			return "", 0, fmt.Errorf("authority %s has more than one ':' (an IPv6 address must be in brackets)", quote(a))
		}
		if host == "" {
			return "", 0, fmt.Errorf("authority %s names no host", quote(a))
		}
		lower := strings.ToLower(host)
		name, dotted := strings.CutSuffix(lower, ".")
		if len(name) > 253 {
			return "", 0, fmt.Errorf("host %s is longer than 253 bytes", quote(host))
		}
		labels := strings.Split(name, ".")
		for _, l := range labels {
			if l == "" {
				return "", 0, fmt.Errorf("host %s has an empty label", quote(host))
			}
			if len(l) > 63 {
				return "", 0, fmt.Errorf("host %s has a label longer than 63 bytes", quote(host))
			}
			for i := 0; i < len(l); i++ {
				c := l[i]
				if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
					return "", 0, fmt.Errorf("host %s has %q, which is not a letter, digit, '-', '_' or '.'", quote(host), c)
				}
			}
		}
		if dotted && net.ParseIP(name) != nil {
			// "1.2.3.4." is a name to look up, not the address; which one a
			// resolver picks differs, so neither is assumed.
			return "", 0, fmt.Errorf("host %s is an IPv4 address with a trailing dot", quote(host))
		}
		host = name
	}
	if !hasPort {
		if defPort == 0 {
			return "", 0, fmt.Errorf("authority %s has no port", quote(a))
		}
		port = strconv.Itoa(defPort)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", 0, fmt.Errorf("authority %s: port %s is not a decimal number in 1..65535 without leading zeros", quote(a), quote(port))
	}
	// The policy's own URL rules decide which hosts exist at all; asking
	// normalize.URLHost keeps the proxy from admitting a spelling the
	// decision engine would have refused (and gives the canonical form of
	// IP literals: ::ffff:1.2.3.4 is 1.2.3.4).
	hp, nerr := normalize.URLHost("http://" + net.JoinHostPort(host, port))
	if nerr != nil {
		return "", 0, fmt.Errorf("authority %s: %s", quote(a), nerr.Detail)
	}
	h, _, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("authority %s: normalized to unparsable %q", quote(a), hp)
	}
	return h, n, nil
}
