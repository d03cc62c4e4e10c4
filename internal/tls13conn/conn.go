package tls13conn

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Record layer limits (RFC 8446 section 5).
const (
	headerLen     = 5
	maxPlaintext  = 1 << 14
	maxCiphertext = maxPlaintext + 256
	// maxUseless records in a row carry no data (empty records, key updates, warnings):
	// past it a peer is only making the server work.
	maxUseless = 16
	// rekeyAfter records under one key, this side updates its key: far below the
	// AES-GCM limit of RFC 8446 section 5.5 (2^24.5 full-size records).
	rekeyAfter = 1 << 24
)

// Record content types and the alerts and handshake messages this layer handles.
const (
	typeAlert       = 21
	typeHandshake   = 22
	typeApplication = 23

	alertCloseNotify       = 0
	alertUnexpectedMessage = 10
	alertBadRecordMAC      = 20
	alertRecordOverflow    = 22
	alertDecodeError       = 50
	alertUserCanceled      = 90

	msgKeyUpdate = 24
)

// ErrRecord is wrapped by every error that ends a connection because of what the peer
// sent.
var ErrRecord = errors.New("tls: bad record")

// Conn is a TLS 1.3 connection after its handshake. Read and Write may be called from
// different goroutines at once, as on a *tls.Conn.
type Conn struct {
	raw   net.Conn
	state tls.ConnectionState

	rmu  sync.Mutex
	in   *direction
	hdr  [headerLen]byte
	hdrN int // header bytes read of the record being read
	// rbuf holds what was read beyond a header: the record being read and any that came
	// with it ((*rbuf)[roff:rend], not yet used), and the data not yet returned. It is
	// nil while nothing is held: an idle connection waits for a header in hdr.
	rbuf       *[]byte
	roff, rend int
	plain      []byte // data of the last record not yet returned
	hs         []byte // a handshake message split over records (at most a KeyUpdate's 5 bytes)
	useless    int
	rerr       error

	wmu  sync.Mutex
	out  *direction
	werr error

	// The last record's time either way, and whether the idle check is set (keys.go,
	// idleGap).
	lastUse atomic.Int64
	armed   atomic.Bool
}

// used notes a record now and sets the idle check if it is not set.
func (c *Conn) used() {
	c.lastUse.Store(time.Now().UnixNano())
	if c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(idleGap, c.idleCheck)
	}
}

// idleCheck drops both AEADs once no record went either way for idleGap, else looks
// again when that would be.
func (c *Conn) idleCheck() {
	since := time.Duration(time.Now().UnixNano() - c.lastUse.Load())
	if since < idleGap {
		time.AfterFunc(idleGap-since, c.idleCheck)
		return
	}
	c.in.aead.Store(nil)
	c.out.aead.Store(nil)
	c.armed.Store(false)
}

// newConn takes over raw at a record boundary with the traffic secrets of each side
// and the number of records already sent under the server's.
func newConn(raw net.Conn, state tls.ConnectionState, clientSecret, serverSecret []byte, sent uint64) (*Conn, error) {
	s, ok := suites[state.CipherSuite]
	if !ok {
		return nil, fmt.Errorf("tls13conn: cipher suite %s", tls.CipherSuiteName(state.CipherSuite))
	}
	in, err := newDirection(s, clientSecret)
	if err != nil {
		return nil, err
	}
	out, err := newDirection(s, serverSecret)
	if err != nil {
		return nil, err
	}
	out.seq = sent
	return &Conn{raw: raw, state: state, in: in, out: out}, nil
}

// ConnectionState is the handshake's (crypto/tls's) state.
func (c *Conn) ConnectionState() tls.ConnectionState { return c.state }

// NetConn is the connection underneath.
func (c *Conn) NetConn() net.Conn { return c.raw }

