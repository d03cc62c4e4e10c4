package scan

import (
	"bytes"
	"crypto/ecdh"
	"crypto/mlkem"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// TLS protocol versions as they appear on the wire.
const (
	VersionSSL30 uint16 = 0x0300
	VersionTLS10 uint16 = 0x0301
	VersionTLS11 uint16 = 0x0302
	VersionTLS12 uint16 = 0x0303
	VersionTLS13 uint16 = 0x0304
)

// VersionName is a version for people.
func VersionName(v uint16) string {
	switch v {
	case VersionSSL30:
		return "SSL 3.0"
	case VersionTLS10:
		return "TLS 1.0"
	case VersionTLS11:
		return "TLS 1.1"
	case VersionTLS12:
		return "TLS 1.2"
	case VersionTLS13:
		return "TLS 1.3"
	}
	return fmt.Sprintf("0x%04x", v)
}

// Key-exchange groups (IANA).
const (
	GroupP256           uint16 = 0x0017
	GroupP384           uint16 = 0x0018
	GroupP521           uint16 = 0x0019
	GroupX25519         uint16 = 0x001d
	GroupX448           uint16 = 0x001e
	GroupFFDHE2048      uint16 = 0x0100
	GroupFFDHE3072      uint16 = 0x0101
	GroupFFDHE4096      uint16 = 0x0102
	GroupFFDHE6144      uint16 = 0x0103
	GroupFFDHE8192      uint16 = 0x0104
	GroupX25519MLKEM768 uint16 = 0x11ec
)

// GroupName is a group for people.
func GroupName(g uint16) string {
	switch g {
	case GroupP256:
		return "P-256"
	case GroupP384:
		return "P-384"
	case GroupP521:
		return "P-521"
	case GroupX25519:
		return "X25519"
	case GroupX25519MLKEM768:
		return "X25519MLKEM768"
	case GroupX448:
		return "X448"
	case GroupFFDHE2048, GroupFFDHE3072, GroupFFDHE4096, GroupFFDHE6144, GroupFFDHE8192:
		return fmt.Sprintf("ffdhe%d", ffdheBits[g])
	}
	return fmt.Sprintf("0x%04x", g)
}

// allGroups are the groups a probe offers unless it tests one.
var allGroups = []uint16{GroupX25519, GroupP256, GroupP384, GroupP521, GroupX25519MLKEM768, GroupX448,
	GroupFFDHE2048, GroupFFDHE3072, GroupFFDHE4096, GroupFFDHE6144, GroupFFDHE8192}

// ffdheBits are the finite-field groups' sizes (RFC 7919).
var ffdheBits = map[uint16]int{GroupFFDHE2048: 2048, GroupFFDHE3072: 3072, GroupFFDHE4096: 4096, GroupFFDHE6144: 6144, GroupFFDHE8192: 8192}

// Special values in the suites list.
const (
	suiteFallbackSCSV    uint16 = 0x5600 // RFC 7507
	suiteEmptyRenegoSCSV uint16 = 0x00ff // RFC 5746
)

// Alert descriptions the scan reads.
const (
	alertHandshakeFailure      = 40
	alertProtocolVersion       = 70
	alertInappropriateFallback = 86
)

// hello is a ClientHello to send.
type hello struct {
	version    uint16   // legacy_version: the highest version up to TLS 1.2
	tls13      bool     // offer TLS 1.3 (supported_versions) above version
	suites     []uint16 // in order
	groups     []uint16 // supported_groups; nil means allGroups
	keyShares  []uint16 // TLS 1.3 key shares (default X25519)
	sni        string
	alpn       []string
	compress   bool // offer DEFLATE before null compression
	fallback   bool // TLS_FALLBACK_SCSV
	recordVers uint16
	// random and sessionID, if set, are sent instead of fresh ones (a DTLS ClientHello
	// answering a cookie repeats the first one's).
	random, sessionID []byte
	// renegotiation is the client's last Finished, for a ClientHello that renegotiates
	// (RFC 5746); nil in a first handshake.
	renegotiation []byte
}

// marshal is the ClientHello in one TLS record.
func (h hello) marshal() ([]byte, error) {
	body, err := h.body(nil)
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 0, 9+len(body))
	rv := h.recordVers
	if rv == 0 {
		rv = min(h.version, VersionTLS10) // what clients put in the first record
		if h.version == VersionSSL30 {
			rv = VersionSSL30
		}
	}
	n := len(body) + 4
	msg = append(msg, 22, byte(rv>>8), byte(rv), byte(n>>8), byte(n))
	msg = append(msg, 1, byte(len(body)>>16), byte(len(body)>>8), byte(len(body)))
	return append(msg, body...), nil
}

