package tls13conn

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"net"
	"sync"
)

// Server does TLS handshakes with one configuration and hands over the TLS 1.3
// connections to a Conn.
type Server struct {
	cfg *tls.Config
	mu  sync.Mutex
	// secrets of the handshakes under way, by ClientHello random.
	secrets map[[32]byte]*secrets
	prior   interface{ Write([]byte) (int, error) } // the configuration's own key log, if any
}

// secrets are one handshake's application traffic secrets. Two handshakes under way
// with the same ClientHello random (a client replaying another's, seen on the wire)
// share an entry, poisoned: each would take the other's keys, and records sealed under
// one key by two connections would reuse nonces. Both stay with crypto/tls.
type secrets struct {
	client, server []byte
	users          int
	poisoned       bool
}

// NewServer returns a Server for cfg (not modified; a copy is kept with the key log
// installed).
func NewServer(cfg *tls.Config) *Server {
	s := &Server{cfg: cfg.Clone(), secrets: map[[32]byte]*secrets{}, prior: cfg.KeyLogWriter}
	s.cfg.KeyLogWriter = keyLog{s}
	return s
}

// keyLog receives crypto/tls's key log lines ("LABEL <client random> <secret>", one a
// Write) and keeps the application traffic secrets of the handshakes under way.
type keyLog struct{ s *Server }

