package kexinit

import (
	"bufio"
	"bytes"
	"net"
	"sync"
)

// recordLimit bounds what a Recorder keeps of a connection's first bytes: the
// identification line and a KEXINIT (some 1.5 KB from OpenSSH). A peer that sends more
// before its KEXINIT ends is not recorded, and costs no more memory.
const recordLimit = 8 << 10

// Recorder is a net.Conn that keeps a copy of what the peer sends until its KEXINIT is
// complete, then stops copying: Offer parses it.
type Recorder struct {
	net.Conn
	mu   sync.Mutex
	buf  []byte
	done bool
}

// Record wraps c.
func Record(c net.Conn) *Recorder { return &Recorder{Conn: c} }

func (r *Recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if n > 0 {
		r.mu.Lock()
		if !r.done {
			r.buf = append(r.buf, p[:n]...)
			if len(r.buf) >= recordLimit || complete(r.buf) {
				r.done = true
			}
		}
		r.mu.Unlock()
	}
	return n, err
}

// complete reports whether b holds the identification line and a whole first packet.
func complete(b []byte) bool {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return false
	}
	rest := b[i+1:]
	if len(rest) < 4 {
		return false
	}
	n := int(uint32(rest[0])<<24 | uint32(rest[1])<<16 | uint32(rest[2])<<8 | uint32(rest[3]))
	return len(rest) >= 4+n
}

// Offer is the peer's KEXINIT, nil if it did not come whole within the limit; the copy
// is dropped either way.
func (r *Recorder) Offer() *Offer {
	r.mu.Lock()
	b := r.buf
	r.buf, r.done = nil, true
	r.mu.Unlock()
	br := bufio.NewReader(bytes.NewReader(b))
	// The identification line (clients send no lines before it).
	if _, err := br.ReadSlice('\n'); err != nil {
		return nil
	}
	o, err := Parse(br)
	if err != nil {
		return nil
	}
	return o
}
