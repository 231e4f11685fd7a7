package executor_test

import (
	"testing"

	"polc.dev/polc/executor"
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
		u := "http://" + host + ":8080/"
		if hp, err := executor.URLHost(u); err == nil || err.Reason != executor.ReasonInvalidURL {
			t.Errorf("URLHost(%q) = %q, %v; want invalid_url", u, hp, err)
		}
		if got := decideReasons(t, p, "http_get", map[string]any{"url": u}); got != executor.ReasonInvalidURL {
			t.Errorf("http_get %s: %s, want %s", u, got, executor.ReasonInvalidURL)
		}
	}
	// bash takes the host of /dev/tcp/HOST/PORT without brackets.
	for _, host := range []string{"0.0.0.0", "::", "0:0::0", "::ffff:0.0.0.0", "0", "0x0", "0.0"} {
		for _, dev := range []string{"tcp", "udp"} {
			cmd := "echo > /dev/" + dev + "/" + host + "/8080"
			if got := decideReasons(t, p, "bash", map[string]any{"command": cmd}); got != executor.ReasonInvalidCommand {
				t.Errorf("%q: %s, want %s", cmd, got, executor.ReasonInvalidCommand)
			}
		}
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
