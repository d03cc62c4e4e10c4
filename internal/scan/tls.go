package scan

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Options of a scan.
type Options struct {
	// Name is the server name sent (SNI) and checked against the certificate; "" means
	// the target's host.
	Name string
	// Roots verify the certificate chain; nil means the system's.
	Roots *x509.CertPool
	// Timeout bounds each probe; 0 means 5 s.
	Timeout time.Duration
	// Dial opens a TCP connection; nil means net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// KexRate (SSH) measures for a few seconds how many unauthenticated key exchanges
	// the server completes from one source (DHEat): it loads the server, so it is asked
	// for, not run by default.
	KexRate bool
}

func (o *Options) dial(ctx context.Context, addr string) (net.Conn, error) {
	if o.Dial != nil {
		return o.Dial(ctx, addr)
	}
	d := net.Dialer{Timeout: o.Timeout}
	return d.DialContext(ctx, "tcp", addr)
}

// scanner is one TLS target's scan.
type scanner struct {
	o    Options
	addr string
	r    *Report
	// weak are the weak and insecure suites accepted, with the versions that take them
	// (reported once each, after every version was probed).
	weak     map[string][]string
	weakList []Suite
}

// noteSuite remembers an accepted suite that Rate does not call good, with the version
// (label) that takes it.
func (s *scanner) noteSuite(label string, suite Suite) {
	if sev, _ := Rate(suite); sev <= Good {
		return
	}
	if s.weak == nil {
		s.weak = map[string][]string{}
	}
	if _, seen := s.weak[suite.Name]; !seen {
		s.weakList = append(s.weakList, suite)
	}
	s.weak[suite.Name] = append(s.weak[suite.Name], label)
}

func (s *scanner) setSuites(v uint16, names []string) {
	if s.r.Suites == nil {
		s.r.Suites = map[string][]string{}
	}
	s.r.Suites[VersionName(v)] = names
}

// reportSuites adds one finding per weak or insecure suite, worst first.
func (s *scanner) reportSuites() {
	slices.SortStableFunc(s.weakList, func(a, b Suite) int {
		sa, _ := Rate(a)
		sb, _ := Rate(b)
		return int(sb) - int(sa)
	})
	for _, suite := range s.weakList {
		sev, why := Rate(suite)
		name := suite.OpenSSL
		if name == "" {
			name = suite.Name
		}
		s.r.add("suites", sev, "%s (%s): %s", name, strings.Join(s.weak[suite.Name], ", "), why)
	}
}

// probe sends one ClientHello and reads the answer: a ServerHello, an alert, or a
// closed connection (io.EOF and kin).
func (s *scanner) probe(ctx context.Context, h hello) (*serverHello, error) {
	h.sni = s.o.Name
	msg, err := h.marshal()
	if err != nil {
		return nil, err
	}
	c, err := s.o.dial(ctx, s.addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.o.Timeout))
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	return readReply(c)
}

// accepted reports whether a probe ended in a ServerHello (or, for TLS 1.3, a
// HelloRetryRequest) of version v.
func accepted(sh *serverHello, err error, v uint16) bool {
	if err != nil {
		return false
	}
	return sh.version == v && (!sh.retry || v == VersionTLS13)
}

