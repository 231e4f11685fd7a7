package builtin_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"polc.dev/polc/executor"
)

// TestHTTPGetUnspecifiedAddressIsRefused: connecting to 0.0.0.0 (or [::],
// [::ffff:0.0.0.0]) reaches the local host on Linux, so a policy that
// allows the network but denies the loopback host by every name it has
// (127.0.0.1, localhost, [::1]) still let http_get reach a server bound
// to 127.0.0.1: the host judged was "0.0.0.0:PORT", which no deny names.
// The unspecified address names no host a rule can judge: such a URL is
// refused (invalid_url), and the server is never reached.
func TestHTTPGetUnspecifiedAddressIsRefused(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++; fmt.Fprint(w, "internal") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	_, run := rig(t, `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["http_get"]
	network: {mode: "allow", deny: ["127.0.0.1", "localhost", "[::1]"]}
}
`)
	get := func(u string) executor.Outcome {
		return run(context.Background(), "http_get", map[string]any{"url": u}, 10*time.Second)
	}
	if out := get(srv.URL); out.Kind() != executor.KindDenied {
		t.Fatalf("%s: %s, want denied", srv.URL, out.Kind())
	}
	for _, h := range []string{"0.0.0.0", "[::ffff:0.0.0.0]", "[::]", "0", "0x0", "0.0"} {
		u := "http://" + h + ":" + port + "/"
		out := get(u)
		if out.Kind() != executor.KindDenied || out.Base().ReasonCode != executor.ReasonInvalidURL {
			t.Errorf("%s: %s %s, want denied %s", u, out.Kind(), out.Base().ReasonCode, executor.ReasonInvalidURL)
		}
	}
	if hits != 0 {
		t.Errorf("the loopback server the policy denies was reached %d times", hits)
	}
}
