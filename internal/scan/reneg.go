package scan

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Client-initiated renegotiation (CVE-2011-1473): a server that lets a client start a
// new handshake inside a session lets one connection cost it a full handshake per
// request, over and over. Go's TLS client cannot ask for one, so the check carries a
// TLS 1.2 handshake itself, as far as it needs: ECDHE with AES-128-GCM-SHA256 (the one
// suite pair every TLS 1.2 server worth scanning takes), no certificate check (the
// certificate check is done elsewhere), then a second ClientHello in the encrypted
// session, with the first Finished in its renegotiation_info (RFC 5746).

// renegSuites are the suites the check can carry.
var renegSuites = []uint16{0xc02b, 0xc02f} // ECDHE-ECDSA/RSA-AES128-GCM-SHA256

// errNoRenegSuite: the server takes neither of renegSuites.
var errNoRenegSuite = errors.New("the server takes no ECDHE suite with AES-128-GCM-SHA256 in TLS 1.2")

// renegOutcome is what a server did with a client's renegotiation.
type renegOutcome int

const (
	renegRefused  renegOutcome = iota // no_renegotiation alert, or another alert, or the connection closed
	renegAccepted                     // a ServerHello came back
)

// tls12Session is the client side of a TLS 1.2 session the check carried this far.
type tls12Session struct {
	c          net.Conn
	hr         *handshakeReader
	transcript []byte
	writeKey   cipher.AEAD
	writeIV    []byte // 4-byte salt
	readKey    cipher.AEAD
	readIV     []byte
	writeSeq   uint64
	readSeq    uint64
	verifyData []byte // the client's Finished
}

// clientRenegotiation reports whether the server accepts a renegotiation the client
// starts.
func (s *scanner) clientRenegotiation(ctx context.Context) {
	c, err := s.o.dial(ctx, s.addr)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.o.Timeout))
	sess, err := handshake12(c, s.o.Name)
	if errors.Is(err, errNoRenegSuite) {
		s.r.add("renegotiation", Info, "client-initiated renegotiation not checked: %v", err)
		return
	}
	if err != nil {
		s.r.add("renegotiation", Info, "client-initiated renegotiation not checked: the TLS 1.2 handshake failed: %v", err)
		return
	}
	out, err := sess.renegotiate(s.o.Name)
	switch {
	case err != nil:
		s.r.add("renegotiation", Info, "client-initiated renegotiation not checked: %v", err)
	case out == renegAccepted:
		s.r.add("renegotiation", Weak, "client-initiated renegotiation accepted: one connection can make the server redo full handshakes (CVE-2011-1473)")
	default:
		s.r.add("renegotiation", Good, "client-initiated renegotiation refused")
	}
}