// ScanTLS scans a TLS endpoint: versions, suites, groups, certificate, downgrade
// protection, renegotiation, compression, resumption and ALPN (alpn: the protocols to
// offer, e.g. h2 and http/1.1 for HTTPS, mqtt for MQTT).
func ScanTLS(ctx context.Context, addr, proto string, alpn []string, o Options) *Report {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Name == "" {
		o.Name, _, _ = net.SplitHostPort(addr)
	}
	s := &scanner{o: o, addr: addr, r: &Report{Target: addr, Proto: proto}}
	c, err := o.dial(ctx, addr)
	if err != nil {
		s.r.Error = err.Error()
		return s.r
	}
	c.Close()

	versions := s.versions(ctx)
	if len(versions) == 0 {
		// Not a TLS endpoint: an error of the scan, and no findings beside it ("TLS 1.3
		// not accepted" would rate a plain port as a weak TLS one).
		s.r.Error = "no SSL or TLS version is accepted (not a TLS endpoint?)"
		s.r.Findings, s.r.Versions = nil, nil
		return s.r
	}
	for _, v := range versions {
		if v != VersionTLS13 {
			s.suites12(ctx, v)
		}
	}
	if slices.Contains(versions, VersionTLS13) {
		s.suites13(ctx)
	}
	s.reportSuites()
	if slices.Contains(versions, VersionTLS13) {
		s.groups13(ctx)
	}
	s.downgrade(ctx, versions)
	if slices.ContainsFunc(versions, func(v uint16) bool { return v <= VersionTLS12 }) {
		s.legacyExtras(ctx, versions)
		s.dheParameters(ctx, versions)
	}
	if slices.Contains(versions, VersionTLS12) {
		s.clientRenegotiation(ctx)
	}
	s.handshake(ctx, alpn)
	return s.r
}

// versions probes SSL 3.0 to TLS 1.3.
func (s *scanner) versions(ctx context.Context) []uint16 {
	var out []uint16
	for _, v := range []uint16{VersionSSL30, VersionTLS10, VersionTLS11, VersionTLS12} {
		sh, err := s.probe(ctx, hello{version: v, suites: ids(suites12), compress: false})
		if accepted(sh, err, v) {
			out = append(out, v)
		}
	}
	sh, err := s.probe(ctx, hello{version: VersionTLS12, tls13: true, suites: append(ids(suites13), ids(suites12)...)})
	if err == nil && sh.version == VersionTLS13 {
		out = append(out, VersionTLS13)
	}
	for _, v := range out {
		s.r.Versions = append(s.r.Versions, VersionName(v))
	}
	s.r.add("versions", Info, "accepted: %s", strings.Join(s.r.Versions, ", "))
	for _, v := range out {
		switch v {
		case VersionSSL30:
			s.r.add("versions", Insecure, "SSL 3.0 accepted (POODLE; RFC 7568 forbids it)")
		case VersionTLS10, VersionTLS11:
			s.r.add("versions", Weak, "%s accepted (deprecated by RFC 8996)", VersionName(v))
		}
	}
	if !slices.Contains(out, VersionTLS13) {
		s.r.add("versions", Weak, "TLS 1.3 not accepted")
	}
	return out
}

// suites12 lists the suites version v accepts, in the server's order of preference:
// offer every suite, note the one chosen, offer the rest, until the server refuses.
func (s *scanner) suites12(ctx context.Context, v uint16) {
	rest := slices.Clone(suites12)
	var got []string
	var acc []Suite
	for len(rest) > 0 {
		sh, err := s.probe(ctx, hello{version: v, suites: ids(rest)})
		if !accepted(sh, err, v) {
			break
		}
		i := slices.IndexFunc(rest, func(x Suite) bool { return x.ID == sh.suite })
		if i < 0 {
			s.r.add("suites", Insecure, "%s: the server chose 0x%04x, which was not offered", VersionName(v), sh.suite)
			break
		}
		suite := rest[i]
		rest = slices.Delete(rest, i, i+1)
		got = append(got, suite.OpenSSL)
		acc = append(acc, suite)
		s.noteSuite(strings.TrimPrefix(VersionName(v), "TLS "), suite)
	}
	s.setSuites(v, got)
	order := suiteOrder(acc, func(offer []uint16) (uint16, bool) {
		sh, err := s.probe(ctx, hello{version: v, suites: offer})
		if !accepted(sh, err, v) {
			return 0, false
		}
		return sh.suite, true
	})
	reportOrder(s.r, VersionName(v), order, got)
}

