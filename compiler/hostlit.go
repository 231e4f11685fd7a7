package compiler

import (
	"net"
	"strings"

	"polc.dev/polc/internal/pattern"
)

// hostNeverRequested says why a host pattern can match no request, or
// "". The normalizer gives every request's host one spelling (an IPv4
// address in dotted decimal, an IPv6 one in brackets and its shortest
// form, an IPv4-mapped one as IPv4) and refuses hosts a rule could not
// judge: the unspecified address, a loopback address other than
// 127.0.0.1 and [::1] (each reaches the local host), and a name whose
// last label is a number (the C resolver reads "127.1" or "2130706433"
// as an address). A pattern written otherwise is a rule that never
// applies — for a deny, a false sense of safety (docs/executor.md).
func hostNeverRequested(p string) string {
	host, _, err := pattern.SplitHostPort(p)
	if err != nil || host == "" || strings.Contains(host, "*") {
		return ""
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil {
		labels := strings.Split(host, ".")
		if last := labels[len(labels)-1]; last != "" && strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
			return "its last label is a number, but it is no IPv4 address in dotted decimal: a request naming it is refused (invalid_url)"
		}
		return ""
	}
	canonical := "[" + ip.String() + "]"
	if v4 := ip.To4(); v4 != nil {
		canonical = v4.String()
	}
	switch {
	case ip.IsUnspecified():
		return "it is the unspecified address, which reaches the local host: a request naming it is refused (invalid_url)"
	case ip.IsLoopback() && canonical != "127.0.0.1" && canonical != "[::1]":
		return "it is a loopback address other than 127.0.0.1: a request naming it is refused (invalid_url); write 127.0.0.1"
	case host != canonical:
		return "requests name this address " + canonical + ": write that"
	}
	return ""
}