func (k keyLog) Write(line []byte) (int, error) {
	s := k.s
	if s.prior != nil {
		s.prior.Write(line)
	}
	f := bytes.Fields(line)
	if len(f) != 3 || hex.DecodedLen(len(f[1])) != 32 {
		return len(line), nil
	}
	var random [32]byte
	if _, err := hex.Decode(random[:], f[1]); err != nil {
		return len(line), nil
	}
	secret := make([]byte, hex.DecodedLen(len(f[2])))
	if _, err := hex.Decode(secret, f[2]); err != nil {
		return len(line), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[random]
	if !ok {
		return len(line), nil // not a handshake of ours (or already over)
	}
	switch string(f[0]) {
	case "CLIENT_TRAFFIC_SECRET_0":
		sec.client = secret
	case "SERVER_TRAFFIC_SECRET_0":
		sec.server = secret
	}
	return len(line), nil
}

// Handshake runs the server handshake on raw. It returns a *Conn if TLS 1.3 was
// negotiated, else the *tls.Conn. Deadlines set on raw bound it.
func (s *Server) Handshake(raw net.Conn) (net.Conn, error) {
	hc := &handshakeConn{Conn: raw, s: s}
	defer hc.forget()
	tc := tls.Server(hc, s.cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	st := tc.ConnectionState()
	sec := hc.secrets()
	if st.Version != tls.VersionTLS13 || sec == nil || sec.client == nil || sec.server == nil || !hc.atBoundary() {
		hc.passThrough()
		return tc, nil
	}
	su, ok := suites[st.CipherSuite]
	if !ok {
		hc.passThrough()
		return tc, nil
	}
	sent, ok := hc.sentUnderServerKey(su, sec.server)
	if !ok {
		hc.passThrough()
		return tc, nil
	}
	c, err := newConn(raw, st, sec.client, sec.server, sent)
	if err != nil {
		hc.passThrough()
		return tc, nil
	}
	return c, nil
}

// handshakeConn is the connection under crypto/tls while it does the handshake. It
// reads whole records and no further, so that what crypto/tls did not read is still in
// the socket when it returns; it notes the ClientHello's random (to find the
// handshake's secrets); and it counts the records sent under the server's application
// key (session tickets), which the Conn's sequence numbers go on from.
type handshakeConn struct {
	net.Conn
	s *Server

	mu      sync.Mutex
	through bool // after a handshake that stays with crypto/tls: plain reads and writes

	// reading: the current record's header, how much of it was returned, and how much
	// of its body is left
	hdr        [headerLen]byte
	hdrN       int // header bytes read from the socket
	hdrOut     int // header bytes returned to crypto/tls
	left       int // body bytes not yet read
	first      []byte
	random     [32]byte
	looked     bool // the first record was looked at
	registered bool // ... and it was a ClientHello, registered under random

	// writing: the protected records sent, and an outgoing record not yet whole
	sent, out []byte
	overflow  bool
}

func (h *handshakeConn) passThrough() {
	h.mu.Lock()
	h.through = true
	h.out, h.sent, h.first = nil, nil, nil
	h.mu.Unlock()
}

func (h *handshakeConn) atBoundary() bool { return h.hdrN == 0 && h.left == 0 }

func (h *handshakeConn) Read(p []byte) (int, error) {
	h.mu.Lock()
	through := h.through
	h.mu.Unlock()
	if through {
		return h.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	for h.hdrN < headerLen {
		n, err := h.Conn.Read(h.hdr[h.hdrN:])
		h.hdrN += n
		if err != nil && h.hdrN < headerLen {
			return 0, err
		}
		h.hdrOut, h.left = 0, int(binary.BigEndian.Uint16(h.hdr[3:]))
	}
	if h.hdrOut < headerLen {
		n := copy(p, h.hdr[h.hdrOut:])
		h.hdrOut += n
		if h.hdrOut == headerLen && h.left == 0 {
			h.hdrN = 0
		}
		return n, nil
	}
	n, err := h.Conn.Read(p[:min(len(p), h.left)])
	h.noteClientHello(p[:n])
	h.left -= n
	if h.left == 0 {
		h.hdrN = 0
	}
	return n, err
}

// noteClientHello keeps the first 38 bytes of the first record's body (handshake
// header, legacy version, random) and registers the handshake under its random.
func (h *handshakeConn) noteClientHello(b []byte) {
	const want = 4 + 2 + 32
	if h.looked || h.first == nil && len(b) == 0 {
		return
	}
	h.first = append(h.first, b[:min(len(b), want-len(h.first))]...)
	if len(h.first) < want && h.left-len(b) > 0 {
		return
	}
	if len(h.first) == want && h.hdr[0] == typeHandshake && h.first[0] == 1 {
		copy(h.random[:], h.first[6:])
		h.s.register(h.random)
		h.registered = true
	}
	h.first = nil
	h.looked = true // registered, or not a ClientHello we can follow: stay with crypto/tls
}

// register opens the entry of a handshake under way.
func (s *Server) register(random [32]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec, ok := s.secrets[random]; ok {
		sec.users++
		sec.poisoned = true
		return
	}
	s.secrets[random] = &secrets{users: 1}
}

// release closes a handshake's entry; the last user removes it.
func (s *Server) release(random [32]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec, ok := s.secrets[random]; ok {
		if sec.users--; sec.users <= 0 {
			delete(s.secrets, random)
		}
	}
}

// secrets are the handshake's traffic secrets, nil if it registered none or shares its
// random with another.
func (h *handshakeConn) secrets() *secrets {
	if !h.registered {
		return nil
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	sec := h.s.secrets[h.random]
	if sec == nil || sec.poisoned {
		return nil
	}
	return &secrets{client: sec.client, server: sec.server}
}

// forget drops the handshake's entry from the Server.
func (h *handshakeConn) forget() {
	if h.registered {
		h.s.release(h.random)
	}
}

func (h *handshakeConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	through := h.through
	h.mu.Unlock()
	if !through {
		h.keepProtected(p)
	}
	return h.Conn.Write(p)
}

// maxFlight bounds what a handshake's protected records are kept of: a server flight
// with a certificate chain and a ticket is a few KiB.
const maxFlight = 64 << 10

// keepProtected keeps a copy of the protected records in p (crypto/tls writes whole
// ones, but a record split over writes is put together), to count after the handshake
// those sent under the server's application key.
func (h *handshakeConn) keepProtected(p []byte) {
	if h.overflow {
		return
	}
	h.out = append(h.out, p...)
	for len(h.out) >= headerLen {
		n := headerLen + int(binary.BigEndian.Uint16(h.out[3:]))
		if len(h.out) < n {
			break
		}
		if h.out[0] == typeApplication {
			h.sent = append(h.sent, h.out[:n]...)
		}
		h.out = h.out[n:]
	}
	if len(h.sent)+len(h.out) > maxFlight {
		h.overflow = true // a flight this size is not one crypto/tls writes: stay with it
		h.sent, h.out = nil, nil
	}
}

// sentUnderServerKey counts the records kept that open under the server's application
// key: encrypted records all look alike from outside, and the handshake's own are under
// another key. ok is false if a record is missing (a write split mid-record, a flight
// too large) and the count cannot be trusted.
func (h *handshakeConn) sentUnderServerKey(st suite, serverSecret []byte) (n uint64, ok bool) {
	if h.overflow || len(h.out) > 0 {
		return 0, false
	}
	key, err := newDirection(st, serverSecret)
	if err != nil {
		return 0, false
	}
	for rest := h.sent; len(rest) >= headerLen; {
		end := headerLen + int(binary.BigEndian.Uint16(rest[3:]))
		rec := rest[:end]
		nonce := key.nonce()
		aead, _ := key.cipher()
		if _, err := aead.Open(nil, nonce[:], rec[headerLen:], rec[:headerLen]); err == nil {
			key.seq++
		} else if key.seq > 0 {
			return 0, false // after the first under the key, all are under it
		}
		rest = rest[end:]
	}
	h.sent = nil
	return key.seq, true
}