// suites13 offers each TLS 1.3 suite alone.
func (s *scanner) suites13(ctx context.Context) {
	var got []string
	for _, suite := range suites13 {
		sh, err := s.probe(ctx, hello{version: VersionTLS12, tls13: true, suites: []uint16{suite.ID}})
		if err == nil && sh.version == VersionTLS13 && sh.suite == suite.ID {
			got = append(got, suite.Name)
			s.noteSuite("1.3", suite)
		}
	}
	s.setSuites(VersionTLS13, got)
	s.r.add("suites", Info, "TLS 1.3: %s", strings.Join(got, " "))
}

// groups13 offers each key-exchange group alone, with its key share; and every group
// with an X25519 share only, to see which one the server prefers.
func (s *scanner) groups13(ctx context.Context) {
	var got []string
	for _, g := range allGroups {
		sh, err := s.probe(ctx, hello{version: VersionTLS12, tls13: true, suites: ids(suites13), groups: []uint16{g}, keyShares: []uint16{g}})
		if err == nil && sh.version == VersionTLS13 && !sh.retry && sh.group == g {
			got = append(got, GroupName(g))
		}
	}
	s.r.Groups = got
	s.r.add("groups", Info, "TLS 1.3 key exchange: %s", strings.Join(got, " "))
	if sh, err := s.probe(ctx, hello{version: VersionTLS12, tls13: true, suites: ids(suites13)}); err == nil && sh.retry {
		s.r.add("groups", Info, "prefers %s: a client that lists it but sends an X25519 key share only pays a HelloRetryRequest (one more round trip)", GroupName(sh.group))
	}
}

// downgrade checks the TLS 1.3 downgrade sentinel and TLS_FALLBACK_SCSV.
func (s *scanner) downgrade(ctx context.Context, versions []uint16) {
	top := versions[len(versions)-1]
	if top == VersionTLS13 && slices.Contains(versions, VersionTLS12) {
		sh, err := s.probe(ctx, hello{version: VersionTLS12, suites: ids(suites12)})
		switch {
		case err != nil:
		case bytes.Equal(sh.random[24:], downgradeTLS12):
			s.r.add("downgrade", Good, "TLS 1.3 downgrade sentinel sent when a client offers TLS 1.2 at most")
		default:
			s.r.add("downgrade", Weak, "no TLS 1.3 downgrade sentinel in a TLS 1.2 ServerHello (RFC 8446, 4.1.3)")
		}
	}
	if len(versions) < 2 {
		s.r.add("downgrade", Info, "one version only: no downgrade to protect against")
		return
	}
	lower := versions[len(versions)-2]
	sh, err := s.probe(ctx, hello{version: lower, suites: ids(suites12), fallback: true})
	var a alert
	switch {
	case errors.As(err, &a) && a.desc == alertInappropriateFallback:
		s.r.add("downgrade", Good, "TLS_FALLBACK_SCSV honoured (a fallback to %s is refused)", VersionName(lower))
	case err == nil && sh.version == lower:
		s.r.add("downgrade", Weak, "TLS_FALLBACK_SCSV ignored: a client falling back to %s is not stopped (RFC 7507)", VersionName(lower))
	default:
		s.r.add("downgrade", Info, "fallback to %s with TLS_FALLBACK_SCSV: %v", VersionName(lower), err)
	}
}

// legacyExtras checks what only TLS 1.2 and below have: secure renegotiation and
// compression.
func (s *scanner) legacyExtras(ctx context.Context, versions []uint16) {
	var v uint16
	for _, x := range versions {
		if x <= VersionTLS12 {
			v = x
		}
	}
	sh, err := s.probe(ctx, hello{version: v, suites: ids(suites12), compress: true})
	if err != nil {
		return
	}
	if sh.compression != 0 {
		s.r.add("compression", Insecure, "TLS compression accepted (CRIME)")
	} else {
		s.r.add("compression", Good, "TLS compression refused")
	}
	if sh.renegoInfo {
		s.r.add("renegotiation", Good, "secure renegotiation (RFC 5746)")
	} else {
		s.r.add("renegotiation", Weak, "no secure renegotiation extension (RFC 5746)")
	}
	if !sh.ems {
		s.r.add("renegotiation", Weak, "no extended master secret (RFC 7627: triple handshake)")
	}
}

