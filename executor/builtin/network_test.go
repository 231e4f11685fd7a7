package builtin_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
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
		if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidURL {
			t.Errorf("%s: %s %s, want denied %s", u, out.Kind(), out.Base().ReasonCode, normalize.ReasonInvalidURL)
		}
	}
	if hits != 0 {
		t.Errorf("the loopback server the policy denies was reached %d times", hits)
	}
}

// TestLoopbackNetworkIsRefused: all of 127.0.0.0/8 is the local host on
// Linux, yet a deny naming the loopback host by its names (127.0.0.1,
// localhost, [::1]) judged 127.0.0.2, and [::ffff:127.0.0.2]
// canonicalized to it, as another host: http_get and bash's /dev/tcp
// reached a server bound to 127.0.0.2 (as they would one bound to
// 0.0.0.0). A loopback address other than 127.0.0.1 and [::1] is now
// refused (invalid_url, invalid_command), and the server is not reached.
func TestLoopbackNetworkIsRefused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("127.0.0.0/8 is the loopback network on Linux")
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2: %v", err)
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); fmt.Fprint(w, "internal") })}
	go srv.Serve(ln)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_, run := rig(t, `package p
policies: p: {
	version: "1"
	principals: ["agent:a"]
	tenants: ["t"]
	actions: allow: ["http_get", "bash"]
	filesystem: {read: ["**"], write: ["out/**"]}
	subprocess: {mode: "allowlist", allow: ["echo *"], shell: "allow"}
	network: {mode: "allow", deny: ["127.0.0.1", "localhost", "[::1]"]}
}
`)
	for _, u := range []string{"http://127.0.0.2:" + port + "/", "http://[::ffff:127.0.0.2]:" + port + "/"} {
		out := run(context.Background(), "http_get", map[string]any{"url": u}, 5*time.Second)
		if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidURL {
			t.Errorf("http_get %s: %s %s, want denied %s", u, out.Kind(), out.Base().ReasonCode, normalize.ReasonInvalidURL)
		}
	}
	cmd := "echo -e 'GET / HTTP/1.0\\r\\n\\r\\n' > /dev/tcp/127.0.0.2/" + port
	out := run(context.Background(), "bash", map[string]any{"command": cmd}, 5*time.Second)
	if out.Kind() != executor.KindDenied || out.Base().ReasonCode != normalize.ReasonInvalidCommand {
		t.Errorf("%q: %s %s, want denied %s", cmd, out.Kind(), out.Base().ReasonCode, normalize.ReasonInvalidCommand)
	}
	// A control: the server is there, and the same request reaches it
	// when nothing refuses it.
	if resp, err := http.Get("http://127.0.0.2:" + port + "/"); err != nil {
		t.Fatalf("the server at 127.0.0.2 is not reachable: %v", err)
	} else {
		resp.Body.Close()
		hits.Add(-1)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback server was reached %d times under a deny of 127.0.0.1, localhost and [::1]", n)
	}
}