// body is the ClientHello's body; a DTLS one (cookie not nil) carries the cookie after
// the session id.
func (h hello) body(cookie []byte) ([]byte, error) {
	var body bytes.Buffer
	put16 := func(b *bytes.Buffer, v uint16) { b.WriteByte(byte(v >> 8)); b.WriteByte(byte(v)) }
	put16(&body, h.version)
	random, sid := h.random, h.sessionID
	if random == nil {
		random = make([]byte, 32)
		rand.Read(random)
	}
	if sid == nil {
		// A session id, as TLS 1.3 clients send for middlebox compatibility.
		sid = make([]byte, 32)
		rand.Read(sid)
	}
	body.Write(random)
	body.WriteByte(byte(len(sid)))
	body.Write(sid)
	if cookie != nil {
		body.WriteByte(byte(len(cookie)))
		body.Write(cookie)
	}
	suites := h.suites
	if h.fallback {
		suites = append(append([]uint16{}, suites...), suiteFallbackSCSV)
	}
	put16(&body, uint16(2*len(suites)))
	for _, s := range suites {
		put16(&body, s)
	}
	if h.compress {
		body.Write([]byte{2, 1, 0})
	} else {
		body.Write([]byte{1, 0})
	}
	var ext bytes.Buffer
	add := func(typ uint16, data []byte) {
		put16(&ext, typ)
		put16(&ext, uint16(len(data)))
		ext.Write(data)
	}
	if h.sni != "" {
		var b bytes.Buffer
		put16(&b, uint16(len(h.sni)+3))
		b.WriteByte(0)
		put16(&b, uint16(len(h.sni)))
		b.WriteString(h.sni)
		add(0, b.Bytes())
	}
	groups := h.groups
	if groups == nil {
		groups = allGroups
	}
	var b bytes.Buffer
	put16(&b, uint16(2*len(groups)))
	for _, g := range groups {
		put16(&b, g)
	}
	add(10, b.Bytes())    // supported_groups
	add(11, []byte{1, 0}) // ec_point_formats: uncompressed
	// renegotiation_info: empty in a first handshake, the last Finished in a renegotiation
	add(0xff01, append([]byte{byte(len(h.renegotiation))}, h.renegotiation...))
	add(23, nil) // extended_master_secret
	add(35, nil) // session_ticket
	sigs := []uint16{0x0403, 0x0503, 0x0603, 0x0807, 0x0804, 0x0805, 0x0806, 0x0401, 0x0501, 0x0601, 0x0203, 0x0201}
	b.Reset()
	put16(&b, uint16(2*len(sigs)))
	for _, s := range sigs {
		put16(&b, s)
	}
	add(13, b.Bytes()) // signature_algorithms
	if len(h.alpn) > 0 {
		var l bytes.Buffer
		for _, p := range h.alpn {
			l.WriteByte(byte(len(p)))
			l.WriteString(p)
		}
		b.Reset()
		put16(&b, uint16(l.Len()))
		b.Write(l.Bytes())
		add(16, b.Bytes())
	}
	if h.tls13 {
		vs := []uint16{VersionTLS13}
		for v := h.version; v >= VersionTLS10 && v <= VersionTLS12; v-- {
			vs = append(vs, v)
		}
		b.Reset()
		b.WriteByte(byte(2 * len(vs)))
		for _, v := range vs {
			put16(&b, v)
		}
		add(43, b.Bytes())    // supported_versions
		add(45, []byte{1, 1}) // psk_key_exchange_modes: psk_dhe_ke
		shares := h.keyShares
		if shares == nil {
			shares = []uint16{GroupX25519}
		}
		var ks bytes.Buffer
		for _, g := range shares {
			key, err := keyShare(g)
			if err != nil {
				return nil, err
			}
			put16(&ks, g)
			put16(&ks, uint16(len(key)))
			ks.Write(key)
		}
		b.Reset()
		put16(&b, uint16(ks.Len()))
		b.Write(ks.Bytes())
		add(51, b.Bytes()) // key_share
	}
	put16(&body, uint16(ext.Len()))
	body.Write(ext.Bytes())
	return body.Bytes(), nil
}

