package scan

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"
)

// DTLS versions on the wire (one's complement of TLS's minor numbering). DTLS 1.3 is
// not probed: no library here implements it.
const (
	VersionDTLS10 uint16 = 0xfeff
	VersionDTLS12 uint16 = 0xfefd
)

// dtlsVersionName is a DTLS version for people.
func dtlsVersionName(v uint16) string {
	switch v {
	case VersionDTLS10:
		return "DTLS 1.0"
	case VersionDTLS12:
		return "DTLS 1.2"
	}
	return fmt.Sprintf("0x%04x", v)
}

// suitesDTLS are the suites a DTLS probe offers: TLS 1.2's without RC4 (a stream
// cipher DTLS cannot carry), and the pre-shared-key suites constrained devices use
// (RFC 7925's CCM_8 among them).
var suitesDTLS = func() []Suite {
	out := slices.DeleteFunc(slices.Clone(suites12), func(s Suite) bool { return strings.Contains(s.Name, "_RC4_") })
	for _, s := range []Suite{
		{0xc0ae, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"},
		{0xc037, "TLS_ECDHE_PSK_WITH_AES_128_CBC_SHA256", "ECDHE-PSK-AES128-CBC-SHA256"},
		{0x00a8, "TLS_PSK_WITH_AES_128_GCM_SHA256", "PSK-AES128-GCM-SHA256"},
		{0xc0a4, "TLS_PSK_WITH_AES_128_CCM", "PSK-AES128-CCM"},
		{0xc0a8, "TLS_PSK_WITH_AES_128_CCM_8", "PSK-AES128-CCM8"},
	} {
		if !slices.ContainsFunc(out, func(x Suite) bool { return x.ID == s.ID }) {
			out = append(out, s)
		}
	}
	return out
}()

// maxDatagram bounds one datagram a probe reads.
const maxDatagram = 64 << 10

// marshalDTLS is the ClientHello as one DTLS record (epoch 0, record sequence seq,
// message sequence seq: the first flight is 0, the one answering a cookie 1).
func (h hello) marshalDTLS(cookie []byte, seq uint16) ([]byte, error) {
	if cookie == nil {
		cookie = []byte{}
	}
	body, err := h.body(cookie)
	if err != nil {
		return nil, err
	}
	n := len(body)
	hs := []byte{1, byte(n >> 16), byte(n >> 8), byte(n), byte(seq >> 8), byte(seq), 0, 0, 0, byte(n >> 16), byte(n >> 8), byte(n)}
	hs = append(hs, body...)
	rv := h.recordVers
	if rv == 0 {
		rv = VersionDTLS10 // what clients put in the first flight's records
	}
	rec := []byte{22, byte(rv >> 8), byte(rv), 0, 0, 0, 0, 0, 0, 0, byte(seq), byte(len(hs) >> 8), byte(len(hs))}
	return append(rec, hs...), nil
}

// dtlsReply is what a DTLS server's first flight told a probe.
type dtlsReply struct {
	cookie []byte       // from a HelloVerifyRequest, nil if there was none
	hello  *serverHello // nil until the ServerHello is whole
}

// dtlsAssembler collects a server's epoch-0 handshake messages from datagrams,
// reassembling fragments, until a HelloVerifyRequest or a ServerHello is whole.
type dtlsAssembler struct {
	frags map[uint16]*dtlsMessage // by message sequence
}

type dtlsMessage struct {
	typ  byte
	body []byte
	have int // bytes filled (fragments are assumed not to overlap)
}

// add reads one datagram. It returns the reply once it has one; an alert record is
// returned as the error.
func (a *dtlsAssembler) add(d []byte) (*dtlsReply, error) {
	if a.frags == nil {
		a.frags = map[uint16]*dtlsMessage{}
	}
	for len(d) > 0 {
		if len(d) < 13 {
			return nil, fmt.Errorf("%w: short DTLS record header", errNotTLS)
		}
		typ, epoch, n := d[0], binary.BigEndian.Uint16(d[3:]), int(binary.BigEndian.Uint16(d[11:]))
		if len(d) < 13+n {
			return nil, fmt.Errorf("%w: DTLS record longer than its datagram", errNotTLS)
		}
		rec := d[13 : 13+n]
		d = d[13+n:]
		if epoch != 0 {
			continue // encrypted: past what a probe reads
		}
		switch typ {
		case 21:
			if n < 2 {
				return nil, errNotTLS
			}
			return nil, alert{rec[0], rec[1]}
		case 22:
			if r, err := a.handshake(rec); r != nil || err != nil {
				return r, err
			}
		default:
			return nil, fmt.Errorf("%w: DTLS record type %d", errNotTLS, typ)
		}
	}
	return nil, nil
}

// handshake takes one record's handshake fragments.
func (a *dtlsAssembler) handshake(rec []byte) (*dtlsReply, error) {
	for len(rec) > 0 {
		if len(rec) < 12 {
			return nil, fmt.Errorf("%w: short DTLS handshake header", errNotTLS)
		}
		typ := rec[0]
		total := int(rec[1])<<16 | int(rec[2])<<8 | int(rec[3])
		seq := binary.BigEndian.Uint16(rec[4:])
		off := int(rec[6])<<16 | int(rec[7])<<8 | int(rec[8])
		n := int(rec[9])<<16 | int(rec[10])<<8 | int(rec[11])
		if total > maxReply || off+n > total || len(rec) < 12+n {
			return nil, fmt.Errorf("%w: malformed DTLS handshake fragment", errNotTLS)
		}
		m := a.frags[seq]
		if m == nil {
			if len(a.frags) > 16 {
				return nil, fmt.Errorf("%w: too many DTLS handshake messages before a ServerHello", errNotTLS)
			}
			m = &dtlsMessage{typ: typ, body: make([]byte, total)}
			a.frags[seq] = m
		}
		if m.typ != typ || len(m.body) != total {
			return nil, fmt.Errorf("%w: DTLS fragments of one message disagree", errNotTLS)
		}
		copy(m.body[off:], rec[12:12+n])
		m.have += n
		rec = rec[12+n:]
		if m.have < total {
			continue
		}
		switch typ {
		case 3: // HelloVerifyRequest: server_version, cookie
			if total < 3 || int(m.body[2]) != total-3 {
				return nil, fmt.Errorf("%w: malformed HelloVerifyRequest", errNotTLS)
			}
			return &dtlsReply{cookie: slices.Clone(m.body[3:])}, nil
		case 2:
			sh, err := parseServerHello(m.body)
			if err != nil {
				return nil, err
			}
			return &dtlsReply{hello: sh}, nil
		}
	}
	return nil, nil
}

// dtlsProbe is one DTLS exchange's outcome.
type dtlsProbe struct {
	hello      *serverHello
	cookie     bool // the server asked for a cookie before its ServerHello
	sent, recv int  // bytes of the first ClientHello, and what came back for it
}

// dtlsScanner is one DTLS target's scan.
type dtlsScanner struct {
	scanner
}

// exchange sends a ClientHello over UDP, answers a HelloVerifyRequest with its cookie,
// and reads until the ServerHello. Without a cookie exchange it goes on reading the
// server's first flight until it is quiet, to measure what an unverified source gets.
func (s *dtlsScanner) exchange(ctx context.Context, h hello) (*dtlsProbe, error) {
	h.sni = s.o.Name
	// The ClientHello answering a cookie must repeat the first one (RFC 6347 4.2.1).
	h.random, h.sessionID = make([]byte, 32), []byte{}
	rand.Read(h.random)
	first, err := h.marshalDTLS(nil, 0)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: s.o.Timeout}
	c, err := d.DialContext(ctx, "udp", s.addr)
	if err != nil {
		return nil, err
	}
	// Over UDP nothing tells the server the probe is gone: end its handshake with a
	// fatal alert, so a server that serves one peer at a time takes the next probe.
	defer func() {
		c.Write([]byte{21, byte(VersionDTLS10 >> 8), byte(VersionDTLS10 & 0xff), 0, 0, 0, 0, 0, 0, 0, 2, 0, 2, 2, 90})
		c.Close()
	}()
	p := &dtlsProbe{sent: len(first)}
	var asm dtlsAssembler
	buf := make([]byte, maxDatagram)
	send := func(msg []byte) error {
		_, err := c.Write(msg)
		return err
	}
	// read returns the next reply; one resend of msg if half the timeout passes in
	// silence (a lost datagram).
	read := func(msg []byte, counted bool) (*dtlsReply, error) {
		deadline := time.Now().Add(s.o.Timeout)
		resent := false
		for {
			next := time.Now().Add(s.o.Timeout / 2)
			if next.After(deadline) {
				next = deadline
			}
			c.SetReadDeadline(next)
			n, err := c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !resent && time.Now().Before(deadline) {
				resent = true
				if err := send(msg); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			if counted {
				p.recv += n
			}
			r, err := asm.add(buf[:n])
			if r != nil || err != nil {
				return r, err
			}
		}
	}
	if err := send(first); err != nil {
		return nil, err
	}
	r, err := read(first, true)
	if err != nil {
		return p, err
	}
	if r.cookie != nil {
		p.cookie = true
		second, err := h.marshalDTLS(r.cookie, 1)
		if err != nil {
			return p, err
		}
		if err := send(second); err != nil {
			return p, err
		}
		asm = dtlsAssembler{}
		if r, err = read(second, false); err != nil {
			return p, err
		}
		if r.hello == nil {
			return p, fmt.Errorf("%w: a second HelloVerifyRequest", errNotTLS)
		}
		p.hello = r.hello
		return p, nil
	}
	p.hello = r.hello
	// No cookie: the rest of the flight (certificate, key exchange) came for an
	// unverified address. Count it until the server is quiet.
	for {
		c.SetReadDeadline(time.Now().Add(min(s.o.Timeout, 300*time.Millisecond)))
		n, err := c.Read(buf)
		if err != nil {
			return p, nil
		}
		p.recv += n
	}
}

// ScanDTLS scans a DTLS endpoint (UDP): the versions and suites it accepts, whether it
// verifies a client's address with a cookie before sending its flight (without one it
// can be used to amplify a spoofed flood), secure renegotiation and the extended master
// secret.
func ScanDTLS(ctx context.Context, addr string, o Options) *Report {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	s := &dtlsScanner{scanner{o: o, addr: addr, r: &Report{Target: addr, Proto: "dtls"}}}
	if s.o.Name == "" {
		s.o.Name, _, _ = net.SplitHostPort(addr)
		if net.ParseIP(s.o.Name) != nil {
			s.o.Name = "" // no SNI for an address
		}
	}
	var accepted []uint16
	var lastErr error
	var probe *dtlsProbe
	for _, v := range []uint16{VersionDTLS12, VersionDTLS10} {
		p, err := s.exchange(ctx, hello{version: v, suites: ids(suitesDTLS)})
		if err != nil || p.hello == nil || p.hello.version != v {
			if err != nil {
				lastErr = err
			}
			continue
		}
		accepted = append(accepted, v)
		if probe == nil {
			probe = p
		}
	}
	if len(accepted) == 0 {
		s.r.Error = "no DTLS ServerHello for DTLS 1.2 or 1.0"
		if lastErr != nil {
			s.r.Error += ": " + lastErr.Error()
			var ne net.Error
			switch {
			case errors.As(lastErr, &ne) && ne.Timeout():
				s.r.Error += " (nothing answered: not a DTLS server, or the port is filtered)"
			case errors.Is(lastErr, syscall.ECONNREFUSED):
				s.r.Error += " (nothing listens on that UDP port)"
			}
		}
		return s.r
	}
	for _, v := range accepted {
		s.r.Versions = append(s.r.Versions, dtlsVersionName(v))
		if v == VersionDTLS10 {
			s.r.add("versions", Weak, "DTLS 1.0 accepted (deprecated by RFC 8996: SHA-1 and MD5 in its handshake)")
		} else {
			s.r.add("versions", Good, "DTLS 1.2 accepted")
		}
		s.suites(ctx, v)
	}
	s.reportSuites()
	if probe.cookie {
		s.r.add("cookie", Good, "the server verifies a client's address with a cookie (HelloVerifyRequest) before it sends its flight")
	} else {
		factor := float64(probe.recv) / float64(probe.sent)
		sev := Info
		if factor > 3 {
			sev = Weak
		}
		s.r.add("cookie", sev, "no cookie exchange: a ClientHello of %d bytes from any claimed address got %d bytes back (%.1fx); a spoofed flood is amplified (RFC 6347 4.2.1)", probe.sent, probe.recv, factor)
	}
	if probe.hello.renegoInfo {
		s.r.add("renegotiation", Good, "secure renegotiation (RFC 5746) supported")
	} else {
		s.r.add("renegotiation", Weak, "no renegotiation_info in the ServerHello: insecure renegotiation may be possible")
	}
	if probe.hello.ems {
		s.r.add("extended_master_secret", Good, "extended master secret (RFC 7627)")
	} else {
		s.r.add("extended_master_secret", Weak, "no extended master secret (RFC 7627): triple-handshake attacks")
	}
	return s.r
}

// suites lists the suites version v accepts, in the server's order of preference.
func (s *dtlsScanner) suites(ctx context.Context, v uint16) {
	rest := slices.Clone(suitesDTLS)
	var got []string
	var acc []Suite
	for len(rest) > 0 {
		p, err := s.exchange(ctx, hello{version: v, suites: ids(rest)})
		if err != nil || p.hello == nil || p.hello.version != v {
			break
		}
		i := slices.IndexFunc(rest, func(x Suite) bool { return x.ID == p.hello.suite })
		if i < 0 {
			s.r.add("suites", Insecure, "%s: the server chose 0x%04x, which was not offered", dtlsVersionName(v), p.hello.suite)
			break
		}
		suite := rest[i]
		rest = slices.Delete(rest, i, i+1)
		got = append(got, suite.OpenSSL)
		acc = append(acc, suite)
		s.noteSuite(dtlsVersionName(v), suite)
	}
	if s.r.Suites == nil {
		s.r.Suites = map[string][]string{}
	}
	s.r.Suites[dtlsVersionName(v)] = got
	order := suiteOrder(acc, func(offer []uint16) (uint16, bool) {
		p, err := s.exchange(ctx, hello{version: v, suites: offer})
		if err != nil || p.hello == nil || p.hello.version != v {
			return 0, false
		}
		return p.hello.suite, true
	})
	reportOrder(s.r, dtlsVersionName(v), order, got)
}
