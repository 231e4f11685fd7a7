package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// curl runs the real curl through the rig's proxy and returns its stdout,
// stderr and exit code.
func (r *rig) curl(args ...string) (string, string, int) {
	r.t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		r.t.Skip("curl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"-sS", "--max-time", "20", "-x", "http://" + r.addr}, args...)...)
	// curl must see no proxy settings but the -x given.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCurl(t *testing.T) {
	r := newRig(t, nil)
	ap, dp, sp := r.allowed.port(), r.denied.port(), r.tls.port()

	out, errs, code := r.curl("-w", " %{http_code}", fmt.Sprintf("http://allowed.test:%d/plain?x=1", ap))
	if code != 0 || out != "allowed says GET /plain?x=1 (0 body bytes) 200" {
		t.Errorf("http: %q %q %d", out, errs, code)
	}

	out, errs, code = r.curl("-w", " %{http_code}", fmt.Sprintf("http://denied.test:%d/", dp))
	if code != 0 || out != "polc egress: test: denied.test is not on the list\n 403" {
		t.Errorf("http denied: %q %q %d", out, errs, code)
	}

	out, errs, code = r.curl("-k", "-w", " %{http_code}", fmt.Sprintf("https://secure.test:%d/tls", sp))
	if code != 0 || out != "secure says GET /tls (0 body bytes) 200" {
		t.Errorf("https: %q %q %d", out, errs, code)
	}

	before := len(r.dialed())
	out, errs, code = r.curl("-k", fmt.Sprintf("https://denied.test:%d/", dp))
	if code == 0 || !strings.Contains(errs, "403") {
		t.Errorf("https denied: %q %q %d", out, errs, code)
	}
	if d := r.dialed()[before:]; len(d) != 0 {
		t.Errorf("refused CONNECT dialled %v", d)
	}

	// http:// through a CONNECT tunnel (--proxytunnel).
	out, errs, code = r.curl("-p", fmt.Sprintf("http://allowed.test:%d/tunnelled", ap))
	if code != 0 || out != "allowed says GET /tunnelled (0 body bytes)" {
		t.Errorf("proxytunnel: %q %q %d", out, errs, code)
	}

	// A 3 MB POST: curl sends Expect: 100-continue and waits for it.
	big := filepath.Join(t.TempDir(), "big")
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<16)
	if err := os.WriteFile(big, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// curl waits up to --expect100-timeout for the 100 Continue before it
	// sends anyway: at 60 s, a proxy that does not answer the Expect
	// takes a minute, one that does a moment however loaded the machine.
	start := time.Now()
	out, errs, code = r.curl("--expect100-timeout", "60", "--data-binary", "@"+big, fmt.Sprintf("http://allowed.test:%d/big", ap))
	if code != 0 || out != fmt.Sprintf("allowed says POST /big (%d body bytes)", len(data)) {
		t.Errorf("big POST: %q %q %d", out, errs, code)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("big POST took %v: the proxy did not answer Expect: 100-continue", d)
	}
	// The same, chunked.
	out, errs, code = r.curl("-H", "Transfer-Encoding: chunked", "--data-binary", "@"+big, fmt.Sprintf("http://allowed.test:%d/chunked-up", ap))
	if code != 0 || out != fmt.Sprintf("allowed says POST /chunked-up (%d body bytes)", len(data)) {
		t.Errorf("chunked POST: %q %q %d", out, errs, code)
	}
	// And through CONNECT, to the TLS server.
	out, errs, code = r.curl("-k", "--data-binary", "@"+big, fmt.Sprintf("https://secure.test:%d/big", sp))
	if code != 0 || out != fmt.Sprintf("secure says POST /big (%d body bytes)", len(data)) {
		t.Errorf("big POST over CONNECT: %q %q %d", out, errs, code)
	}

	out, errs, code = r.curl("-I", fmt.Sprintf("http://allowed.test:%d/head", ap))
	if code != 0 || !strings.HasPrefix(out, "HTTP/1.1 200") || !strings.Contains(out, "Content-Length: 38") {
		t.Errorf("HEAD: %q %q %d", out, errs, code)
	}

	out, errs, code = r.curl("-0", fmt.Sprintf("http://allowed.test:%d/chunked", ap))
	if code != 0 || out != "part0;part1;part2;" {
		t.Errorf("HTTP/1.0: %q %q %d", out, errs, code)
	}

	// Two URLs in one run: curl would reuse the connection; each is judged.
	out, errs, code = r.curl("-w", " %{http_code}\n", fmt.Sprintf("http://allowed.test:%d/1", ap), fmt.Sprintf("http://denied.test:%d/2", dp), fmt.Sprintf("http://allowed.test:%d/3", ap))
	want := "allowed says GET /1 (0 body bytes) 200\npolc egress: test: denied.test is not on the list\n 403\nallowed says GET /3 (0 body bytes) 200\n"
	if code != 0 || out != want {
		t.Errorf("three URLs: %q %q %d", out, errs, code)
	}

	// A host in upper case with a trailing dot is the same host.
	out, errs, code = r.curl(fmt.Sprintf("http://ALLOWED.Test.:%d/case", ap))
	if code != 0 || out != "allowed says GET /case (0 body bytes)" {
		t.Errorf("case: %q %q %d", out, errs, code)
	}

	if n := len(r.denied.requests()); n != 0 {
		t.Errorf("denied.test got %d requests", n)
	}
	for _, l := range r.waitLog(1) {
		if l.Host == "denied.test" && (l.Admitted || l.Status != 403) || l.Host == "allowed.test" && (!l.Admitted || l.Error != "") {
			t.Errorf("log entry %+v", l)
		}
	}
}
