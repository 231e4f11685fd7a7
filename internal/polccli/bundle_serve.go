package polccli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
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
	if fi, err := root.Stat("."); err == nil {
		if _, ok := identity(fi); ok {
			// Long polls need to see a file replaced: by its identity.
			bs.changes = &changes{root: root, waits: map[string]*change{}}
			go bs.changes.run(ctx)
		}
	}
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
	// changes tells long polls that a file was replaced (nil: no long
	// polls, where files have no identity).
	changes *changes
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
	var until time.Time
	if wait := preferWait(r.Header.Get("Prefer")); wait > 0 && bs.changes != nil {
		until = time.Now().Add(wait)
	}
	for {
		select {
		case bs.slots <- struct{}{}:
		default:
			w.Header().Set("Retry-After", retryAfter)
			apiError(w, http.StatusServiceUnavailable, "server_busy", "too many requests at once")
			return
		}
		f, fi, etag, status, err := bs.open(name)
		if err != nil {
			<-bs.slots
			code := "io_error"
			if status == http.StatusNotFound {
				code = "not_found"
			}
			apiError(w, status, code, "%s: %v", r.URL.Path, err)
			return
		}
		if time.Now().Before(until) && etagListed(r.Header.Get("If-None-Match"), etag) {
			// A long poll (OPA's Prefer: wait=N) for a bundle the client
			// has: held, without a slot, until the file changes or the
			// wait is over (then 304).
			key, _ := identity(fi)
			f.Close()
			<-bs.slots
			changed, stop, ok := bs.changes.watch(name, key)
			if !ok {
				w.Header().Set("Retry-After", retryAfter)
				apiError(w, http.StatusServiceUnavailable, "server_busy", "too many long polls at once")
				return
			}
			t := time.NewTimer(time.Until(until))
			select {
			case <-changed:
			case <-t.C:
				until = time.Time{}
			case <-r.Context().Done():
			}
			t.Stop()
			stop()
			if r.Context().Err() != nil {
				// The server is stopping (or the client left): an
				// answer without a bundle, which OPA retries, never an
				// empty 200.
				w.Header().Set("Retry-After", retryAfter)
				apiError(w, http.StatusServiceUnavailable, "server_stopping", "the server is stopping")
				return
			}
			continue
		}
		bs.send(w, r, f, etag)
		f.Close()
		<-bs.slots
		return
	}
}

// open opens the layout file name, and says what to answer when it
// cannot: 404 when there is no such regular file, 500 otherwise (a
// symbolic link out of DIR is an error of the directory, never followed).
func (bs *bundleServer) open(name string) (f *os.File, fi os.FileInfo, etag string, status int, err error) {
	f, err = bs.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, "", http.StatusNotFound, errors.New("no such bundle")
	}
	if err != nil {
		return nil, nil, "", http.StatusInternalServerError, err
	}
	if fi, err = f.Stat(); err == nil && !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, "", http.StatusNotFound, errors.New("no such bundle")
	}
	if err == nil {
		etag, err = bs.etag(f, fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, "", http.StatusInternalServerError, err
	}
	return f, fi, etag, 0, nil
}

// send answers with the open file f.
func (bs *bundleServer) send(w http.ResponseWriter, r *http.Request, f *os.File, etag string) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(bundleWriteTimeout))
	h := w.Header()
	h.Set("ETag", etag)
	// Caches in between must ask again before reusing an answer.
	h.Set("Cache-Control", "no-cache")
	if bs.changes != nil {
		// OPA long-polls (when its configuration asks to) only a server
		// that answers with this type.
		h.Set("Content-Type", longPollType)
	} else {
		h.Set("Content-Type", "application/gzip")
	}
	// ServeContent answers If-None-Match (a list of tags, or *) with 304,
	// HEAD without a body, and ranges; a zero time sends no Last-Modified,
	// so the ETag alone decides.
	http.ServeContent(w, r, "", time.Time{}, f)
}

// longPollType is the Content-Type by which a bundle server tells OPA it
// holds long polls.
const longPollType = "application/vnd.openpolicyagent.bundles"

// maxLongPoll bounds how long a long poll is held, whatever it asks for.
const maxLongPoll = 5 * time.Minute