// handshake12 carries a TLS 1.2 handshake with ECDHE and AES-128-GCM to its end.
func handshake12(c net.Conn, sni string) (*tls12Session, error) {
	h := hello{version: VersionTLS12, suites: renegSuites, groups: []uint16{GroupX25519, GroupP256}, sni: sni}
	msg, err := h.marshal()
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	s := &tls12Session{c: c, hr: &handshakeReader{r: c}}
	s.transcript = append(s.transcript, msg[5:]...)
	var sh *serverHello
	var serverPub []byte
	var curve ecdh.Curve
	for done := false; !done; {
		typ, body, err := s.hr.next()
		if err != nil {
			if sh == nil {
				var a alert
				if errors.As(err, &a) && a.desc == 40 { // handshake_failure: no suite in common
					return nil, errNoRenegSuite
				}
			}
			return nil, err
		}
		s.transcript = appendHandshake(s.transcript, typ, body)
		switch typ {
		case 2:
			if sh, err = parseServerHello(body); err != nil {
				return nil, err
			}
			if sh.version != VersionTLS12 {
				return nil, fmt.Errorf("the server answered %s", VersionName(sh.version))
			}
		case 12: // ServerKeyExchange: curve_type 3, named curve, point
			if len(body) < 4 || body[0] != 3 || len(body) < 4+int(body[3]) {
				return nil, fmt.Errorf("%w: ServerKeyExchange", errNotTLS)
			}
			switch binary.BigEndian.Uint16(body[1:]) {
			case GroupX25519:
				curve = ecdh.X25519()
			case GroupP256:
				curve = ecdh.P256()
			default:
				return nil, fmt.Errorf("the server chose group 0x%04x, not offered", binary.BigEndian.Uint16(body[1:]))
			}
			serverPub = body[4 : 4+int(body[3])]
		case 13: // CertificateRequest: an empty Certificate answers it
		case 14:
			done = true
		}
	}
	if sh == nil || curve == nil {
		return nil, fmt.Errorf("%w: no ServerHello or ServerKeyExchange", errNotTLS)
	}
	priv, err := curve.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	peer, err := curve.NewPublicKey(serverPub)
	if err != nil {
		return nil, fmt.Errorf("the server's key share: %w", err)
	}
	pre, err := priv.ECDH(peer)
	if err != nil {
		return nil, err
	}
	var flight []byte
	if hasHandshake(s.transcript, 13) {
		flight = appendHandshake(flight, 11, []byte{0, 0, 0})
	}
	pub := priv.PublicKey().Bytes()
	flight = appendHandshake(flight, 16, append([]byte{byte(len(pub))}, pub...))
	s.transcript = append(s.transcript, flight...)
	var master []byte
	if sh.ems {
		sum := sha256.Sum256(s.transcript)
		master = prf12(pre, "extended master secret", sum[:], 48)
	} else {
		master = prf12(pre, "master secret", append(helloRandom(msg), sh.random[:]...), 48)
	}
	keys := prf12(master, "key expansion", append(sh.random[:], helloRandom(msg)...), 40)
	if s.writeKey, err = gcm(keys[0:16]); err != nil {
		return nil, err
	}
	if s.readKey, err = gcm(keys[16:32]); err != nil {
		return nil, err
	}
	s.writeIV, s.readIV = keys[32:36], keys[36:40]
	sum := sha256.Sum256(s.transcript)
	s.verifyData = prf12(master, "client finished", sum[:], 12)
	finished := appendHandshake(nil, 20, s.verifyData)
	s.transcript = append(s.transcript, finished...)
	out := record(22, flight)
	out = append(out, record(20, []byte{1})...)
	out = append(out, s.seal(22, finished)...)
	if _, err := c.Write(out); err != nil {
		return nil, err
	}
	// The server's ChangeCipherSpec (after a NewSessionTicket, perhaps) and Finished.
	for {
		hdr := make([]byte, 5)
		if _, err := io.ReadFull(c, hdr); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if n > 1<<14+2048 {
			return nil, errNotTLS
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(c, rec); err != nil {
			return nil, err
		}
		switch hdr[0] {
		case 22: // NewSessionTicket in the clear
			continue
		case 21:
			if n >= 2 {
				return nil, alert{rec[0], rec[1]}
			}
			return nil, errNotTLS
		case 20:
			typ, plain, err := s.readRecord()
			if err != nil {
				return nil, fmt.Errorf("the server's Finished: %w", err)
			}
			if typ != 22 || len(plain) < 4 || plain[0] != 20 {
				return nil, fmt.Errorf("%w: no Finished after ChangeCipherSpec", errNotTLS)
			}
			return s, nil
		default:
			return nil, fmt.Errorf("%w: record type %d", errNotTLS, hdr[0])
		}
	}
}

// renegotiate sends a ClientHello in the session and reads what the server does.
func (s *tls12Session) renegotiate(sni string) (renegOutcome, error) {
	h := hello{version: VersionTLS12, suites: renegSuites, groups: []uint16{GroupX25519, GroupP256}, sni: sni, renegotiation: s.verifyData}
	body, err := h.body(nil)
	if err != nil {
		return 0, err
	}
	if _, err := s.c.Write(s.seal(22, appendHandshake(nil, 1, body))); err != nil {
		return renegRefused, nil // closed: refused
	}
	for {
		typ, plain, err := s.readRecord()
		if err != nil {
			return renegRefused, nil // an alert (no_renegotiation), or the connection closed
		}
		switch typ {
		case 22:
			if len(plain) > 0 && plain[0] == 2 {
				return renegAccepted, nil
			}
			if len(plain) > 0 && plain[0] == 0 { // HelloRequest: ignore
				continue
			}
			return 0, fmt.Errorf("%w: handshake message %d after a renegotiating ClientHello", errNotTLS, plain[0])
		case 23: // application data in flight (an HTTP server's reply): read on
			continue
		default:
			return renegRefused, nil
		}
	}
}

// seal is one encrypted record (AES-GCM, the explicit nonce is the sequence number).
func (s *tls12Session) seal(typ byte, plain []byte) []byte {
	var nonce [12]byte
	copy(nonce[:4], s.writeIV)
	binary.BigEndian.PutUint64(nonce[4:], s.writeSeq)
	aad := make([]byte, 13)
	binary.BigEndian.PutUint64(aad, s.writeSeq)
	aad[8], aad[9], aad[10] = typ, 3, 3
	binary.BigEndian.PutUint16(aad[11:], uint16(len(plain)))
	s.writeSeq++
	payload := append(nonce[4:12:12], s.writeKey.Seal(nil, nonce[:], plain, aad)...)
	return record(typ, payload)
}

// readRecord reads and opens one encrypted record; an alert comes back as the error.
func (s *tls12Session) readRecord() (byte, []byte, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(s.c, hdr); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[3:]))
	if n < 8+16 || n > 1<<14+2048 {
		return 0, nil, errNotTLS
	}
	rec := make([]byte, n)
	if _, err := io.ReadFull(s.c, rec); err != nil {
		return 0, nil, err
	}
	var nonce [12]byte
	copy(nonce[:4], s.readIV)
	copy(nonce[4:], rec[:8])
	aad := make([]byte, 13)
	binary.BigEndian.PutUint64(aad, s.readSeq)
	aad[8], aad[9], aad[10] = hdr[0], hdr[1], hdr[2]
	binary.BigEndian.PutUint16(aad[11:], uint16(n-8-16))
	plain, err := s.readKey.Open(nil, nonce[:], rec[8:], aad)
	if err != nil {
		return 0, nil, fmt.Errorf("a record that does not decrypt: %w", err)
	}
	s.readSeq++
	if hdr[0] == 21 && len(plain) >= 2 {
		return 21, plain, alert{plain[0], plain[1]}
	}
	return hdr[0], plain, nil
}

