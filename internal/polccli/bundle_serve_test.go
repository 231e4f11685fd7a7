package polccli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"polc.dev/polc/internal/atomicfile"
)

// bundleServeFixture is polc bundle serve on a loopback port, serving
// dir/srv.
type bundleServeFixture struct {
	t      *testing.T
	dir    string
	addr   string
	cancel context.CancelFunc
	served chan error
}

func startBundleServe(t *testing.T, dir string, p *bundleServeParams) *bundleServeFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &bundleServeFixture{t: t, dir: dir, cancel: cancel, served: make(chan error, 1)}
	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	ready := make(chan string, 1)
	if p.dir == "" {
		p.dir = "srv"
	}
	if p.listen == "" {
		p.listen = "tcp:127.0.0.1:0"
	}
	p.ready = func(a string) { ready <- a }
	go func() { f.served <- runBundleServe(ctx, e, p) }()
	select {
	case f.addr = <-ready:
	case err := <-f.served:
		t.Fatalf("bundle serve: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { f.stop() })
	return f
}

// stop stops the server and returns what runBundleServe returned.
func (f *bundleServeFixture) stop() error {
	f.cancel()
	select {
	case err, ok := <-f.served:
		if ok {
			close(f.served)
		}
		return err
	case <-time.After(time.Minute):
		f.t.Fatal("bundle serve did not stop within a minute")
		return nil
	}
}

// get sends a request and returns the status, the headers and the body.
func (f *bundleServeFixture) get(method, path string, headers ...string) (int, http.Header, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, "http://"+f.addr+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// writeLayoutFile writes dir/srv/name by rename, as publish does.
func writeLayoutFile(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	p := filepath.Join(dir, "srv", name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBundleServeETag: an answer's ETag is the sha256 of the bytes sent;
// If-None-Match naming it (alone, in a list as OPA sends with superseded
// tags, weak, or *) is 304 without a body; HEAD sends the headers only; a
// bundle renamed into place (even of the same size) has its own tag.
func TestBundleServeETag(t *testing.T) {
	dir := t.TempDir()
	one, two := bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 1000)
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", one)
	f := startBundleServe(t, dir, &bundleServeParams{})

	status, h, body := f.get("GET", "/bundles/polc.tar.gz")
	tag := bundleETag(one)
	if status != 200 || !bytes.Equal(body, one) || h.Get("ETag") != tag || h.Get("Cache-Control") != "no-cache" {
		t.Fatalf("GET: %d %v %d bytes", status, h, len(body))
	}
	if runtime.GOOS == "linux" && h.Get("Content-Type") != longPollType {
		t.Errorf("Content-Type %q, want %q (long polls held)", h.Get("Content-Type"), longPollType)
	}
	for _, inm := range []string{tag, `"a", ` + tag, `W/` + tag, `*`} {
		status, h, body := f.get("GET", "/bundles/polc.tar.gz", "If-None-Match", inm)
		if status != http.StatusNotModified || len(body) != 0 || h.Get("ETag") != tag {
			t.Errorf("If-None-Match %s: %d, %d bytes, ETag %q", inm, status, len(body), h.Get("ETag"))
		}
	}
	if status, _, body := f.get("GET", "/bundles/polc.tar.gz", "If-None-Match", `"other"`); status != 200 || !bytes.Equal(body, one) {
		t.Errorf("If-None-Match of another tag: %d", status)
	}
	status, h, body = f.get("HEAD", "/bundles/polc.tar.gz")
	if status != 200 || len(body) != 0 || h.Get("ETag") != tag || h.Get("Content-Length") != "1000" {
		t.Errorf("HEAD: %d %v %d bytes", status, h, len(body))
	}

	writeLayoutFile(t, dir, "bundles/polc.tar.gz", two)
	status, h, body = f.get("GET", "/bundles/polc.tar.gz", "If-None-Match", tag)
	if status != 200 || !bytes.Equal(body, two) || h.Get("ETag") != bundleETag(two) {
		t.Errorf("after the bundle was replaced: %d, ETag %s, %d bytes", status, h.Get("ETag"), len(body))
	}
	writeLayoutFile(t, dir, "revisions/r1.tar.gz", one)
	if status, h, body := f.get("GET", "/revisions/r1.tar.gz"); status != 200 || !bytes.Equal(body, one) || h.Get("ETag") != tag {
		t.Errorf("a revision: %d %v", status, h)
	}
}

// TestBundleServeRefuses: only GET and HEAD of the layout's files are
// answered: other methods are 405, other paths (temporary files, other
// directories, traversal, directories, links out of DIR) are not served,
// and requests from browsers are 403.
func TestBundleServeRefuses(t *testing.T) {
	dir := t.TempDir()
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", []byte("bundle"))
	writeLayoutFile(t, dir, "bundles/.polc.tar.gz.tmp-1", []byte("partial"))
	writeLayoutFile(t, dir, "keys/a.tar.gz", []byte("secret"))
	os.WriteFile(filepath.Join(dir, "outside.tar.gz"), []byte("outside"), 0o644)
	os.Symlink(filepath.Join(dir, "outside.tar.gz"), filepath.Join(dir, "srv", "bundles", "out.tar.gz"))
	os.Mkdir(filepath.Join(dir, "srv", "bundles", "d.tar.gz"), 0o755)
	f := startBundleServe(t, dir, &bundleServeParams{})
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		if status, h, _ := f.get(m, "/bundles/polc.tar.gz"); status != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q", m, status, h.Get("Allow"))
		}
	}
	for _, p := range []string{"/", "/bundles/", "/bundles", "/bundles/polc.tar", "/bundles/.polc.tar.gz.tmp-1",
		"/keys/a.tar.gz", "/bundles/../keys/a.tar.gz", "/bundles/%2e%2e/keys/a.tar.gz", "/bundles/sub/polc.tar.gz",
		"/revisions/polc.tar.gz", "/bundles/d.tar.gz", "/bundles/out.tar.gz", "/srv/bundles/polc.tar.gz"} {
		status, _, body := f.get("GET", p)
		if status == 200 || bytes.Contains(body, []byte("secret")) || bytes.Contains(body, []byte("outside")) || bytes.Contains(body, []byte("partial")) {
			t.Errorf("GET %s: %d %q", p, status, body)
		}
	}
	// A raw request line, which no client cleans.
	conn, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /bundles/../keys/a.tar.gz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	conn.Close()
	if resp.StatusCode == 200 || bytes.Contains(raw, []byte("secret")) {
		t.Errorf("raw traversal: %d %q", resp.StatusCode, raw)
	}
	for _, h := range [][]string{{"Origin", "https://example.com"}, {"Sec-Fetch-Site", "cross-site"}, {"Host", "attacker.example"}} {
		if status, _, _ := f.get("GET", "/bundles/polc.tar.gz", h...); status != http.StatusForbidden {
			t.Errorf("%s: %s: %d, want 403", h[0], h[1], status)
		}
	}
	if status, _, _ := f.get("GET", "/bundles/polc.tar.gz"); status != 200 {
		t.Errorf("the bundle itself: %d", status)
	}
}

// TestBundleServeListen: loopback unless --allow-remote, which takes any
// address and any Host; a Unix socket; a DIR that is not a directory.
func TestBundleServeListen(t *testing.T) {
	dir := t.TempDir()
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", []byte("bundle"))
	for _, c := range []struct {
		listen string
		remote bool
		ok     bool
	}{
		{"tcp:0.0.0.0:0", false, false}, {"tcp:192.0.2.1:80", false, false}, {"tcp:example.com:80", false, false},
		{"tcp:0.0.0.0:0", true, true}, {"tcp:127.0.0.1", true, false}, {"http://x", false, false},
	} {
		_, _, err := bundleListen(dir, c.listen, c.remote)
		if (err == nil) != c.ok {
			t.Errorf("--listen %s --allow-remote=%v: %v", c.listen, c.remote, err)
		}
	}
	f := startBundleServe(t, dir, &bundleServeParams{allowRemote: true})
	if status, _, _ := f.get("GET", "/bundles/polc.tar.gz", "Host", "bundles.example"); status != 200 {
		t.Errorf("--allow-remote, another Host: %d", status)
	}
	if status, _, _ := f.get("GET", "/bundles/polc.tar.gz", "Origin", "https://example.com"); status != http.StatusForbidden {
		t.Errorf("--allow-remote, a browser: %d", status)
	}

	sock := filepath.Join(dir, "b.sock")
	startBundleServe(t, dir, &bundleServeParams{listen: "unix:" + sock})
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://x/bundles/polc.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "bundle" {
		t.Errorf("over the Unix socket: %d %q", resp.StatusCode, body)
	}

	var stdout, stderr lockedBuffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, dir: dir}
	if code := Run(context.Background(), []string{"bundle", "serve", "srv/bundles/polc.tar.gz"}, e); code != ExitUsage {
		t.Errorf("serve of a file: exit %d, want 2", code)
	}
	if code := Run(context.Background(), []string{"bundle", "serve", "srv", "--listen", "tcp:0.0.0.0:0"}, e); code != ExitUsage || !strings.Contains(stderr.String(), "unless --allow-remote") {
		t.Errorf("serve on 0.0.0.0: exit %d\n%s", code, stderr.String())
	}
}