// dheParameters reads the size of the server's finite-field DH group, if it takes a
// (non-anonymous) DHE suite: under 1024 bits is Logjam, under 2048 weak.
func (s *scanner) dheParameters(ctx context.Context, versions []uint16) {
	var dhe []uint16
	for _, suite := range suites12 {
		if strings.HasPrefix(suite.Name, "TLS_DHE_") && !strings.Contains(suite.Name, "EXPORT") {
			dhe = append(dhe, suite.ID)
		}
	}
	v := slices.Max(slices.DeleteFunc(slices.Clone(versions), func(x uint16) bool { return x > VersionTLS12 }))
	h := hello{version: v, suites: dhe, sni: s.o.Name}
	msg, err := h.marshal()
	if err != nil {
		return
	}
	c, err := s.o.dial(ctx, s.addr)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.o.Timeout))
	if _, err := c.Write(msg); err != nil {
		return
	}
	hr, sh, err := readServerHello(c)
	if err != nil || sh.version != v {
		return // no DHE suite taken
	}
	bits, err := dhPrimeBits(hr)
	switch {
	case err != nil:
		s.r.add("dhe", Info, "DHE suite %s taken, parameters unreadable: %v", suiteName(sh.suite), err)
	case bits < 1024:
		s.r.add("dhe", Insecure, "DHE group of %d bits (Logjam)", bits)
	case bits < 2048:
		s.r.add("dhe", Weak, "DHE group of %d bits (under 2048)", bits)
	default:
		s.r.add("dhe", Info, "DHE group of %d bits", bits)
	}
}

// suiteName is a suite's OpenSSL name if the scan knows it.
func suiteName(id uint16) string {
	for _, s := range suites12 {
		if s.ID == id {
			return s.OpenSSL
		}
	}
	return fmt.Sprintf("0x%04x", id)
}

// handshake completes real handshakes with Go's TLS: the certificate, ALPN and session
// resumption.
func (s *scanner) handshake(ctx context.Context, alpn []string) {
	var chain []*x509.Certificate
	cfg := &tls.Config{ServerName: s.o.Name, InsecureSkipVerify: true, NextProtos: alpn, MinVersion: tls.VersionTLS10,
		ClientSessionCache: tls.NewLRUClientSessionCache(4),
		VerifyConnection: func(cs tls.ConnectionState) error {
			if chain == nil {
				chain = cs.PeerCertificates
			}
			return nil
		}}
	first, err := s.dialTLS(ctx, cfg)
	if err != nil {
		s.r.add("certificate", Info, "no handshake with Go's TLS: %v", err)
		return
	}
	s.certificate(chain)
	if len(alpn) > 0 {
		if first.NegotiatedProtocol != "" {
			s.r.add("alpn", Info, "offered %s: chose %s", strings.Join(alpn, ", "), first.NegotiatedProtocol)
		} else {
			s.r.add("alpn", Info, "offered %s: none chosen", strings.Join(alpn, ", "))
		}
	}
	if again, err := s.dialTLS(ctx, cfg); err == nil {
		if again.DidResume {
			s.r.add("resumption", Good, "sessions resume (%s): a returning client skips the full handshake", tls.VersionName(again.Version))
		} else {
			s.r.add("resumption", Info, "sessions do not resume: every connection pays a full handshake")
		}
	}
}

// dialTLS completes one handshake (and, for TLS 1.3, reads the tickets sent after it).
func (s *scanner) dialTLS(ctx context.Context, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := s.o.dial(ctx, s.addr)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.o.Timeout))
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return tls.ConnectionState{}, err
	}
	st := tc.ConnectionState()
	if st.Version == tls.VersionTLS13 {
		// Tickets come after the handshake: a short read lets the client take them.
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		tc.Read(make([]byte, 1))
	}
	return st, nil
}

