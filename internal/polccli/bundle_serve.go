package polccli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

type bundleServeParams struct {
	dir, listen string
	allowRemote bool
	// ready, when set, receives the address once the server accepts
	// (tests).
	ready func(addr string)
}

// defaultBundleListen is where polc bundle serve listens by default:
// loopback only.
const defaultBundleListen = "tcp:127.0.0.1:8282"

func newBundleServeCmd(e *env) *cobra.Command {
	p := &bundleServeParams{}
	c := &cobra.Command{
		Use:   "serve DIR [--listen tcp:HOST:PORT|unix:PATH] [--allow-remote]",
		Short: "Serve a bundle-server directory to OPA's bundle downloader",
		Long: `serve answers OPA's bundle service protocol from DIR, the directory
polc bundle publish writes:

  GET /bundles/polc.tar.gz        the current bundle
  GET /revisions/<rev>.tar.gz     the bundle of a revision published

and HEAD of either; nothing else (no listing, no other file, no other
method). Each answer has a strong ETag, the sha256 of the file's bytes: a
request whose If-None-Match names it (OPA sends the ETag of the bundle it
runs) is answered 304 Not Modified without a body. Every file is read
from one open descriptor, so a publish that renames a new bundle into
place never mixes two in one answer.

The listener is TCP on a loopback address (default ` + defaultBundleListen + `)
or a Unix socket; --allow-remote accepts any TCP address, for OPA servers
on other hosts (anyone who can reach the port can then read the policy
bundles; put TLS in front, or use any static HTTP server, docs/scale.md).
Requests from web browsers (Origin, Sec-Fetch-Site; over TCP without
--allow-remote, a Host that is not loopback) are refused. At most 256
requests are answered at once (more are 503 with Retry-After: OPA
retries). SIGINT and SIGTERM stop the server (exit 0). Exit 2 on bad
input (DIR not a directory, a listener that cannot be opened).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			p.dir = args[0]
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBundleServe(ctx, e, p)
		},
	}
	c.Flags().StringVar(&p.listen, "listen", defaultBundleListen, "tcp:HOST:PORT (loopback, unless --allow-remote) or unix:PATH")
	c.Flags().BoolVar(&p.allowRemote, "allow-remote", false, "accept a TCP address that is not loopback, and any Host header")
	return c
}

// maxBundleRequests bounds the requests answered at once.
const maxBundleRequests = 256

// bundleWriteTimeout bounds the sending of one answer, so that a client
// that stops reading does not hold a connection forever.
const bundleWriteTimeout = 5 * time.Minute

func runBundleServe(ctx context.Context, e *env, p *bundleServeParams) error {
	network, addr, err := bundleListen(e.dir, p.listen, p.allowRemote)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(e.abs(p.dir))
	if err != nil {
		return usagef("bundle serve: %v", err)
	}
	defer root.Close()
	var ln net.Listener
	if network == "unix" {
		var remove func()
		if ln, remove, err = listenUnix(addr); err != nil {
			return usagef("--listen: %v", err)
		}
		defer remove()
	} else if ln, err = net.Listen(network, addr); err != nil {
		return usagef("--listen: %v", err)
	}
	bs := &bundleServer{root: root, checkHost: network == "tcp" && !p.allowRemote,
		slots: make(chan struct{}, maxBundleRequests), etags: map[fileKey]string{}}
	hs, served := startHTTP(ctx, e, "bundle serve", bs, ln, network, addr, p.ready)
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil {
		hs.Close()
	}
	return nil
}

// bundleListen is parseListen, but for --allow-remote, which takes any
// TCP address.
func bundleListen(dir, listen string, allowRemote bool) (network, addr string, err error) {
	if rest, ok := strings.CutPrefix(listen, "tcp:"); ok && allowRemote {
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", "", usagef("--listen %q: %v", listen, err)
		}
		return "tcp", rest, nil
	}
	network, addr, err = parseListen(dir, listen)
	var ue *usageError
	if errors.As(err, &ue) && strings.Contains(ue.msg, "loopback") {
		return "", "", usagef("--listen %q: TCP only on a loopback address unless --allow-remote", listen)
	}
	return network, addr, err
}

// bundleServer answers GET and HEAD of the layout's files.
type bundleServer struct {
	root *os.Root
	// checkHost: the listener is TCP on loopback, so a Host that is not
	// loopback is a page that rebound its name to this address.
	checkHost bool
	slots     chan struct{}
	mu        sync.Mutex
	etags     map[fileKey]string // of files seen, by identity
}

// maxETags bounds the ETags kept: those of the current bundle and of the
// revisions asked for lately.
const maxETags = 64

func (bs *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := fromBrowser(r, bs.checkHost); msg != "" {
		apiError(w, http.StatusForbidden, "forbidden", "%s", msg)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", "%s does not take %s", r.URL.Path, r.Method)
		return
	}
	name, err := layoutFile(r.URL.Path)
	if err != nil {
		apiError(w, http.StatusNotFound, "not_found", "no bundle %s", r.URL.Path)
		return
	}
	select {
	case bs.slots <- struct{}{}:
		defer func() { <-bs.slots }()
	default:
		w.Header().Set("Retry-After", retryAfter)
		apiError(w, http.StatusServiceUnavailable, "server_busy", "too many requests at once")
		return
	}
	f, err := bs.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		apiError(w, http.StatusNotFound, "not_found", "no bundle %s", r.URL.Path)
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "io_error", "%s: %v", name, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		apiError(w, http.StatusNotFound, "not_found", "no bundle %s", r.URL.Path)
		return
	}
	var etag string
	if err == nil {
		etag, err = bs.etag(f, fi)
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "io_error", "%s: %v", name, err)
		return
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(bundleWriteTimeout))
	h := w.Header()
	h.Set("ETag", etag)
	// Caches in between must ask again before reusing an answer.
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "application/gzip")
	// ServeContent answers If-None-Match (a list of tags, or *) with 304,
	// HEAD without a body, and ranges; a zero time sends no Last-Modified,
	// so the ETag alone decides.
	http.ServeContent(w, r, "", time.Time{}, f)
}

// etag is the ETag of the open file f: remembered by the file's identity
// (device, inode, size, times) where the system gives one, computed from
// f's bytes otherwise. Publishing renames a new file into place, so a new
// bundle is a new identity; f is left at its start.
func (bs *bundleServer) etag(f *os.File, fi os.FileInfo) (string, error) {
	key, keyed := identity(fi)
	if keyed {
		bs.mu.Lock()
		tag, ok := bs.etags[key]
		bs.mu.Unlock()
		if ok {
			return tag, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tag := `"` + hex.EncodeToString(h.Sum(nil)) + `"`
	if keyed {
		bs.mu.Lock()
		if len(bs.etags) >= maxETags {
			clear(bs.etags)
		}
		bs.etags[key] = tag
		bs.mu.Unlock()
	}
	return tag, nil
}
