package zmux

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A bulk copy from a TCP connection into a stream (a device's service answering
// through its forward, a local client uploading through the hub) reads the socket
// straight into the frames it sends: one readv fills the payloads of two data frames
// laid out with the second one's header between them, and the frames go to the channel
// from that buffer. Write would copy each payload once more into the session's queue,
// about 5% of a device's CPU in a bulk transfer.

// packetBufs hold the two frames ReadFrom builds: one SSH packet of 32 KiB.
var packetBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

const (
	// packetWrite is the largest stream Write whose frames, headers included, fit one
	// SSH packet of 32 KiB (the channel payload x/crypto/ssh and OpenSSH accept): two
	// frames, each header at most maxDataHeader bytes. A 32 KiB write took a second
	// packet of a few bytes every time.
	packetWrite = 32<<10 - 2*maxDataHeader
	// maxDataHeader bounds a data frame's header: type, stream id and length varints.
	maxDataHeader = 1 + binary.MaxVarintLen64 + 3
)

// ReadFrom copies r into the stream until r ends (io.ReaderFrom; io.Copy uses it). It
// returns nil at r's io.EOF, as io.Copy does, and does not close the stream. From a
// TCP connection it reads straight into the frames it sends; from anything else it
// copies through Write in packet-sized pieces.
func (st *Stream) ReadFrom(r io.Reader) (int64, error) {
	var rc syscall.RawConn
	if tc, ok := r.(*net.TCPConn); ok {
		// Only the connection itself: a type wrapping one may hold bytes it has read
		// (a peeked prefix) that the socket no longer has.
		rc, _ = tc.SyscallConn()
	}
	if rc == nil {
		bp := packetBufs.Get().(*[]byte)
		defer packetBufs.Put(bp)
		return io.CopyBuffer(struct{ io.Writer }{st}, struct{ io.Reader }{r}, (*bp)[:packetWrite])
	}
	bp := packetBufs.Get().(*[]byte)
	defer packetBufs.Put(bp)
	buf := *bp
	idLen := uvarintLen(st.id)
	// The second payload is at most packetWrite-MaxData bytes, under 16,384: its length
	// takes two varint bytes, or one under 128.
	p1 := 1 + idLen + 3      // the first payload, after room for its header
	gap := 1 + idLen + 2     // the second header, for a payload of 128 bytes or more
	p2 := p1 + MaxData + gap // the second payload
	var total int64
	var iovs [2][]byte
	for {
		limit, err := st.reserve(packetWrite)
		if err != nil {
			return total, err
		}
		iovs[0] = buf[p1 : p1+min(limit, MaxData)]
		iov := iovs[:1]
		if limit > MaxData {
			iovs[1] = buf[p2 : p2+limit-MaxData]
			iov = iovs[:2]
		}
		n, rerr := readv(rc, iov)
		var frames []byte
		if n > 0 {
			frames = layFrames(buf, st.id, p1, p2, n)
		}
		if err := st.sendFrames(frames, limit, n); err != nil {
			return total, err
		}
		total += int64(n)
		switch {
		case rerr == io.EOF:
			return total, nil
		case rerr != nil:
			return total, rerr
		}
	}
}

// readv reads once from the socket into iov, waiting for data as the connection's Read
// does (its deadline and Close apply). 0 bytes is io.EOF.
func readv(rc syscall.RawConn, iov [][]byte) (int, error) {
	var n int
	var err error
	if cerr := rc.Read(func(fd uintptr) bool {
		n, err = unix.Readv(int(fd), iov)
		return err != unix.EAGAIN
	}); cerr != nil {
		return 0, cerr
	}
	switch {
	case err != nil:
		return 0, os.NewSyscallError("readv", err)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// layFrames writes the headers around n bytes read into buf at p1 (and, past MaxData,
// at p2) and returns the frames.
func layFrames(buf []byte, id uint64, p1, p2, n int) []byte {
	n1 := min(n, MaxData)
	var h [maxDataHeader]byte
	h1 := binary.AppendUvarint(appendHeader(h[:0], frameData, id), uint64(n1))
	start := p1 - len(h1)
	copy(buf[start:], h1)
	if n == n1 {
		return buf[start : p1+n]
	}
	n2 := n - n1
	h2 := binary.AppendUvarint(appendHeader(h[:0], frameData, id), uint64(n2))
	at := p1 + MaxData
	copy(buf[at:], h2)
	if at+len(h2) < p2 {
		// A payload under 128 bytes has a one-byte length: it moves up one byte.
		copy(buf[at+len(h2):], buf[p2:p2+n2])
	}
	return buf[start : at+len(h2)+n2]
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

// reserve waits for send window and takes up to max bytes of it for a read that has not
// happened yet; sendFrames gives back what the read did not use.
func (st *Stream) reserve(max int) (int, error) {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if err := st.writeErr(); err != nil {
			return 0, err
		}
		if st.window > 0 {
			n := min(uint64(max), st.window)
			st.window -= n
			return int(n), nil
		}
		st.cond.Wait()
	}
}

// writeErr is why the stream can send no more, nil if it can. s.mu is held.
func (st *Stream) writeErr() error {
	switch {
	case st.reset != nil:
		return st.reset
	case st.sentEOF || st.closed:
		return ErrClosed
	case st.s.err != nil:
		return st.s.streamErr()
	}
	return nil
}

// sendFrames sends frames built by ReadFrom from n of the reserved bytes: from its own
// buffer when no writer runs, else queued after what is already waiting.
func (st *Stream) sendFrames(frames []byte, reserved, n int) error {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st.window += uint64(reserved - n)
	if len(frames) == 0 {
		return nil
	}
	for {
		if err := st.writeErr(); err != nil {
			return err
		}
		if !s.writing && len(s.out) == 0 {
			s.writing = true
			err := s.sendUnlocked(frames)
			s.endInline(err)
			if err != nil {
				return st.writeErr()
			}
			return nil
		}
		if len(s.out) < maxQueued {
			s.out = append(s.out, frames...)
			s.flush()
			return nil
		}
		if !s.flush() {
			s.outSpace.Wait()
		}
	}
}