// certificate rates the leaf and the chain.
func (s *scanner) certificate(chain []*x509.Certificate) {
	if len(chain) == 0 {
		s.r.add("certificate", Insecure, "no certificate")
		return
	}
	leaf := chain[0]
	now := time.Now()
	s.r.add("certificate", Info, "%s, issued by %s, valid until %s", leaf.Subject, leaf.Issuer, leaf.NotAfter.Format(time.DateOnly))
	switch {
	case now.After(leaf.NotAfter):
		s.r.add("certificate", Insecure, "expired on %s", leaf.NotAfter.Format(time.DateOnly))
	case now.Before(leaf.NotBefore):
		s.r.add("certificate", Insecure, "not valid before %s", leaf.NotBefore.Format(time.DateOnly))
	case leaf.NotAfter.Sub(now) < 30*24*time.Hour:
		// 30 days, as testssl.sh and ACME clients: certificates are renewed earlier
		// (the hub's local CA renews its 90-day leaves with 30 days left).
		s.r.add("certificate", Weak, "expires in less than 30 days (%s)", leaf.NotAfter.Format(time.DateOnly))
	}
	switch k := leaf.PublicKey.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 {
			s.r.add("certificate", Insecure, "RSA key of %d bits", n)
		} else {
			s.r.add("certificate", Info, "RSA key of %d bits", n)
		}
	case *ecdsa.PublicKey:
		s.r.add("certificate", Info, "ECDSA key on %s", k.Curve.Params().Name)
	case ed25519.PublicKey:
		s.r.add("certificate", Info, "Ed25519 key")
	}
	switch leaf.SignatureAlgorithm {
	case x509.MD5WithRSA, x509.MD2WithRSA:
		s.r.add("certificate", Insecure, "signed with %s", leaf.SignatureAlgorithm)
	case x509.SHA1WithRSA, x509.ECDSAWithSHA1, x509.DSAWithSHA1:
		s.r.add("certificate", Weak, "signed with %s", leaf.SignatureAlgorithm)
	}
	if err := leaf.VerifyHostname(s.o.Name); err != nil {
		s.r.add("certificate", Insecure, "does not name %s: %v", s.o.Name, err)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
		// A self-signed certificate in the chain is a root: a client that trusts it has
		// it already, and one that does not is not helped by it. It costs its bytes on
		// every full handshake (as sslyze warns) — on a constrained link, many frames.
		if c.CheckSignatureFrom(c) == nil && bytes.Equal(c.RawSubject, c.RawIssuer) {
			s.r.add("certificate", Info, "the chain carries its root %q (%d bytes on every full handshake; clients need only the leaf and intermediates)", c.Subject.String(), len(c.Raw))
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.o.Roots, Intermediates: inter, DNSName: s.o.Name}); err != nil {
		s.r.add("certificate", Weak, "chain not trusted by the roots given: %v", err)
	} else {
		s.r.add("certificate", Good, "chain trusted, names %s", s.o.Name)
	}
}

// CheckHSTS asks an HTTPS endpoint for / and rates its Strict-Transport-Security.
func CheckHSTS(ctx context.Context, r *Report, addr string, o Options) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: o.Name, InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, _, a string) (net.Conn, error) { return o.dial(ctx, a) }}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
	req.Host = o.Name
	resp, err := (&http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		r.add("hsts", Info, "no HTTP answer: %v", err)
		return
	}
	resp.Body.Close()
	h := resp.Header.Get("Strict-Transport-Security")
	var age int64
	for _, part := range strings.Split(h, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok && strings.EqualFold(k, "max-age") {
			fmt.Sscan(v, &age)
		}
	}
	switch {
	case h == "":
		r.add("hsts", Weak, "no Strict-Transport-Security header")
	case age < 180*24*3600:
		r.add("hsts", Weak, "Strict-Transport-Security max-age %d s is under six months", age)
	default:
		r.add("hsts", Good, "Strict-Transport-Security: %s", h)
	}
}
