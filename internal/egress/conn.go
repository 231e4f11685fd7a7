package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// activity is when a proxied connection last moved a byte, in either
// direction: a tunnel whose client is silent while the destination
// streams a download is not idle.
type activity struct {
	idle time.Duration
	last atomic.Int64 // UnixNano
}

func newActivity(idle time.Duration) *activity {
	a := &activity{idle: idle}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) busy() bool {
	return time.Since(time.Unix(0, a.last.Load())) < a.idle
}

// idleConn is one side of a proxied connection. A read or write fails
// with a timeout only once no byte has moved either way for the idle
// timeout; count is the bytes written through it.
type idleConn struct {
	net.Conn
	act     *activity
	count   atomic.Int64
	aborted atomic.Bool
}

var errAborted = errors.New("reading stopped by the proxy")

func (c *idleConn) Read(p []byte) (int, error) {
	for {
		c.Conn.SetReadDeadline(time.Now().Add(c.act.idle))
		// Checked after setting the deadline: an abort after this check
		// sets its past deadline after ours, so the read below returns.
		if c.aborted.Load() {
			return 0, errAborted
		}
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.act.touch()
		}
		if n == 0 && isTimeout(err) && c.act.busy() {
			continue
		}
		return n, err
	}
}

// abort makes the current and every later Read return errAborted (or
// what it read before): it stops a goroutine reading the client's body
// once the answer is out, without closing the connection.
func (c *idleConn) abort() {
	c.aborted.Store(true)
	c.Conn.SetReadDeadline(time.Unix(1, 0))
}

func (c *idleConn) Write(p []byte) (int, error) {
	done := 0
	for {
		c.Conn.SetWriteDeadline(time.Now().Add(c.act.idle))
		n, err := c.Conn.Write(p[done:])
		done += n
		if n > 0 {
			c.act.touch()
			c.count.Add(int64(n))
		}
		if err != nil && isTimeout(err) && c.act.busy() {
			continue
		}
		return done, err
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closeWrite half-closes c when it can (TCP, unix sockets), telling the
// peer no more data comes while the other direction goes on.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// limitReader is io.LimitedReader whose limit can be lifted (n < 0) and
// whose source can be swapped: the request header is read under a size
// limit and one deadline for all of it; the body after it, through the
// same bufio.Reader, under neither.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// exhausted reports whether the limit was reached.
func (l *limitReader) exhausted() bool { return l.n == 0 }

// Lingering: after its answer, the proxy stops writing and reads what the
// client still sends for a moment before closing. Closing a socket with
// unread data makes the kernel reset the connection, and a reset can
// destroy the answer before the client has read it (a 403 to a client
// that pipelined a second request, or still uploads a body).
const (
	lingerTimeout = 500 * time.Millisecond
	lingerMax     = 256 << 10
)

func lingerClose(c net.Conn) {
	closeWrite(c)
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, c, lingerMax)
	c.Close()
}
