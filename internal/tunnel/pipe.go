package tunnel

import (
	"errors"
	"io"
	"net"
	"sync"

	"github.com/iotsafe/iotsafe/internal/zmux"
)

// Stream is the device side of a forwarded connection: an SSH channel, or a stream of
// the session's compressed multiplexer.
type Stream interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// 32 KiB matches the SSH maximum packet, so one read fills at most one packet.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

// Result is what Pipe carried, and why it ended early if it did.
type Result struct {
	ToChannel, FromChannel int64
	// Aborted is the error that ended a direction before a clean end (the device's side
	// was reset, its session lost, the local client reset); nil when both ended cleanly.
	Aborted error
}

// Pipe copies both ways between a device stream and a TCP connection (or another
// stream: a gateway relays a centre's channel to its device), propagating
// half-closes, and returns the bytes carried each way once both directions are done.
// A direction that ends in an error rather than a clean end (the device's session was
// lost, the local client reset) aborts the other end too: the local client gets a TCP
// reset, not a FIN it would take for a complete answer, and a multiplexed stream on
// the other end is reset with the reason the first one gave, so the cause travels
// across a gateway. Pipe closes both ends; done, if not nil, runs after copying and
// before the stream is closed, so the peer never sees the close before the caller's
// bookkeeping is done.
func Pipe(ch Stream, conn io.ReadWriteCloser, done func()) Result {
	var r Result
	var first sync.Once // the first failure is the cause; the other follows from it
	failed := func(err error) {
		first.Do(func() { r.Aborted = err })
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		r.FromChannel, err = copyBuf(conn, ch)
		switch tc, ok := conn.(interface{ CloseWrite() error }); {
		case err != nil:
			failed(err)
			abort(conn, err)
			abort(ch, err)
		case ok:
			tc.CloseWrite()
		default:
			conn.Close()
		}
	}()
	var err error
	r.ToChannel, err = copyBuf(ch, conn)
	if err != nil {
		failed(err)
		abort(ch, err) // the reader above then fails and aborts conn
	} else {
		ch.CloseWrite()
	}
	wg.Wait()
	if done != nil {
		done()
	}
	ch.Close()
	conn.Close()
	return r
}

// abort ends c after why ended a direction: a TCP connection with a reset, a
// multiplexed stream with a reset carrying why's reason, anything else by closing it.
func abort(c io.Closer, why error) {
	switch c := c.(type) {
	case *net.TCPConn:
		c.SetLinger(0)
		c.Close()
	case *zmux.Stream:
		c.Reset(reason(why))
	default:
		c.Close()
	}
}

// reason is why's text for a peer: a reset's own reason is passed on as it is.
func reason(why error) string {
	var re *zmux.ResetError
	if errors.As(why, &re) {
		return re.Reason
	}
	return why.Error()
}

func copyBuf(dst io.Writer, src io.Reader) (int64, error) {
	if st, ok := dst.(*zmux.Stream); ok {
		// The stream reads into its own frames, each read filling one SSH packet.
		return st.ReadFrom(src)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	// Hide ReaderFrom/WriterTo so the pooled buffer is always the one used.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}
