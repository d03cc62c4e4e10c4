package mqttbroker

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iotsafe/iotsafe/internal/netready"
)

// Bounds of a lingering close: how long, and how much, a closed connection's unread
// input is read and dropped.
const (
	lingerFor   = time.Second
	lingerBytes = 64 << 10
)

// lingeringConn is a client's connection as mochi sees it, whose Close lets the last
// packet reach the client. Closing a TCP socket with unread input makes the kernel send
// a reset, and a reset can destroy what was sent just before it: a client that sent more
// than the broker's receive maximum (or any packet past a refusal) would see "connection
// reset" instead of the DISCONNECT with its reason (issue 54.3). So Close ends the
// writing side (TLS close_notify, then FIN), reads and drops what is still coming for at
// most lingerFor or lingerBytes, then closes.
//
// It also keeps what a client waiting in the poller needs (listener.go): its Wait, which
// Close wakes, and the read deadline mochi last set.
type lingeringConn struct {
	net.Conn
	once     sync.Once
	dmu      sync.Mutex // orders inputWithin's restored deadline before Close's
	closed   atomic.Bool
	waitp    atomic.Pointer[netready.Wait]
	deadline atomic.Int64 // the read deadline, Unix nanoseconds; 0: none
}

func (c *lingeringConn) SetDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *lingeringConn) SetReadDeadline(t time.Time) error {
	c.noteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *lingeringConn) noteDeadline(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	c.deadline.Store(ns)
}

// readDeadline is the read deadline last set; the zero time: none.
func (c *lingeringConn) readDeadline() time.Time {
	if ns := c.deadline.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Unwrap is the connection underneath (a *tls13conn.Conn, a *tls.Conn, or the
// listener's own).
func (c *lingeringConn) Unwrap() net.Conn { return c.Conn }

func (c *lingeringConn) Close() error {
	c.once.Do(func() {
		c.dmu.Lock()
		c.closed.Store(true)
		c.dmu.Unlock()
		halfClose(c.Conn)
		c.Conn.SetReadDeadline(time.Now().Add(lingerFor))
		// mochi's reader may be in Read too: whichever reads, the input is consumed, and
		// both stop at the deadline. Close returns at once: a revocation that closes many
		// clients does not wait for each.
		go func() {
			io.Copy(io.Discard, io.LimitReader(c.Conn, lingerBytes))
			c.Conn.Close()
		}()
		if w := c.waitp.Load(); w != nil {
			w.Wake() // a client waiting in the poller: its session ends now, not at its deadline
		}
	})
	return nil
}

// inputWithin reports whether the socket under c (rc, raw) has input within d, or
// before the read deadline mochi set if that comes first, without reading it. The read
// deadline is put back after; a Close meanwhile keeps its own.
func (c *lingeringConn) inputWithin(rc syscall.RawConn, raw net.Conn, d time.Duration) bool {
	keep := c.readDeadline()
	limit := time.Now().Add(d)
	if !keep.IsZero() && keep.Before(limit) {
		limit = keep
	}
	raw.SetReadDeadline(limit)
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Input, the end of the stream or an error: the read that follows will tell.
		return err != syscall.EAGAIN && err != syscall.EINTR
	})
	c.dmu.Lock()
	if !c.closed.Load() {
		raw.SetReadDeadline(keep)
	}
	c.dmu.Unlock()
	return err == nil
}

// halfClose ends c's writing side where it can; on a TLS connection, close_notify and
// then the TCP FIN beneath it.
func halfClose(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	type tlsConn interface { // a *tls.Conn or a *tls13conn.Conn
		net.Conn
		closeWriter
		NetConn() net.Conn
	}
	if tc, ok := c.(tlsConn); ok {
		tc.SetWriteDeadline(time.Now().Add(lingerFor))
		tc.CloseWrite() // close_notify; an error (no handshake yet) is no reason to stop
		c = tc.NetConn()
	}
	if cw, ok := c.(closeWriter); ok {
		cw.CloseWrite()
	}
}

// rawConn is the connection under a lingeringConn (what deviceconn and the TLS state
// are read from).
func rawConn(c net.Conn) net.Conn {
	if lc, ok := c.(*lingeringConn); ok {
		return lc.Conn
	}
	return c
}