func (c *Conn) LocalAddr() net.Addr                { return c.raw.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.raw.RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.raw.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.raw.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

// Read returns application data, as a *tls.Conn's Read does; io.EOF after the peer's
// close_notify.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.plain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if err := c.readRecord(); err != nil {
			if !isTimeout(err) {
				c.rerr = err
			}
			return 0, err
		}
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	c.releaseIfDone()
	return n, nil
}

// Pending reports whether the connection holds input that its socket no longer has:
// data not yet returned, bytes read ahead, or part of a record. A server that waits for
// the socket to become readable (package netready) reads on while it does.
func (c *Conn) Pending() bool {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return len(c.plain) > 0 || c.rbuf != nil || c.hdrN > 0
}

// isTimeout: a deadline passed. The record being read is kept where it stopped, so a
// later Read goes on with it (as crypto/tls does).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// releaseIfDone returns the input buffer once it holds nothing: no data to return, no
// bytes read ahead.
func (c *Conn) releaseIfDone() {
	if c.rbuf != nil && len(c.plain) == 0 && c.roff == c.rend {
		putBuffer(c.rbuf)
		c.rbuf, c.plain, c.roff, c.rend = nil, nil, 0, 0
	}
}

// releaseInput returns the input buffer whatever it holds (the connection is over).
func (c *Conn) releaseInput() {
	if c.rbuf != nil {
		putBuffer(c.rbuf)
		c.rbuf, c.plain, c.roff, c.rend = nil, nil, 0, 0
	}
}

// readAhead is how much a read of a small record may take of the records behind it:
// a burst of small records costs one read, not two per record.
const readAhead = 2048

