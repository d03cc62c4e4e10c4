package zmux

import (
	"bufio"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Level is the deflate level used by both ends: zlib's default, as OpenSSH uses for -C.
// Go's compressor keeps the whole 32 KiB window at levels 2 and above; level 1 matches
// only against the previous flush, which would lose headers of earlier requests.
const Level = 6

const (
	// maxQueued bounds encoded frames waiting for the writer; writers wait beyond it.
	maxQueued = 64 << 10
	// acceptBacklog is how many streams opened by the peer may wait for Accept before
	// the session stops reading.
	acceptBacklog = 128
	// idleBuffer is the largest write buffer an idle session keeps.
	idleBuffer = 4 << 10
	// smallBatch is the size under which a batch waits Options.FlushDelay for more.
	smallBatch = 1024
)

// ErrClosed is returned by operations on a closed session or stream.
var ErrClosed = errors.New("zmux: closed")

// ErrChannelEnded is what streams return once the channel under their session ended:
// never io.EOF, so a connection cut short is not taken for one that ended normally.
var ErrChannelEnded = errors.New("zmux: the multiplexed channel ended")

// ResetError is returned by a stream the peer reset (or refused) with a reason.
type ResetError struct{ Reason string }

func (e *ResetError) Error() string {
	if e.Reason == "" {
		return "zmux: stream reset by peer"
	}
	return "zmux: stream reset by peer: " + e.Reason
}

// Stats are a session's byte counts: Raw is what the streams' frames took before
// compression, Wire what crossed the channel.
type Stats struct {
	RawOut, WireOut, RawIn, WireIn int64
}

// Options of a session; both ends must agree on Compress.
type Options struct {
	// Device is set on the device side, which opens odd stream ids (the hub even ones).
	Device bool
	// Compress deflates the byte stream with one context per direction. Without it the
	// session only multiplexes: connections open without a round trip and close without
	// close messages, which already saves packets on slow links.
	Compress bool
	// FlushDelay is how long a small batch of frames waits for more before it is sent,
	// so an open and its first data, or an application's header and body written
	// separately, leave in one SSH packet instead of two (on a radio link, one frame
	// train and one acknowledgement fewer; with Nagle on, no small segment left waiting
	// for an ACK). 0 sends at once. Agents with --coalesce use 2 ms.
	FlushDelay time.Duration
	// Version2 speaks version 2 of the framing (both sides must: the hub learns it from
	// the channel open's mode): each side announces its receive window first.
	Version2 bool
	// Window is this side's receive window per stream in version 2; 0 means
	// DefaultWindow2. It is clamped to Window..MaxWindow.
	Window int
	// Handle, if set, is given each stream the peer opens, on the session's reader, in
	// place of Accept: it must not block (it starts a goroutine for anything slow). A
	// hub holds one session per device, and an Accept loop is a goroutine each.
	Handle func(*Stream)
	// Ended, if set, is called with the session once it has ended and its reader has
	// stopped (Err says why), on the reader's goroutine: for clean-up without a
	// goroutine waiting on Done.
	Ended func(*Session)
}

// FramingVersion is the version of the framing these options speak (for logs).
func (o Options) FramingVersion() int {
	if o.Version2 {
		return 2
	}
	return 1
}

// Session multiplexes streams over one reliable byte stream (an SSH channel).
type Session struct {
	rw       io.ReadWriteCloser
	odd      bool // this side opens odd stream ids (the device side)
	compress bool
	delay    time.Duration
	done     chan struct{}
	v2       bool
	// recvWindow is this side's receive window per stream (announced in version 2).
	recvWindow uint64

	mu       sync.Mutex
	err      error // set once the session ends
	streams  map[uint64]*Stream
	nextID   uint64 // next id this side opens
	lastPeer uint64 // highest id the peer opened
	// peerWindow is the peer's receive window per stream: Window until its settings
	// frame arrives.
	peerWindow uint64
	settled    bool   // the peer's settings frame arrived
	out        []byte // encoded frames waiting for the writer
	outSpace   *sync.Cond
	// writing is set while a writer runs: a goroutine that starts when frames are
	// queued and ends when the queue is empty, so an idle session holds no goroutine
	// for it, or a stream's Write sending its own large batch (sendInline).
	writing bool
	send    func([]byte) error // the writer's output (deflate state included)
	spare   []byte             // the writer's second buffer, swapped with out

	// toWake are the streams given frames since they were last woken (read loop only).
	toWake []*Stream

	accept chan *Stream // streams for Accept (nil with Options.Handle)
	handle func(*Stream)
	ended  func(*Session)

	rawOut, wireOut, rawIn, wireIn atomic.Int64
}

// New starts a session over rw. The session owns rw and closes it when it ends.
func New(rw io.ReadWriteCloser, o Options) *Session {
	s := &Session{
		rw: rw, odd: o.Device, compress: o.Compress, delay: o.FlushDelay, done: make(chan struct{}),
		streams: map[uint64]*Stream{},
		v2:      o.Version2, recvWindow: Window, peerWindow: Window,
		handle: o.Handle, ended: o.Ended,
	}
	if o.Handle == nil {
		s.accept = make(chan *Stream, acceptBacklog)
	}
	if o.Version2 {
		w := o.Window
		if w == 0 {
			w = DefaultWindow2
		}
		s.recvWindow = uint64(min(max(w, Window), MaxWindow))
		// The first frame: streams the peer opens before reading it start with Window.
		s.out = appendSettings(s.out, s.recvWindow)
	}
	s.nextID = 2
	if o.Device {
		s.nextID = 1
	}
	s.outSpace = sync.NewCond(&s.mu)
	s.send = s.sender()
	if len(s.out) > 0 {
		s.writing = true
		go s.writeLoop()
	}
	go s.readLoop()
	return s
}

// Open starts a stream to the peer. It does not wait for the peer: data may be written
// at once, and a refusal shows as a *ResetError from Read or Write.
func (s *Session) Open(t Target) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	st := newStream(s, s.nextID, t)
	s.nextID += 2
	s.streams[st.id] = st
	s.queue(appendOpen(s.out, st.id, t))
	return st, nil
}