// keyShare is a fresh public key of group g (the private part is dropped: a probe never
// finishes a handshake).
func keyShare(g uint16) ([]byte, error) {
	var c ecdh.Curve
	switch g {
	case GroupX25519:
		c = ecdh.X25519()
	case GroupP256:
		c = ecdh.P256()
	case GroupP384:
		c = ecdh.P384()
	case GroupP521:
		c = ecdh.P521()
	case GroupX25519MLKEM768:
		dk, err := mlkem.GenerateKey768()
		if err != nil {
			return nil, err
		}
		x, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		return append(dk.EncapsulationKey().Bytes(), x.PublicKey().Bytes()...), nil
	case GroupX448:
		// Go has no X448: any 56 bytes are a public key, and the probe stops at the
		// ServerHello.
		k := make([]byte, 56)
		rand.Read(k)
		return k, nil
	case GroupFFDHE2048, GroupFFDHE3072, GroupFFDHE4096, GroupFFDHE6144, GroupFFDHE8192:
		// Nor finite-field Diffie-Hellman: 4 (= 2², in the prime-order subgroup a server
		// checks for) padded to the prime's length passes a server's checks.
		k := make([]byte, ffdheBits[g]/8)
		k[len(k)-1] = 4
		return k, nil
	default:
		return nil, fmt.Errorf("scan: no key share for group %s", GroupName(g))
	}
	k, err := c.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return k.PublicKey().Bytes(), nil
}

// serverHello is what a probe learns from the server's first handshake message.
type serverHello struct {
	version     uint16 // negotiated: supported_versions if present, else legacy_version
	random      [32]byte
	suite       uint16
	compression byte
	retry       bool   // a HelloRetryRequest (TLS 1.3)
	group       uint16 // key_share's group (TLS 1.3), 0 if none
	renegoInfo  bool   // renegotiation_info present
	alpn        string
	ticket      bool // session_ticket acknowledged (TLS 1.2)
	ems         bool // extended_master_secret acknowledged
}

// helloRetryRandom marks a ServerHello that is a HelloRetryRequest (RFC 8446, 4.1.3).
var helloRetryRandom = [32]byte{0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c}

// downgradeTLS12 ends a TLS 1.3 server's random when it negotiates TLS 1.2 (RFC 8446,
// 4.1.3).
var downgradeTLS12 = []byte("DOWNGRD\x01")

// alert is a TLS alert the server sent instead of a ServerHello.
type alert struct{ level, desc byte }

func (a alert) Error() string { return fmt.Sprintf("TLS alert %d", a.desc) }

// errNotTLS: what came back is not a TLS record.
var errNotTLS = errors.New("not a TLS answer")

// maxReply bounds what a probe reads before it has a ServerHello.
const maxReply = 64 << 10

// handshakeReader reads a server's handshake messages from its records, within
// maxReply bytes; an alert record is returned as the error.
type handshakeReader struct {
	r    io.Reader
	hs   []byte // handshake bytes not yet returned
	read int
}