// body returns the next n bytes of input: what was read ahead first, then the socket,
// reading as much more as the buffer holds. The bytes are kept (a timeout resumes).
func (c *Conn) body(n int) ([]byte, error) {
	if c.rbuf == nil || cap(*c.rbuf)-c.roff < n {
		// A buffer that holds the record from its start: what was read ahead moves in.
		nb := getBuffer(max(n, readAhead))
		if c.rbuf != nil {
			c.rend = copy(*nb, (*c.rbuf)[c.roff:c.rend])
			putBuffer(c.rbuf)
		} else {
			c.rend = 0
		}
		c.rbuf, c.roff = nb, 0
	}
	buf := (*c.rbuf)[:cap(*c.rbuf)]
	for c.rend-c.roff < n {
		m, err := c.raw.Read(buf[c.rend:])
		c.rend += m
		if err != nil && c.rend-c.roff < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	b := buf[c.roff : c.roff+n]
	c.roff += n
	return b, nil
}

// readRecord reads one record and handles what it carries: data is left in c.plain.
// Called with no data left to return.
//
// An idle connection's goroutine waits in here, so this frame and readHeader's stay
// small (no error formatting, no nonce): the runtime shrinks a parked goroutine's stack
// only while it uses under a quarter of it, and an idle MQTT client's whole stack is
// meant to fit in 4 KiB. The rest of the work is openRecord's.
func (c *Conn) readRecord() error {
	if err := c.readHeader(); err != nil {
		return err
	}
	return c.openRecord()
}

// readHeader reads the record header into c.hdr, from what was read ahead first.
func (c *Conn) readHeader() error {
	if c.rbuf != nil && c.hdrN < headerLen { // the header from what was read ahead
		m := copy(c.hdr[c.hdrN:], (*c.rbuf)[c.roff:c.rend])
		c.hdrN += m
		c.roff += m
		c.releaseIfDone()
	}
	for c.hdrN < headerLen {
		n, err := c.raw.Read(c.hdr[c.hdrN:])
		c.hdrN += n
		if err != nil && c.hdrN < headerLen {
			if err == io.EOF && c.hdrN == 0 {
				// No close_notify: the stream was cut, which a reader must be able to tell
				// from an orderly end (a truncation attack).
				return io.ErrUnexpectedEOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// openRecord checks the header read, reads the record's body and decrypts it. Never
// inlined: its frame must not join readRecord's (see there).
//
//go:noinline
func (c *Conn) openRecord() error {
	length := int(binary.BigEndian.Uint16(c.hdr[3:]))
	switch {
	case c.hdr[0] != typeApplication:
		return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: an unprotected record of type %d", ErrRecord, c.hdr[0]))
	case c.hdr[1] != 3 || c.hdr[2] != 3:
		return c.fail(alertDecodeError, fmt.Errorf("%w: record version %x%x", ErrRecord, c.hdr[1], c.hdr[2]))
	case length > maxCiphertext:
		return c.fail(alertRecordOverflow, fmt.Errorf("%w: a record of %d bytes", ErrRecord, length))
	case length < tagLen+1:
		return c.fail(alertDecodeError, fmt.Errorf("%w: a record of %d bytes", ErrRecord, length))
	}
	buf, err := c.body(length)
	if err != nil {
		return err
	}
	c.hdrN = 0
	aead, err := c.in.cipher()
	if err != nil {
		c.releaseInput()
		return err
	}
	nonce := c.in.nonce()
	plain, err := aead.Open(buf[:0], nonce[:], buf, c.hdr[:])
	c.used()
	if err != nil {
		c.releaseInput()
		return c.fail(alertBadRecordMAC, fmt.Errorf("%w: it does not decrypt", ErrRecord))
	}
	c.in.seq++
	// The inner plaintext ends with its content type, then zero padding.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		c.releaseInput()
		return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: a record with no content type", ErrRecord))
	}
	typ, data := plain[i], plain[:i]
	if len(data) > maxPlaintext {
		c.releaseInput()
		return c.fail(alertRecordOverflow, fmt.Errorf("%w: %d bytes of data in a record", ErrRecord, len(data)))
	}
	if typ == typeApplication && len(data) > 0 {
		c.plain, c.useless = data, 0
		return nil
	}
	defer c.releaseIfDone()
	if c.useless++; c.useless > maxUseless {
		return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: %d records in a row without data", ErrRecord, c.useless))
	}
	switch typ {
	case typeApplication:
		return nil // empty: allowed (traffic analysis padding), nothing to return
	case typeAlert:
		return c.alert(data)
	case typeHandshake:
		return c.handshake(data)
	}
	return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: a protected record of type %d", ErrRecord, typ))
}

// alert handles the peer's alert: close_notify ends the input, user_canceled is a
// warning, anything else ends the connection.
func (c *Conn) alert(data []byte) error {
	if len(data) != 2 {
		return c.fail(alertDecodeError, fmt.Errorf("%w: an alert of %d bytes", ErrRecord, len(data)))
	}
	switch data[1] {
	case alertCloseNotify:
		return io.EOF
	case alertUserCanceled:
		return nil
	}
	return fmt.Errorf("%w: the peer sent alert %d", ErrRecord, data[1])
}

// handshake handles post-handshake messages: a KeyUpdate is the only one a client may
// send to a server that asked for nothing after the handshake.
func (c *Conn) handshake(data []byte) error {
	msg := append(c.hs, data...)
	c.hs = nil
	for len(msg) > 0 {
		if len(msg) < 4 || len(msg) < 4+msgLen(msg) {
			if len(msg) > 5 || (len(msg) >= 1 && msg[0] != msgKeyUpdate) {
				return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: a handshake message of type %d after the handshake", ErrRecord, msg[0]))
			}
			c.hs = append([]byte(nil), msg...) // split over records; the rest comes next
			return nil
		}
		typ, n := msg[0], 4+msgLen(msg)
		if typ != msgKeyUpdate {
			return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: a handshake message of type %d after the handshake", ErrRecord, typ))
		}
		if n != 5 || msg[4] > 1 {
			return c.fail(alertDecodeError, fmt.Errorf("%w: a malformed KeyUpdate", ErrRecord))
		}
		if len(msg) > n {
			// The next record is under the new key: nothing may follow in this one.
			return c.fail(alertUnexpectedMessage, fmt.Errorf("%w: data after a KeyUpdate in its record", ErrRecord))
		}
		if err := c.in.update(); err != nil {
			return err
		}
		if msg[4] == 1 { // update_requested: answer with our own, then use our new key
			c.wmu.Lock()
			err := c.updateOwnKey()
			c.wmu.Unlock()
			if err != nil {
				return err
			}
		}
		msg = msg[n:]
	}
	return nil
}

// msgLen is a handshake message's length from its 4-byte header.
func msgLen(h []byte) int { return int(h[1])<<16 | int(h[2])<<8 | int(h[3]) }

// fail sends the alert (best effort) and returns err.
func (c *Conn) fail(alert byte, err error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == nil {
		c.writeRecord(typeAlert, []byte{2, alert})
		c.werr = err
	}
	return err
}

// Write sends p as application data in records of at most 16 KiB.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		if c.werr != nil {
			return n, c.werr
		}
		chunk := min(len(p), maxPlaintext)
		if err := c.writeRecord(typeApplication, p[:chunk]); err != nil {
			return n, err
		}
		n += chunk
		p = p[chunk:]
	}
	return n, c.werr
}

// writeRecord seals and sends one record; an error ends the writing side (what was
// sent of a record cannot be taken back). c.wmu is held.
func (c *Conn) writeRecord(typ byte, data []byte) error {
	if c.werr != nil {
		return c.werr
	}
	if c.out.seq >= rekeyAfter && typ != typeHandshake {
		if err := c.updateOwnKey(); err != nil {
			return err
		}
	}
	aead, err := c.out.cipher()
	if err != nil {
		c.werr = err
		return err
	}
	length := len(data) + 1 + tagLen
	buf := getBuffer(headerLen + length)
	defer putBuffer(buf)
	rec := (*buf)[:headerLen+len(data)+1]
	rec[0], rec[1], rec[2] = typeApplication, 3, 3
	binary.BigEndian.PutUint16(rec[3:], uint16(length))
	copy(rec[headerLen:], data)
	rec[len(rec)-1] = typ
	nonce := c.out.nonce()
	rec = aead.Seal(rec[:headerLen], nonce[:], rec[headerLen:], rec[:headerLen])
	c.out.seq++
	c.used()
	if _, err := c.raw.Write(rec); err != nil {
		c.werr = err
		return err
	}
	return nil
}

// updateOwnKey tells the peer this side's key changes, then changes it. c.wmu is held.
func (c *Conn) updateOwnKey() error {
	if err := c.writeRecord(typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 0}); err != nil {
		return err
	}
	return c.out.update()
}