// Accept returns the next stream the peer opened. The caller must serve it (read,
// write, close) or refuse it with Reset, and call Accept again promptly: while
// acceptBacklog opened streams wait, the session reads nothing more. With
// Options.Handle, streams go there and Accept fails at once.
func (s *Session) Accept() (*Stream, error) {
	if s.accept == nil {
		return nil, errors.New("zmux: streams go to Options.Handle")
	}
	select {
	case st := <-s.accept:
		return st, nil
	case <-s.done:
		// Streams queued before the end are of no use any more.
		return nil, s.Err()
	}
}

// Close ends the session: frames already queued are still sent, then the channel is
// closed and every stream fails.
func (s *Session) Close() error {
	s.shutdown(ErrClosed, false)
	return nil
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended (ErrClosed after Close, io.EOF when the peer closed the
// channel, an ErrProtocol error when the peer broke the protocol), nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// streamErr is the error streams report once the session has ended. s.mu is held.
func (s *Session) streamErr() error {
	if s.err == io.EOF {
		return ErrChannelEnded
	}
	return s.err
}

// Stats returns the byte counts so far.
func (s *Session) Stats() Stats {
	return Stats{RawOut: s.rawOut.Load(), WireOut: s.wireOut.Load(), RawIn: s.rawIn.Load(), WireIn: s.wireIn.Load()}
}

// shutdown records why the session ends and wakes everyone. With hard set the channel
// is closed at once (the reader failed; nothing useful can be sent); otherwise the
// writer flushes what is queued and closes it.
func (s *Session) shutdown(err error, hard bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	close(s.done)
	for _, st := range s.streams {
		st.cond.Broadcast()
	}
	s.outSpace.Broadcast()
	if !hard {
		s.kick() // the writer sends what is queued, then closes the channel
	}
	s.mu.Unlock()
	if hard {
		s.rw.Close()
	}
}

// queue takes s.out with a frame appended and wakes the writer. s.mu is held.
func (s *Session) queue(out []byte) {
	s.out = out
	s.kick()
}

// kick starts the writer unless it runs. s.mu is held.
func (s *Session) kick() {
	if !s.writing {
		s.writing = true
		go s.writeLoop()
	}
}

// sender is the writer's output: the channel, through one deflate context kept for the
// session's life when it compresses.
func (s *Session) sender() func([]byte) error {
	cw := &countWriter{w: s.rw, n: &s.wireOut}
	if !s.compress {
		return func(batch []byte) error { _, err := cw.Write(batch); return err }
	}
	// The flate writer emits many small writes per flush; the buffer turns a flush into
	// one channel write.
	bw := bufio.NewWriterSize(cw, 32<<10)
	zw, _ := flate.NewWriter(bw, Level)
	return func(batch []byte) error {
		_, err := zw.Write(batch)
		if err == nil {
			err = zw.Flush()
		}
		if err == nil {
			err = bw.Flush()
		}
		return err
	}
}

// writeLoop compresses and sends queued frames until none are left, then ends (the
// next frame queued starts it again). Everything queued while the previous batch was
// being written goes out in one flush: one SSH packet where the channel's window
// allows. Once the session has ended it sends what is left and closes the channel.
func (s *Session) writeLoop() {
	for {
		s.mu.Lock()
		if len(s.out) == 0 && s.err == nil {
			s.goIdle()
			s.mu.Unlock()
			return
		}
		if s.err == nil && len(s.out) < smallBatch {
			// Frames about to be queued (a request after its open, a body after its
			// header) join this batch: after the flush delay if there is one, else after
			// letting runnable goroutines go first (no added latency).
			s.mu.Unlock()
			if s.delay > 0 {
				time.Sleep(s.delay)
			} else {
				runtime.Gosched()
			}
			s.mu.Lock()
		}
		batch := s.out
		s.out = s.spare[:0]
		s.outSpace.Broadcast()
		ended := s.err != nil
		s.mu.Unlock()
		if len(batch) > 0 {
			s.rawOut.Add(int64(len(batch)))
			if err := s.send(batch); err != nil {
				s.shutdown(fmt.Errorf("zmux: write: %w", err), true)
				return
			}
		}
		// Only the running writer touches spare; the next one starts after this one
		// cleared writing under s.mu.
		s.spare = batch
		if ended {
			s.mu.Lock()
			rest := len(s.out)
			s.mu.Unlock()
			if rest == 0 {
				s.rw.Close()
				return
			}
		}
	}
}

// goIdle ends the running writer's turn once nothing is queued. Buffers grown by a bulk
// transfer go back to a pool shared by all sessions rather than staying with an idle
// one. While busy both are kept; a new one per batch was a third of a bulk transfer's
// CPU in allocation and garbage collection. s.mu is held.
func (s *Session) goIdle() {
	if cap(s.out) > idleBuffer {
		putWriteBuf(s.out)
		s.out = nil
	}
	if cap(s.spare) > idleBuffer {
		putWriteBuf(s.spare)
		s.spare = nil
	}
	s.writing = false
}

// flush has what a stream's Write queued sent when no writer runs: on the calling
// goroutine if it is a large batch (sendInline), else by a writer goroutine, which lets a
// small batch wait for more. It reports whether it sent inline, releasing s.mu meanwhile.
// s.mu is held.
func (s *Session) flush() (inline bool) {
	switch {
	case s.writing || len(s.out) == 0:
		return false
	case len(s.out) >= smallBatch && s.err == nil:
		s.sendInline()
		return true
	default:
		s.kick()
		return false
	}
}

// sendInline sends what is queued on the calling goroutine, which becomes the writer for
// one batch: a stream writing bulk data (a batch of smallBatch or more) pays no writer
// goroutine per batch. Those were started and ended once per write of a bulk transfer,
// each growing a new stack for the SSH write path, which with the wake-ups cost about a
// tenth of the sending side's CPU. Like a plain SSH channel's Write, the caller returns
// once its data is on the channel. If more was queued meanwhile, or the session ended,
// a writer goroutine takes over. s.mu is held and no writer runs; s.mu is held again on
// return.
func (s *Session) sendInline() {
	s.writing = true
	batch := s.out
	s.out = s.spare[:0]
	s.outSpace.Broadcast()
	err := s.sendUnlocked(batch)
	s.spare = batch
	s.endInline(err)
}

// sendUnlocked sends batch with s.mu released; the caller is the writer. A failed send
// ends the session. s.mu is held before and after.
func (s *Session) sendUnlocked(batch []byte) error {
	s.mu.Unlock()
	s.rawOut.Add(int64(len(batch)))
	err := s.send(batch)
	if err != nil {
		s.shutdown(fmt.Errorf("zmux: write: %w", err), true)
	}
	s.mu.Lock()
	return err
}

// endInline ends an inline writer's turn: a writer goroutine takes what was queued
// meanwhile. s.mu is held.
func (s *Session) endInline(err error) {
	switch {
	case err != nil:
		// The session is over and its channel closed; writing stays set so no writer
		// starts again.
	case len(s.out) > 0 || s.err != nil:
		go s.writeLoop()
	default:
		s.goIdle()
	}
}

// writeBufs hold queued frames of sessions that are sending data; an idle session
// returns its buffers here.
var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxQueued+2*MaxData); return &b }}

