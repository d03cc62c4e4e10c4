package zmux

import (
	"io"
	"sync"
)

// burstReader reads the session's channel: through a small buffer of its own while the
// session is quiet, through a large pooled one while data streams in. x/crypto/ssh sends
// a window adjustment for nearly every Read once data is queued in a channel, so a bulk
// transfer read in 4 KiB pieces sent one adjustment packet per piece; read in pieces the
// size of the large buffer it sends one per several packets, as a plain channel copied
// with a 32 KiB buffer does. An idle session holds no large buffer.
type burstReader struct {
	r     io.Reader
	small [4 << 10]byte
	big   *[]byte // from burstBufs while streaming; nil when quiet
	buf   []byte  // small[:] or *big
	rpos  int
	wpos  int
	last  int // bytes the last fill read
	err   error
}

// burstSize is the large buffer: two SSH packets of 32 KiB.
const burstSize = 64 << 10

var burstBufs = sync.Pool{New: func() any { b := make([]byte, burstSize); return &b }}

func newBurstReader(r io.Reader) *burstReader {
	b := &burstReader{r: r}
	b.buf = b.small[:]
	return b
}

// fill reads once into an empty buffer: the large one if the last read filled the small
// one (data is streaming), the small one once a read came back less than half full (the
// stream slowed) and the large one went back to the pool.
func (b *burstReader) fill() error {
	if b.err != nil {
		return b.err
	}
	switch {
	case b.big == nil && b.last >= len(b.small):
		b.big = burstBufs.Get().(*[]byte)
	case b.big != nil && b.last < burstSize/2:
		burstBufs.Put(b.big)
		b.big = nil
	}
	b.buf = b.small[:]
	if b.big != nil {
		b.buf = *b.big
	}
	n, err := b.r.Read(b.buf)
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

// release returns the large buffer once the session ends.
func (b *burstReader) release() {
	if b.big != nil && b.rpos == b.wpos {
		burstBufs.Put(b.big)
		b.big = nil
		b.buf = b.small[:]
	}
}

// wait blocks until at least one byte is buffered (the read loop's wait for a frame).
func (b *burstReader) wait() error {
	if b.rpos < b.wpos {
		return nil
	}
	return b.fill()
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
		if b.big == nil && b.last < len(b.small) && len(p) >= len(b.small) {
			// Quiet and a large read: straight into p, as bufio does.
			n, err := b.r.Read(p)
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
