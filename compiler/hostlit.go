package compiler

import (
	"strconv"
	"strings"

	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/normalize"
)

// hostNeverRequested says why a host pattern can match no request, or
// "". A pattern without a wildcard is judged by the normalizer's own host
// check (normalize.URLHost), which gives every request's host one
// spelling and refuses hosts a rule could not judge (the unspecified
// address, loopback addresses other than 127.0.0.1 and [::1], a name
// whose last label is a number): a pattern it refuses or spells otherwise
// is a rule that never applies — for a deny, a false sense of safety.
func hostNeverRequested(p string) string {
	host, port, err := pattern.SplitHostPort(p)
	if err != nil || host == "" || strings.Contains(host, "*") {
		return ""
	}
	if port == "" {
		port = "1" // any port: only the host is in question
	}
	u := "http://" + host + ":" + port + "/"
	got, nerr := normalize.URLHost(u)
	if nerr != nil {
		// The detail names the URL first; the pattern is named already.
		return "a request naming it is refused: " + strings.TrimPrefix(nerr.Detail, strconv.Quote(u)+": ")
	}
	if want := host + ":" + port; got != want {
		return "requests name this address " + strings.TrimSuffix(got, ":"+port) + ": write that"
	}
	return ""
}