// getWriteBuf is an empty buffer for a session's queue.
func getWriteBuf() []byte { return (*writeBufs.Get().(*[]byte))[:0] }

// putWriteBuf returns b (only buffers of the pool's size are kept).
func putWriteBuf(b []byte) {
	if cap(b) >= maxQueued+2*MaxData {
		b = b[:0]
		writeBufs.Put(&b)
	}
}

// dataBufs hold one data frame's payload while it is dispatched.
var dataBufs = sync.Pool{New: func() any { b := make([]byte, MaxData); return &b }}

// readLoop decompresses the peer's frames and hands them to their streams. It never
// blocks on a stream: each stream's buffer is bounded by its window.
func (s *Session) readLoop() {
	if s.ended != nil {
		defer s.ended(s)
	}
	cr := &countReader{r: s.rw, n: &s.wireIn}
	// The channel is read by a burstReader (small buffer when quiet, large while data
	// streams); without compression frames are decoded from it directly.
	// Streams given frames are woken before the channel is read again, which may wait,
	// rather than at each frame: a packet's two data frames then reach a bulk reader in
	// one Read, and its connection in one write, rather than one each.
	var br frameReader
	var wait func() error
	if s.compress {
		fr := bufio.NewReaderSize(&countReader{r: flate.NewReader(newBurstReader(cr, s.wakeStreams)), n: &s.rawIn}, 4<<10)
		br, wait = fr, func() error { _, err := fr.Peek(1); return err }
	} else {
		bu := newBurstReader(&countReader{r: cr, n: &s.rawIn}, s.wakeStreams)
		br, wait = bu, bu.wait
		defer bu.release()
	}
	for {
		// Wait for a frame without holding a payload buffer: an idle session keeps none.
		err := wait()
		if err == nil {
			bp := dataBufs.Get().(*[]byte)
			var f frame
			kept := false
			if f, err = readFrame(br, *bp); err == nil {
				kept, err = s.dispatch(f, bp) // the stream keeps bp or copies the payload
			}
			if !kept {
				dataBufs.Put(bp)
			}
		}
		if err != nil {
			var corrupt flate.CorruptInputError
			switch {
			case cr.err != nil:
				// The channel ended (the device disconnected, the session closed). The
				// deflate stream has no final block then, and the last frame may be cut
				// short: neither is the peer breaking the protocol.
				err = io.EOF
			case errors.As(err, &corrupt):
				err = protoErr("deflate: %v", err)
			}
			s.shutdown(err, true)
			return
		}
	}
}