// preferWait is the wait=N (seconds) of a Prefer header, as OPA sends it
// ("modes=snapshot,delta;wait=10"), bounded by maxLongPoll; 0 when absent
// or malformed.
func preferWait(prefer string) time.Duration {
	for _, p := range strings.FieldsFunc(prefer, func(r rune) bool { return r == ';' || r == ',' }) {
		v, ok := strings.CutPrefix(strings.TrimSpace(p), "wait=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return 0
		}
		return min(time.Duration(min(n, math.MaxInt32))*time.Second, maxLongPoll)
	}
	return 0
}

// etagListed reports whether an If-None-Match header names etag (or is
// "*"), comparing weakly as RFC 9110 says for If-None-Match: OPA sends the
// tag of the bundle it runs, followed by those of bundles it replaced
// lately, and a match of any means the client needs nothing new.
func etagListed(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

// etag is the ETag of the open file f: computed from f's bytes, and
// remembered by the file's identity (device, inode, size, modification and
// status change times) where the system gives one. Publishing renames a
// new file into place, so a new bundle is a new identity; a file rewritten
// in place gets a new ctime. No identity short of the bytes is exact (two
// rewrites within one tick of the filesystem's clock, or one while f is
// read, can leave a ctime unchanged), so a tag is remembered only for a
// file whose identity was the same before and after it was read and whose
// ctime is racyWindow older than the read: any later change has a later
// ctime. A file changed lately is hashed on every request. f is left at
// its start.
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
	start := time.Now()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tag := `"` + hex.EncodeToString(h.Sum(nil)) + `"`
	if keyed && key.changedAt() < start.Add(-racyWindow).UnixNano() {
		if after, err := f.Stat(); err == nil {
			if again, ok := identity(after); ok && again == key {
				bs.mu.Lock()
				if len(bs.etags) >= maxETags {
					clear(bs.etags)
				}
				bs.etags[key] = tag
				bs.mu.Unlock()
			}
		}
	}
	return tag, nil
}

// racyWindow is how old a file's ctime must be before its tag is
// remembered: more than the coarsest timestamp granularity of the
// filesystems a layout lives on (nanoseconds on ext4, xfs, btrfs and
// tmpfs, ticked by a clock of a few milliseconds; whole seconds on some).
const racyWindow = 2 * time.Second

// maxLongPolls bounds the long polls held at once.
const maxLongPolls = 4096

// changeTick is how often a file that long polls wait on is looked at.
const changeTick = 100 * time.Millisecond

// changes tells long polls when a file of the layout is replaced. One
// goroutine looks at the files waited on (only those), every changeTick.
type changes struct {
	root    *os.Root
	mu      sync.Mutex
	waits   map[string]*change // by layout file
	waiters int
}

// change is a file waited on: its identity when the wait began, and a
// channel closed once the file is no longer that one.
type change struct {
	seen    fileKey
	done    chan struct{}
	waiters int
}

// watch returns a channel closed when the file name is no longer the one
// of identity seen, and stop, to call once done waiting. ok is false when
// maxLongPolls waits are held already.
func (c *changes) watch(name string, seen fileKey) (changed <-chan struct{}, stop func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiters >= maxLongPolls {
		return nil, nil, false
	}
	ch := c.waits[name]
	if ch == nil {
		ch = &change{seen: seen, done: make(chan struct{})}
		c.waits[name] = ch
	} else if ch.seen != seen {
		// Waiters saw two files under one name: it changed at least for
		// some; all look again.
		close(ch.done)
		ch = &change{seen: seen, done: make(chan struct{})}
		c.waits[name] = ch
	}
	ch.waiters++
	c.waiters++
	return ch.done, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.waiters--
		if ch.waiters--; ch.waiters == 0 && c.waits[name] == ch {
			delete(c.waits, name)
		}
	}, true
}

// run looks at the files waited on every changeTick until ctx is done,
// and wakes the waiters of each one replaced (or gone).
func (c *changes) run(ctx context.Context) {
	t := time.NewTicker(changeTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		names := make(map[string]*change, len(c.waits))
		maps.Copy(names, c.waits)
		c.mu.Unlock()
		for name, ch := range names {
			var key fileKey
			fi, err := c.root.Stat(name)
			if err == nil {
				key, _ = identity(fi)
			}
			if err == nil && key == ch.seen {
				continue
			}
			c.mu.Lock()
			if c.waits[name] == ch {
				close(ch.done)
				delete(c.waits, name)
			}
			c.mu.Unlock()
		}
	}
}
