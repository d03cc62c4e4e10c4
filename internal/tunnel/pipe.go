package tunnel

import (
	"io"
	"net"
	"sync"
)

// Stream is the device side of a forwarded connection: an SSH channel, or a stream of
// the session's compressed multiplexer.
type Stream interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// 32 KiB matches the SSH maximum packet, so one read fills at most one packet.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

// Pipe copies both ways between a device stream and a TCP connection (or another
// stream: a gateway relays a centre's channel to its device), propagating
// half-closes, and returns the bytes carried each way once both directions are done.
// A direction that ends in an error rather than a clean end (the device's session was
// lost, the local client reset) aborts the other end too: the local client gets a TCP
// reset, not a FIN it would take for a complete answer. Pipe closes both ends; done, if
// not nil, runs after copying and before the stream is closed, so the peer never sees
// the close before the caller's bookkeeping is done.
func Pipe(ch Stream, conn io.ReadWriteCloser, done func()) (toChannel, fromChannel int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var err error
		fromChannel, err = copyBuf(conn, ch)
		switch tc, ok := conn.(interface{ CloseWrite() error }); {
		case err != nil:
			abort(conn)
			ch.Close()
		case ok:
			tc.CloseWrite()
		default:
			conn.Close()
		}
	}()
	var err error
	toChannel, err = copyBuf(ch, conn)
	if err != nil {
		ch.Close() // the reader above then fails and aborts conn
	} else {
		ch.CloseWrite()
	}
	wg.Wait()
	if done != nil {
		done()
	}
	ch.Close()
	conn.Close()
	return toChannel, fromChannel
}

// abort closes c with a reset where it is TCP.
func abort(c io.Closer) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func copyBuf(dst io.Writer, src io.Reader) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	// Hide ReaderFrom/WriterTo so the pooled buffer is always the one used.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}
