package executor_test

import (
	"strings"
	"testing"

	"polc.dev/polc/decision"
	"polc.dev/polc/normalize"
)

// TestUnspecifiedAddressesAreNoHost: on Linux a connection to the
// unspecified address (0.0.0.0, ::) reaches the local host, so a policy
// that allows the network but denies 127.0.0.1, localhost and [::1] let
// http_get (and bash's /dev/tcp) reach a loopback server through it. Every
// spelling of it — canonical, IPv4-mapped, IPv6 with zeros written out,
// and the inet_aton forms the C resolver reads as 0.0.0.0 — is refused,
// in an http_get URL (invalid_url) and in a /dev/tcp or /dev/udp
// redirection (invalid_command); other addresses are judged as before.
func TestUnspecifiedAddressesAreNoHost(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash", "http_get"]
	subprocess: {mode: "allowlist", allow: ["echo *"], shell: "allow"}
	network: {mode: "allow", deny: ["127.0.0.1", "localhost", "[::1]"]}`)
	for _, host := range []string{
		"0.0.0.0", "[::]", "[0:0::0]", "[::0]", "[0::0]", "[0000:0000:0000:0000:0000:0000:0000:0000]",
		"[::ffff:0.0.0.0]", "[::ffff:0:0]", "[0:0:0:0:0:ffff:0:0]", "[::0.0.0.0]",
		"0", "00", "0x0", "0X0", "0x00000000", "0.0", "0.0.0", "0x0.0", "0.0x0.0", "000.000.000.000", "00.0.0.0",
	} {
		checkHostRefused(t, p, host, "")
	}
	// bash takes the host of /dev/tcp/HOST/PORT without brackets.
	for _, host := range []string{"0.0.0.0", "::", "0:0::0", "::ffff:0.0.0.0", "0", "0x0", "0.0"} {
		checkDevHostRefused(t, p, host)
	}
	// Other addresses keep their canonical text, and the deny list judges
	// them.
	for u, want := range map[string]string{
		"http://127.0.0.1:8080/":          "deny",
		"http://[::ffff:127.0.0.1]:8080/": "deny",
		"http://[::1]:8080/":              "deny",
		"http://0.0.0.1:8080/":            "allow",
		"http://10.0.0.0:8080/":           "allow",
		"http://[::2]:8080/":              "allow",
	} {
		d, refused := evaluateReview(p, "http_get", map[string]any{"url": u})
		if refused != "" || d.Disposition != want {
			t.Errorf("http_get %s: %s%s, want %s", u, refused, d.Disposition, want)
		}
	}
}

// TestLoopbackAddressesOtherThanTheLoopbackHostAreNoHost: all of
// 127.0.0.0/8 is the local host on Linux, but rules judge the host as
// written, so a deny naming 127.0.0.1, localhost and [::1] did not see
// 127.0.0.2 or [::ffff:127.1.2.3] (canonicalized to 127.1.2.3). A
// loopback address other than 127.0.0.1 and [::1] is refused in an
// http_get URL (invalid_url) and in a /dev/tcp or /dev/udp redirection
// (invalid_command), with a message naming 127.0.0.1; the loopback host's
// own spellings are judged as before.
func TestLoopbackAddressesOtherThanTheLoopbackHostAreNoHost(t *testing.T) {
	p := reviewPolicy(t, `
	actions: allow: ["bash", "http_get"]
	subprocess: {mode: "allowlist", allow: ["echo *"], shell: "allow"}
	network: {mode: "allow", deny: ["127.0.0.1", "localhost", "[::1]"]}`)
	for _, host := range []string{
		"127.0.0.2", "127.1.2.3", "127.255.255.255", "127.0.0.0", "127.0.1.1",
		"[::ffff:127.0.0.2]", "[::ffff:7f00:2]", "[0:0:0:0:0:ffff:127.9.9.9]",
	} {
		checkHostRefused(t, p, host, "write 127.0.0.1")
	}
	for _, host := range []string{"127.0.0.2", "127.1.2.3", "::ffff:127.0.0.2", "::ffff:7f00:2"} {
		checkDevHostRefused(t, p, host)
	}
	for u, want := range map[string]string{
		"http://127.0.0.1:8080/":                  "deny",
		"http://[::ffff:127.0.0.1]:8080/":         "deny",
		"http://[0:0:0:0:0:0:0:1]:8080/":          "deny",
		"http://[::1]:8080/":                      "deny",
		"http://126.255.255.255:8080/":            "allow",
		"http://128.0.0.1:8080/":                  "allow",
		"http://[::ffff:7f00:1]:8080/":            "deny",
		"http://[0000:0000::0000:0000:0001]:8080": "deny",
	} {
		d, refused := evaluateReview(p, "http_get", map[string]any{"url": u})
		if refused != "" || d.Disposition != want {
			t.Errorf("http_get %s: %s%s, want %s", u, refused, d.Disposition, want)
		}
	}
}

// checkHostRefused checks that URLHost refuses host (with a message
// holding detail) and that p denies an http_get to it as invalid_url.
func checkHostRefused(t *testing.T, p *decision.Policy, host, detail string) {
	t.Helper()
	u := "http://" + host + ":8080/"
	if hp, err := normalize.URLHost(u); err == nil || err.Reason != normalize.ReasonInvalidURL {
		t.Errorf("URLHost(%q) = %q, %v; want invalid_url", u, hp, err)
	} else if !strings.Contains(err.Detail, detail) {
		t.Errorf("URLHost(%q): %q does not say %q", u, err.Detail, detail)
	}
	if got := decideReasons(t, p, "http_get", map[string]any{"url": u}); got != normalize.ReasonInvalidURL {
		t.Errorf("http_get %s: %s, want %s", u, got, normalize.ReasonInvalidURL)
	}
}

// checkDevHostRefused checks that p denies a bash redirection to host's
// /dev/tcp and /dev/udp as invalid_command.
func checkDevHostRefused(t *testing.T, p *decision.Policy, host string) {
	t.Helper()
	for _, dev := range []string{"tcp", "udp"} {
		cmd := "echo > /dev/" + dev + "/" + host + "/8080"
		if got := decideReasons(t, p, "bash", map[string]any{"command": cmd}); got != normalize.ReasonInvalidCommand {
			t.Errorf("%q: %s, want %s", cmd, got, normalize.ReasonInvalidCommand)
		}
	}
}
