package zmux

import (
	"io"
	"sync"
)

// burstReader reads the session's channel: through a small pooled buffer while the
// session is quiet, through a large pooled one while data streams in, and through none
// while it waits for the next frame of a quiet session (it reads one byte then): an idle
// session, which is most of a hub's devices most of the time, holds no buffer.
// x/crypto/ssh sends a window adjustment for nearly every Read once data is queued in a
// channel, so a bulk transfer read in 4 KiB pieces sent one adjustment packet per piece;
// read in pieces the size of the large buffer it sends one per several packets, as a
// plain channel copied with a 32 KiB buffer does.
type burstReader struct {
	r     io.Reader
	one   [1]byte // what a quiet wait reads into
	small *[]byte // from smallBufs while frames arrive; nil while idle or streaming
	big   *[]byte // from burstBufs while streaming; nil when quiet
	buf   []byte  // one[:], *small or *big
	rpos  int
	wpos  int
	last  int // bytes the last fill read
	err   error
	// beforeRead, if set, runs before each read of r, which may wait: what was
	// decoded so far is handed on first.
	beforeRead func()
}

const (
	// smallSize is the buffer of a quiet session while a frame arrives.
	smallSize = 4 << 10
	// burstSize is the large buffer: two SSH packets of 32 KiB.
	burstSize = 64 << 10
)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallSize); return &b }}
	burstBufs = sync.Pool{New: func() any { b := make([]byte, burstSize); return &b }}
)

func newBurstReader(r io.Reader, beforeRead func()) *burstReader {
	return &burstReader{r: r, beforeRead: beforeRead}
}

// readSource reads r once.
func (b *burstReader) readSource(p []byte) (int, error) {
	if b.beforeRead != nil {
		b.beforeRead()
	}
	return b.r.Read(p)
}

// fill reads once into an empty buffer: the large one if the last read filled the small
// one (data is streaming), the small one once a read came back less than half full (the
// stream slowed) and the large one went back to the pool.
func (b *burstReader) fill() error {
	if b.err != nil {
		return b.err
	}
	switch {
	case b.big == nil && b.last >= smallSize:
		b.big = burstBufs.Get().(*[]byte)
		b.putSmall()
	case b.big != nil && b.last < burstSize/2:
		burstBufs.Put(b.big)
		b.big = nil
	}
	if b.big != nil {
		b.buf = *b.big
	} else {
		if b.small == nil {
			b.small = smallBufs.Get().(*[]byte)
		}
		b.buf = *b.small
	}
	return b.read()
}

// read reads once into b.buf, which is empty.
func (b *burstReader) read() error {
	n, err := b.readSource(b.buf)
	b.rpos, b.wpos, b.last = 0, n, n
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	if err != nil && n == 0 {
		b.err = err
		b.release()
		return err
	}
	if err != nil {
		b.err = err // delivered after the bytes read with it
	}
	return nil
}

// release returns the buffers once the session ends.
func (b *burstReader) release() {
	if b.rpos == b.wpos {
		if b.big != nil {
			burstBufs.Put(b.big)
			b.big = nil
		}
		b.putSmall()
		b.buf = nil
	}
}

func (b *burstReader) putSmall() {
	if b.small != nil {
		smallBufs.Put(b.small)
		b.small = nil
	}
}

// wait blocks until at least one byte is buffered (the read loop's wait for a frame).
// A quiet session gives its buffer back and waits on a one-byte read: the rest of the
// frame is on its way, so the reads that follow do not wait long with a buffer.
func (b *burstReader) wait() error {
	if b.rpos < b.wpos {
		return nil
	}
	if b.err != nil || b.big != nil || b.last >= smallSize {
		return b.fill()
	}
	b.putSmall()
	b.buf = b.one[:]
	return b.read()
}

// ReadByte implements io.ByteReader.
func (b *burstReader) ReadByte() (byte, error) {
	if err := b.wait(); err != nil {
		return 0, err
	}
	c := b.buf[b.rpos]
	b.rpos++
	return c, nil
}

// Read implements io.Reader.
func (b *burstReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.rpos == b.wpos {
		if b.big == nil && b.last < smallSize && len(p) >= smallSize {
			// Quiet and a large read: straight into p, as bufio does.
			n, err := b.readSource(p)
			b.last = n
			if n == 0 && err == nil {
				err = io.ErrNoProgress
			}
			return n, err
		}
		if err := b.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, b.buf[b.rpos:b.wpos])
	b.rpos += n
	return n, nil
}