// prf12 is TLS 1.2's PRF with SHA-256 (RFC 5246, 5).
func prf12(secret []byte, label string, seed []byte, n int) []byte {
	seed = append([]byte(label), seed...)
	out := make([]byte, 0, n+sha256.Size)
	a := seed
	for len(out) < n {
		m := hmac.New(sha256.New, secret)
		m.Write(a)
		a = m.Sum(nil)
		m.Reset()
		m.Write(a)
		m.Write(seed)
		out = m.Sum(out)
	}
	return out[:n]
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// record is one plaintext TLS 1.2 record.
func record(typ byte, body []byte) []byte {
	return append([]byte{typ, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
}

// appendHandshake appends a handshake message (type, 3-byte length, body) to b.
func appendHandshake(b []byte, typ byte, body []byte) []byte {
	n := len(body)
	return append(append(b, typ, byte(n>>16), byte(n>>8), byte(n)), body...)
}

// hasHandshake reports whether the transcript holds a message of typ (walking it by
// lengths).
func hasHandshake(t []byte, typ byte) bool {
	for len(t) >= 4 {
		n := int(t[1])<<16 | int(t[2])<<8 | int(t[3])
		if t[0] == typ {
			return true
		}
		if len(t) < 4+n {
			return false
		}
		t = t[4+n:]
	}
	return false
}

// helloRandom is a marshalled ClientHello's random (record 5, handshake 4, version 2).
func helloRandom(msg []byte) []byte { return msg[11:43] }