// TestBundleServeLongPoll: a request with Prefer: wait=N for the bundle
// the client has (If-None-Match) is held until the bundle is replaced,
// then answered with it, or until N seconds passed, then 304; one for
// another tag is answered at once. Stopping the server answers the held
// ones 503, not an empty 200.
func TestBundleServeLongPoll(t *testing.T) {
	dir := t.TempDir()
	if fi, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	} else if _, ok := identity(fi); !ok {
		t.Skip("no file identity on this system: no long polls")
	}
	one, two := []byte("one"), []byte("two")
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", one)
	f := startBundleServe(t, dir, &bundleServeParams{})
	prefer := func(n int) []string {
		return []string{"If-None-Match", bundleETag(one), "Prefer", fmt.Sprintf("modes=snapshot,delta;wait=%d", n)}
	}

	start := time.Now()
	status, _, _ := f.get("GET", "/bundles/polc.tar.gz", prefer(1)...)
	if took := time.Since(start); status != http.StatusNotModified || took < time.Second {
		t.Errorf("unchanged: %d after %v, want 304 after 1s", status, took)
	}
	start = time.Now()
	status, _, body := f.get("GET", "/bundles/polc.tar.gz", "If-None-Match", `"other"`, "Prefer", "wait=30")
	if status != 200 || !bytes.Equal(body, one) || time.Since(start) > 20*time.Second {
		t.Errorf("another tag: %d %q after %v", status, body, time.Since(start))
	}

	type answer struct {
		status int
		body   []byte
		at     time.Time
	}
	got := make(chan answer, 1)
	go func() {
		status, _, body := f.get("GET", "/bundles/polc.tar.gz", prefer(120)...)
		got <- answer{status, body, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case a := <-got:
		t.Fatalf("answered before the bundle changed: %d %q", a.status, a.body)
	default:
	}
	replaced := time.Now()
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", two)
	select {
	case a := <-got:
		if a.status != 200 || !bytes.Equal(a.body, two) {
			t.Errorf("after the change: %d %q", a.status, a.body)
		}
		t.Logf("answered %v after the change", a.at.Sub(replaced))
	case <-time.After(60 * time.Second):
		t.Fatal("the long poll was not answered within 60 s of the change")
	}

	// Held when the server stops.
	go func() {
		status, _, body := f.get("GET", "/bundles/polc.tar.gz", "If-None-Match", bundleETag(two), "Prefer", "wait=120")
		got <- answer{status, body, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond)
	if err := f.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	select {
	case a := <-got:
		if a.status != http.StatusServiceUnavailable {
			t.Errorf("held while stopping: %d %q", a.status, a.body)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the held long poll was not answered when the server stopped")
	}
}

// TestBundleServeBounds: beyond the requests (or long polls) allowed at
// once, 503 with Retry-After, which OPA retries.
func TestBundleServeBounds(t *testing.T) {
	dir := t.TempDir()
	writeLayoutFile(t, dir, "bundles/polc.tar.gz", []byte("one"))
	root, err := os.OpenRoot(filepath.Join(dir, "srv"))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	bs := &bundleServer{root: root, slots: make(chan struct{}, 1), etags: map[fileKey]string{}}
	bs.slots <- struct{}{}
	w := httptest.NewRecorder()
	bs.ServeHTTP(w, httptest.NewRequest("GET", "/bundles/polc.tar.gz", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("no slot: %d %v", w.Code, w.Header())
	}
	<-bs.slots
	w = httptest.NewRecorder()
	bs.ServeHTTP(w, httptest.NewRequest("GET", "/bundles/polc.tar.gz", nil))
	if w.Code != 200 || len(bs.slots) != 0 {
		t.Errorf("a slot: %d, %d slots held after", w.Code, len(bs.slots))
	}

	bs.changes = &changes{root: root, waits: map[string]*change{}, waiters: maxLongPolls}
	req := httptest.NewRequest("GET", "/bundles/polc.tar.gz", nil)
	req.Header.Set("If-None-Match", bundleETag([]byte("one")))
	req.Header.Set("Prefer", "wait=10")
	w = httptest.NewRecorder()
	bs.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || len(bs.slots) != 0 {
		t.Errorf("no long poll left: %d, %d slots held after", w.Code, len(bs.slots))
	}
}

// TestPreferWait: OPA's Prefer header and malformed ones.
func TestPreferWait(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"modes=snapshot,delta;wait=10": 10 * time.Second, "wait=3": 3 * time.Second, "wait=100000": maxLongPoll,
		"wait=99999999999999999999": 0, "wait=-1": 0, "wait=0": 0, "wait=x": 0, "": 0, "modes=snapshot": 0,
	} {
		if got := preferWait(in); got != want {
			t.Errorf("preferWait(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestConcurrentBundlePublishServe: while revisions are published one
// after the other, every reader of the current bundle (through polc bundle
// serve, and straight from the file) gets one whole bundle, never a mix
// or a part, with the ETag of the bytes it got.
func TestConcurrentBundlePublishServe(t *testing.T) {
	pe := newPublishEnv(t)
	b1, b2 := pe.compile(1, "o1", ""), pe.compile(2, "o2", "")
	r1, r2 := manifestRevision(t, b1), manifestRevision(t, b2)
	pe.ok("bundle", "publish", "o1/bundle.tar.gz", "srv", "--unsigned")
	f := startBundleServe(t, pe.dir, &bundleServeParams{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for range 2 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get("http://" + f.addr + "/bundles/polc.tar.gz")
				if err != nil {
					errs <- err.Error()
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || (!bytes.Equal(body, b1) && !bytes.Equal(body, b2)) || resp.Header.Get("ETag") != bundleETag(body) {
					errs <- fmt.Sprintf("served %d, %d bytes, ETag %s: %v", resp.StatusCode, len(body), resp.Header.Get("ETag"), err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := os.ReadFile(filepath.Join(pe.dir, "srv", "bundles", "polc.tar.gz"))
				if err != nil || (!bytes.Equal(b, b1) && !bytes.Equal(b, b2)) {
					errs <- fmt.Sprintf("read %d bytes: %v", len(b), err)
					return
				}
			}
		}()
	}
	for i := range 16 {
		src, rev := "o1/bundle.tar.gz", r1
		if i%2 == 0 {
			src, rev = "o2/bundle.tar.gz", r2
		}
		if out := pe.ok("bundle", "publish", src, "srv", "--unsigned"); !strings.HasPrefix(out, rev+" ") {
			t.Fatalf("publish %s: %q", src, out)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
