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

// Pipe copies both ways between a device stream and a TCP connection, propagating
// half-closes, and returns the bytes carried each way once both directions are done.
// It closes both ends; done, if not nil, runs after copying and before the channel is
// closed, so the peer never sees the close before the caller's bookkeeping is done.
func Pipe(ch Stream, conn net.Conn, done func()) (toChannel, fromChannel int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fromChannel = copyBuf(conn, ch)
		if tc, ok := conn.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		} else {
			conn.Close()
		}
	}()
	toChannel = copyBuf(ch, conn)
	ch.CloseWrite()
	wg.Wait()
	if done != nil {
		done()
	}
	ch.Close()
	conn.Close()
	return toChannel, fromChannel
}

func copyBuf(dst io.Writer, src io.Reader) int64 {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	// Hide ReaderFrom/WriterTo so the pooled buffer is always the one used.
	n, _ := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
	return n
}