// next returns the next whole handshake message.
func (h *handshakeReader) next() (typ byte, body []byte, err error) {
	hdr := make([]byte, 5)
	for {
		if len(h.hs) >= 4 {
			m := int(h.hs[1])<<16 | int(h.hs[2])<<8 | int(h.hs[3])
			if m > maxReply {
				return 0, nil, errNotTLS
			}
			if len(h.hs) >= 4+m {
				typ, body = h.hs[0], h.hs[4:4+m]
				h.hs = h.hs[4+m:]
				return typ, body, nil
			}
		}
		if _, err := io.ReadFull(h.r, hdr); err != nil {
			return 0, nil, err
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		h.read += 5 + n
		if h.read > maxReply || n > 1<<14+2048 {
			return 0, nil, errNotTLS
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(h.r, rec); err != nil {
			return 0, nil, err
		}
		switch hdr[0] {
		case 21: // alert
			if n < 2 {
				return 0, nil, errNotTLS
			}
			return 0, nil, alert{rec[0], rec[1]}
		case 22: // handshake
			h.hs = append(h.hs, rec...)
		default:
			return 0, nil, fmt.Errorf("%w: record type %d", errNotTLS, hdr[0])
		}
	}
}

// readReply reads records until the ServerHello is whole or an alert comes. io.EOF (or
// a reset) means the server closed without a word.
func readReply(r io.Reader) (*serverHello, error) {
	_, sh, err := readServerHello(r)
	return sh, err
}

// readServerHello is readReply that also returns the reader, to go on with the
// messages that follow (TLS 1.2 and below send them in the clear).
func readServerHello(r io.Reader) (*handshakeReader, *serverHello, error) {
	h := &handshakeReader{r: r}
	typ, body, err := h.next()
	if err != nil {
		return h, nil, err
	}
	if typ != 2 {
		return h, nil, fmt.Errorf("%w: handshake message %d before ServerHello", errNotTLS, typ)
	}
	sh, err := parseServerHello(body)
	return h, sh, err
}

// dhPrimeBits reads a DHE ServerKeyExchange's prime length in bits (the messages after
// the ServerHello, up to ServerHelloDone).
func dhPrimeBits(h *handshakeReader) (int, error) {
	for {
		typ, body, err := h.next()
		if err != nil {
			return 0, err
		}
		switch typ {
		case 12: // ServerKeyExchange: dh_p, dh_g, dh_Ys (each with a 2-byte length), ...
			if len(body) < 2 {
				return 0, errNotTLS
			}
			n := int(binary.BigEndian.Uint16(body))
			if n == 0 || len(body) < 2+n {
				return 0, errNotTLS
			}
			p := body[2 : 2+n]
			for len(p) > 0 && p[0] == 0 {
				p = p[1:]
			}
			if len(p) == 0 {
				return 0, errNotTLS
			}
			bits := 8 * (len(p) - 1)
			for b := p[0]; b > 0; b >>= 1 {
				bits++
			}
			return bits, nil
		case 14: // ServerHelloDone: no key exchange message
			return 0, fmt.Errorf("%w: no ServerKeyExchange", errNotTLS)
		}
	}
}

// parseServerHello reads a ServerHello's body.
func parseServerHello(b []byte) (*serverHello, error) {
	bad := fmt.Errorf("%w: malformed ServerHello", errNotTLS)
	if len(b) < 38 {
		return nil, bad
	}
	sh := &serverHello{version: binary.BigEndian.Uint16(b)}
	copy(sh.random[:], b[2:34])
	sidLen := int(b[34])
	p := 35 + sidLen
	if len(b) < p+3 {
		return nil, bad
	}
	sh.suite = binary.BigEndian.Uint16(b[p:])
	sh.compression = b[p+2]
	p += 3
	sh.retry = sh.random == helloRetryRandom
	if p == len(b) {
		return sh, nil // no extensions (SSL 3.0, old servers)
	}
	if len(b) < p+2 {
		return nil, bad
	}
	extLen := int(binary.BigEndian.Uint16(b[p:]))
	p += 2
	if len(b) != p+extLen {
		return nil, bad
	}
	for p < len(b) {
		if len(b) < p+4 {
			return nil, bad
		}
		typ, n := binary.BigEndian.Uint16(b[p:]), int(binary.BigEndian.Uint16(b[p+2:]))
		p += 4
		if len(b) < p+n {
			return nil, bad
		}
		data := b[p : p+n]
		p += n
		switch typ {
		case 43: // supported_versions
			if n != 2 {
				return nil, bad
			}
			sh.version = binary.BigEndian.Uint16(data)
		case 51: // key_share: group (+ key, except in a HelloRetryRequest)
			if n < 2 {
				return nil, bad
			}
			sh.group = binary.BigEndian.Uint16(data)
		case 0xff01:
			sh.renegoInfo = true
		case 16: // alpn: list length, then one protocol
			if n < 3 || int(data[2]) != n-3 {
				return nil, bad
			}
			sh.alpn = string(data[3:])
		case 35:
			sh.ticket = true
		case 23:
			sh.ems = true
		}
	}
	return sh, nil
}