// known reports whether id was opened at some point (by either side), so late frames
// for streams already gone are ignored rather than treated as errors. s.mu is held.
func (s *Session) known(id uint64) bool {
	if (id%2 == 1) == s.odd {
		return id < s.nextID
	}
	return id <= s.lastPeer
}

// open registers a stream the peer opened and hands it to Options.Handle or to Accept.
// When acceptBacklog streams already wait, it stops the reader until Accept takes one,
// as x/crypto/ssh does for channel opens: a burst of opens is served late rather than
// refused.
func (s *Session) open(f frame) error {
	s.mu.Lock()
	if (f.id%2 == 1) == s.odd || f.id <= s.lastPeer {
		s.mu.Unlock()
		return protoErr("open of stream %d: not a new id of the peer", f.id)
	}
	s.lastPeer = f.id
	st := newStream(s, f.id, f.target)
	s.streams[f.id] = st
	s.mu.Unlock()
	if s.handle != nil {
		s.handle(st)
		return nil
	}
	// The send below may wait for Accept, whose caller may be waiting for data
	// already dispatched.
	s.wakeStreams()
	select {
	case s.accept <- st:
	case <-s.done:
	}
	return nil
}

// dispatch hands f to its stream, to be woken by wakeStreams. bp holds a data frame's
// payload; kept reports that the stream took it.
func (s *Session) dispatch(f frame, bp *[]byte) (kept bool, err error) {
	if f.typ == frameOpen {
		return false, s.open(f)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.typ == frameSettings {
		return false, s.settings(f.incr)
	}
	st := s.streams[f.id]
	if st == nil {
		if s.known(f.id) {
			return false, nil // the stream is gone here; the peer has not heard yet
		}
		return false, protoErr("frame type %d for stream %d that was never opened", f.typ, f.id)
	}
	switch f.typ {
	case frameData:
		if st.recvEOF {
			return false, protoErr("data on stream %d after its end", f.id)
		}
		if uint64(len(f.data)) > st.credit {
			return false, protoErr("stream %d: %d bytes over a window of %d", f.id, len(f.data), st.credit)
		}
		st.credit -= uint64(len(f.data))
		if !st.closed {
			kept = st.rq.push(bp, f.data)
		}
	case frameWindow:
		st.window += f.incr
		if st.window > s.peerWindow {
			return false, protoErr("stream %d: window grown to %d, over %d", f.id, st.window, s.peerWindow)
		}
	case frameEOF:
		st.recvEOF = true
		st.maybeForget()
	case frameReset:
		st.reset = &ResetError{Reason: f.reason}
		delete(s.streams, st.id)
	}
	if !st.toWake {
		st.toWake = true
		s.toWake = append(s.toWake, st)
	}
	return kept, nil
}

// wakeStreams wakes the streams dispatch gave frames to since the last wake. Like
// dispatch it runs on the read loop only, the one user of toWake; the frames' effects
// were made under s.mu, so waking after it is released loses no wake-up.
func (s *Session) wakeStreams() {
	for i, st := range s.toWake {
		st.toWake = false
		st.cond.Broadcast()
		s.toWake[i] = nil
	}
	s.toWake = s.toWake[:0]
}

// settings applies the peer's announced receive window: every stream's send window
// grows by what it adds to Window. s.mu is held.
func (s *Session) settings(w uint64) error {
	if !s.v2 {
		return protoErr("settings frame in version 1")
	}
	if s.settled {
		return protoErr("second settings frame")
	}
	s.settled = true
	add := w - s.peerWindow
	s.peerWindow = w
	for _, st := range s.streams {
		st.window += add
		st.cond.Broadcast()
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

// Write counts p before writing it: once the peer has the bytes it may answer, and a
// reader of Stats who saw the answer must see them counted. A short write takes back
// what did not go.
func (c *countWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	n, err := c.w.Write(p)
	if n < len(p) {
		c.n.Add(int64(n - len(p)))
	}
	return n, err
}

type countReader struct {
	r   io.Reader
	n   *atomic.Int64
	err error // the first error the reader returned; used by the read loop only
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}
