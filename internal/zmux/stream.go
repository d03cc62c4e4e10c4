package zmux

import (
	"io"
	"sync"
)

// Stream is one forwarded connection inside a session. Read, Write, CloseWrite and Close
// may be called from different goroutines; it satisfies the tunnel package's Stream.
type Stream struct {
	s      *Session
	id     uint64
	target Target
	cond   *sync.Cond // on s.mu

	// Guarded by s.mu.
	rq      recvQueue   // received, not yet read
	credit  uint64      // bytes the peer may still send
	unacked uint64      // bytes read but not yet returned to the peer as window
	window  uint64      // bytes this side may still send
	recvEOF bool        // the peer will send no more
	sentEOF bool        // this side will send no more
	closed  bool        // Close was called
	reset   *ResetError // the peer aborted the stream
	toWake  bool        // in s.toWake (read loop only)
}

func newStream(s *Session, id uint64, t Target) *Stream {
	return &Stream{s: s, id: id, target: t, cond: sync.NewCond(&s.mu), credit: s.recvWindow, window: s.peerWindow}
}

// Target is what the opener asked for.
func (st *Stream) Target() Target { return st.target }

// Read reads data the peer sent. It returns io.EOF after the peer's CloseWrite, a
// *ResetError if the peer reset the stream.
func (st *Stream) Read(p []byte) (int, error) {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for st.rq.n == 0 {
		switch {
		case st.reset != nil:
			return 0, st.reset
		case st.recvEOF:
			return 0, io.EOF
		case st.closed:
			return 0, ErrClosed
		case s.err != nil:
			return 0, s.streamErr()
		}
		st.cond.Wait()
	}
	n := st.rq.read(p)
	// Return credit once an eighth of the window is used: small exchanges need no
	// window frames, and a bulk sender still has most of its window when the credit
	// arrives. At half of 2 MiB, a sender at 600 MB/s ran dry whenever the credit took
	// more than about 1.7 ms (a scheduler's slice on a busy machine); x/crypto/ssh
	// returns a channel's credit after 96 KiB of its 2 MiB.
	st.unacked += uint64(n)
	if st.unacked >= s.recvWindow/8 && !st.recvEOF && s.err == nil {
		s.queue(appendWindow(s.out, st.id, st.unacked))
		st.credit += st.unacked
		st.unacked = 0
	}
	return n, nil
}

// Write sends p, waiting for window credit as needed.
func (st *Stream) Write(p []byte) (int, error) {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.flush() // s.mu is still held
	written := 0
	for len(p) > 0 {
		if err := st.writeErr(); err != nil {
			return written, err
		}
		switch {
		case len(s.out) >= maxQueued:
			if !s.flush() {
				s.outSpace.Wait()
			}
			continue
		case st.window == 0:
			// What this call queued must leave before the peer can grant more.
			if !s.flush() {
				st.cond.Wait()
			}
			continue
		}
		n := min(len(p), MaxData, int(st.window))
		if s.out == nil && n > idleBuffer {
			s.out = getWriteBuf() // a bulk transfer: a pooled buffer, not a growing one
		}
		// Queued without starting a writer: flush sends it when Write returns or waits.
		s.out = appendData(s.out, st.id, p[:n])
		st.window -= uint64(n)
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseWrite tells the peer this side will send no more (a TCP half-close).
func (st *Stream) CloseWrite() error {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.sentEOF || st.closed || st.reset != nil || s.err != nil {
		return nil
	}
	st.sentEOF = true
	s.queue(appendHeader(s.out, frameEOF, st.id))
	st.maybeForget()
	return nil
}

// Close ends the stream. If either direction is still open the peer gets a reset.
func (st *Stream) Close() error {
	return st.abort("")
}

// Reset aborts the stream with a reason the peer sees; on a stream not yet served it
// is the refusal.
func (st *Stream) Reset(reason string) error {
	return st.abort(reason)
}

func (st *Stream) abort(reason string) error {
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.closed {
		return nil
	}
	st.closed = true
	st.rq.release()
	if st.reset == nil && s.err == nil && !(st.sentEOF && st.recvEOF) {
		s.queue(appendReset(s.out, st.id, reason))
	}
	delete(s.streams, st.id)
	st.cond.Broadcast()
	return nil
}

// maybeForget drops the stream from the session once both directions ended. s.mu is held.
func (st *Stream) maybeForget() {
	if st.sentEOF && st.recvEOF {
		delete(st.s.streams, st.id)
	}
}