// CloseWrite sends close_notify: the peer reads the end of the data. The connection
// underneath stays open.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	err := c.writeRecord(typeAlert, []byte{1, alertCloseNotify})
	if err == nil {
		c.werr = net.ErrClosed
	}
	return err
}

// Close sends close_notify (waiting at most 5 s, as crypto/tls does) and closes the
// connection underneath.
func (c *Conn) Close() error {
	c.raw.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.CloseWrite()
	err := c.raw.Close()
	c.rmu.Lock() // a Read in progress returns (the socket is closed) before the buffer goes
	c.releaseInput()
	c.rmu.Unlock()
	return err
}

// Buffers: a record takes one only while it is read or written.
var bufferPools = [...]struct {
	size int
	pool sync.Pool
}{{size: 512}, {size: 2048}, {size: headerLen + maxCiphertext}}

func getBuffer(n int) *[]byte {
	for i := range bufferPools {
		p := &bufferPools[i]
		if n <= p.size {
			if b, ok := p.pool.Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, p.size)
			return &b
		}
	}
	panic("tls13conn: a buffer larger than a record")
}

func putBuffer(b *[]byte) {
	for i := range bufferPools {
		if p := &bufferPools[i]; cap(*b) == p.size {
			*b = (*b)[:p.size]
			p.pool.Put(b)
			return
		}
	}
}
