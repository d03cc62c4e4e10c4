package tls13conn

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// pki is a CA, a server certificate for "hub.test" and a client certificate, made for
// the test.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newPKI(t testing.TB) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, tmpl x509.Certificate) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, &tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p := testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.server = leaf(2, x509.Certificate{DNSNames: []string{"hub.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	p.client = leaf(3, x509.Certificate{Subject: pkix.Name{CommonName: "dev1"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return p
}

// pair is a server connection from Server.Handshake and a crypto/tls client on
// loopback TCP.
func pair(t testing.TB, srv *Server, ccfg *tls.Config) (server net.Conn, client *tls.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	done := make(chan res, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			done <- res{nil, err}
			return
		}
		c, err := srv.Handshake(raw)
		if err != nil {
			raw.Close()
		}
		done <- res{c, err}
	}()
	client, err = tls.Dial("tcp", ln.Addr().String(), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return r.c, client
}

func serverConfig(p testPKI) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
}

func clientConfig(p testPKI) *tls.Config {
	return &tls.Config{RootCAs: p.pool, ServerName: "hub.test"}
}

// exchange sends n bytes each way at once and checks they arrive.
func exchange(t testing.TB, a, b net.Conn, n int) {
	t.Helper()
	msg := func(seed byte) []byte {
		m := make([]byte, n)
		for i := range m {
			m[i] = seed + byte(i%251)
		}
		return m
	}
	ab, ba := msg(1), msg(7)
	errs := make(chan error, 2)
	go func() { _, err := a.Write(ab); errs <- err }()
	go func() { _, err := b.Write(ba); errs <- err }()
	gotB := make([]byte, n)
	if _, err := io.ReadFull(b, gotB); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	gotA := make([]byte, n)
	if _, err := io.ReadFull(a, gotA); err != nil {
		t.Fatalf("reading %d bytes back: %v", n, err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gotB, ab) || !bytes.Equal(gotA, ba) {
		t.Fatal("the data arrived changed")
	}
}

func TestTLS13IsCarriedHere(t *testing.T) {
	p := newPKI(t)
	s, c := pair(t, NewServer(serverConfig(p)), clientConfig(p))
	sc, ok := s.(*Conn)
	if !ok {
		t.Fatalf("TLS 1.3 stayed with crypto/tls (%T)", s)
	}
	exchange(t, s, c, 10)
	exchange(t, s, c, 100_000) // several records each way
	if sc.rbuf != nil {
		t.Fatal("an idle connection holds a record buffer")
	}
	if st := sc.ConnectionState(); st.Version != tls.VersionTLS13 || st.CipherSuite != c.ConnectionState().CipherSuite {
		t.Fatalf("state lost: %+v", st)
	}
}

// Each suite's record protection, between two Conns with the same secrets.
func TestEverySuite(t *testing.T) {
	for id := range suites {
		t.Run(tls.CipherSuiteName(id), func(t *testing.T) {
			s, c := connPair(t, id)
			exchange(t, s, c, 70_000)
		})
	}
}

// connPair is two Conns over a socket pair, the client's in and out swapped, as a
// handshake would leave them.
func connPair(t testing.TB, id uint16) (server, client *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	craw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sraw := <-accepted
	cs, ss := bytes.Repeat([]byte{1}, suites[id].hash().Size()), bytes.Repeat([]byte{2}, suites[id].hash().Size())
	st := tls.ConnectionState{Version: tls.VersionTLS13, CipherSuite: id}
	server, err = newConn(sraw, st, cs, ss, 0)
	if err != nil {
		t.Fatal(err)
	}
	client, err = newConn(craw, st, ss, cs, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// Session tickets are sent under the server's key during the handshake: the Conn's
// sequence numbers must go on after them, with and without a client certificate (which
// moves the ticket after the client's flight), or the client could not read a thing.
// The resumed session proves the ticket was whole.
func TestTicketsAndResumption(t *testing.T) {
	p := newPKI(t)
	for _, clientCert := range []bool{false, true} {
		name := "no client certificate"
		if clientCert {
			name = "client certificate"
		}
		t.Run(name, func(t *testing.T) {
			scfg := serverConfig(p)
			ccfg := clientConfig(p)
			ccfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			if clientCert {
				scfg.ClientCAs, scfg.ClientAuth = p.pool, tls.VerifyClientCertIfGiven
				ccfg.Certificates = []tls.Certificate{p.client}
			}
			srv := NewServer(scfg)
			s, c := pair(t, srv, ccfg)
			if _, ok := s.(*Conn); !ok {
				t.Fatalf("TLS 1.3 stayed with crypto/tls (%T)", s)
			}
			exchange(t, s, c, 1000)
			if clientCert && len(s.(*Conn).ConnectionState().PeerCertificates) != 1 {
				t.Fatal("the client certificate is not in the state")
			}
			s2, c2 := pair(t, srv, ccfg)
			exchange(t, s2, c2, 1000)
			if !c2.ConnectionState().DidResume {
				t.Fatal("the second connection did not resume: the ticket did not arrive whole")
			}
			if len(srv.secrets) != 0 {
				t.Fatalf("%d handshakes' secrets kept after they ended", len(srv.secrets))
			}
		})
	}
}

func TestTLS12StaysWithCryptoTLS(t *testing.T) {
	p := newPKI(t)
	ccfg := clientConfig(p)
	ccfg.MaxVersion = tls.VersionTLS12
	s, c := pair(t, NewServer(serverConfig(p)), ccfg)
	if _, ok := s.(*tls.Conn); !ok {
		t.Fatalf("TLS 1.2 gave a %T", s)
	}
	exchange(t, s, c, 50_000)
}

func TestCloseNotifyBothWays(t *testing.T) {
	p := newPKI(t)
	s, c := pair(t, NewServer(serverConfig(p)), clientConfig(p))
	exchange(t, s, c, 10)
	c.CloseWrite()
	if n, err := s.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("after the client's close_notify: %d, %v; want EOF", n, err)
	}
	s.(*Conn).CloseWrite()
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("after the server's close_notify: %d, %v; want EOF", n, err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("a write after close_notify was accepted")
	}
}

// A stream cut without close_notify is not an orderly end.
func TestTruncationIsNotEOF(t *testing.T) {
	p := newPKI(t)
	s, c := pair(t, NewServer(serverConfig(p)), clientConfig(p))
	exchange(t, s, c, 10)
	c.NetConn().Close()
	if _, err := s.Read(make([]byte, 10)); err != io.ErrUnexpectedEOF {
		t.Fatalf("a cut stream read %v, want io.ErrUnexpectedEOF", err)
	}
}

// A record changed on the way is refused, the connection ends with an alert, and the
// client learns why.
func TestTamperedRecordIsRefused(t *testing.T) {
	s, c := connPair(t, tls.TLS_AES_128_GCM_SHA256)
	exchange(t, s, c, 10)
	// Seal a record as the client would, flip a bit, send it raw.
	rec, raw := sealed(c, "hello")
	rec[len(rec)-1] ^= 1
	raw.Write(rec)
	_, err := s.Read(make([]byte, 10))
	if !errors.Is(err, ErrRecord) {
		t.Fatalf("a tampered record read %v, want ErrRecord", err)
	}
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, ErrRecord) {
		t.Fatalf("the client read %v, want the server's alert", err)
	}
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, ErrRecord) {
		t.Fatal("the connection went on after a tampered record")
	}
}

// sealed is the record c would send for data, not sent, and c's socket to send it on.
func sealed(c *Conn, data string) (rec []byte, raw net.Conn) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	raw = c.raw
	c.raw = &capture{}
	c.writeRecord(typeApplication, []byte(data))
	rec = c.raw.(*capture).b
	c.raw = raw
	return rec, raw
}

// capture is a net.Conn that keeps what is written.
type capture struct {
	net.Conn
	b []byte
}

func (c *capture) Write(p []byte) (int, error) { c.b = append(c.b, p...); return len(p), nil }

// A KeyUpdate asking for one back: both sides change keys and data goes on; the
// server's own update after 2^24 records, read by crypto/tls's client.
func TestKeyUpdates(t *testing.T) {
	s, c := connPair(t, tls.TLS_AES_256_GCM_SHA384)
	exchange(t, s, c, 100)
	c.wmu.Lock()
	if err := c.writeRecord(typeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1}); err != nil {
		t.Fatal(err)
	}
	c.out.update()
	c.wmu.Unlock()
	exchange(t, s, c, 100)
	exchange(t, s, c, 100)

	// 2^24 records on: both sides jump there, and the next write updates the key.
	s.wmu.Lock()
	s.out.seq = rekeyAfter
	s.wmu.Unlock()
	c.rmu.Lock()
	c.in.seq = rekeyAfter
	c.rmu.Unlock()
	exchange(t, s, c, 100)
	if s.out.seq != 1 {
		t.Fatalf("after 2^24 records the server's sequence is %d; it did not update its key", s.out.seq)
	}

	// crypto/tls's client follows the server's KeyUpdate.
	p := newPKI(t)
	srv, cli := pair(t, NewServer(serverConfig(p)), clientConfig(p))
	sc := srv.(*Conn)
	sc.wmu.Lock()
	err := sc.updateOwnKey()
	sc.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, srv, cli, 100)
}

func TestTooManyRecordsWithoutData(t *testing.T) {
	s, c := connPair(t, tls.TLS_AES_128_GCM_SHA256)
	go func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		for range maxUseless + 1 {
			c.writeRecord(typeApplication, nil)
		}
	}()
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, ErrRecord) {
		t.Fatalf("%d empty records read %v, want ErrRecord", maxUseless+1, err)
	}
}

// A deadline in the middle of a record does not lose it: the next Read goes on.
func TestDeadlineKeepsThePlace(t *testing.T) {
	s, c := connPair(t, tls.TLS_AES_128_GCM_SHA256)
	rec, raw := sealed(c, "hello")
	raw.Write(rec[:3])
	s.SetReadDeadline(time.Now())
	if _, err := s.Read(make([]byte, 10)); !isTimeout(err) {
		t.Fatalf("read %v, want a timeout", err)
	}
	s.SetReadDeadline(time.Time{})
	raw.Write(rec[3:])
	b := make([]byte, 10)
	n, err := s.Read(b)
	if err != nil || string(b[:n]) != "hello" {
		t.Fatalf("after the timeout: %q, %v", b[:n], err)
	}
}

// Two handshakes under way with one ClientHello random (a client replaying another's):
// neither gets keys from the log, and the entry goes with the last of them.
func TestReplayedRandomStaysWithCryptoTLS(t *testing.T) {
	srv := NewServer(serverConfig(newPKI(t)))
	var random [32]byte
	random[0] = 7
	a := &handshakeConn{s: srv, random: random, registered: true}
	b := &handshakeConn{s: srv, random: random, registered: true}
	srv.register(random)
	srv.register(random)
	line := []byte("CLIENT_TRAFFIC_SECRET_0 07" + strings.Repeat("00", 31) + " " + strings.Repeat("ab", 32) + "\n")
	keyLog{srv}.Write(line)
	keyLog{srv}.Write(bytes.Replace(line, []byte("CLIENT"), []byte("SERVER"), 1))
	if a.secrets() != nil || b.secrets() != nil {
		t.Fatal("a handshake sharing its random got keys")
	}
	a.forget()
	if len(srv.secrets) != 1 {
		t.Fatal("the entry went with the first handshake")
	}
	b.forget()
	if len(srv.secrets) != 0 {
		t.Fatal("the entry outlived both handshakes")
	}
	srv.register(random)
	keyLog{srv}.Write(line)
	keyLog{srv}.Write(bytes.Replace(line, []byte("CLIENT"), []byte("SERVER"), 1))
	if sec := a.secrets(); sec == nil || sec.client == nil || sec.server == nil {
		t.Fatal("a lone handshake did not get its keys")
	}
	a.forget()
}

// An idle connection drops its AEADs' state and builds it again for the next record;
// one in use keeps it.
func TestIdleDropsTheCipherState(t *testing.T) {
	s, c := connPair(t, tls.TLS_AES_128_GCM_SHA256)
	exchange(t, s, c, 10)
	s.idleCheck() // records went just now: kept
	if s.in.aead.Load() == nil || s.out.aead.Load() == nil {
		t.Fatal("a connection in use dropped its cipher state")
	}
	s.lastUse.Store(time.Now().Add(-idleGap).UnixNano())
	s.idleCheck()
	if s.in.aead.Load() != nil || s.out.aead.Load() != nil || s.armed.Load() {
		t.Fatal("an idle connection kept its cipher state")
	}
	exchange(t, s, c, 10_000)
	if s.in.aead.Load() == nil || !s.armed.Load() {
		t.Fatal("the next records did not build the state again and set the check")
	}
}

// A burst of small records is read ahead, several a read, and the buffer goes once
// the last is returned.
func TestBurstOfSmallRecords(t *testing.T) {
	s, c := connPair(t, tls.TLS_CHACHA20_POLY1305_SHA256)
	var want bytes.Buffer
	var recs []byte
	for i := range 500 {
		msg := []byte(strings.Repeat(string(rune('a'+i%26)), 1+i%90))
		want.Write(msg)
		rec, _ := sealed(c, string(msg))
		recs = append(recs, rec...)
	}
	go c.raw.Write(recs) // one write: the records arrive back to back
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the records' data arrived changed")
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.rbuf != nil {
		t.Fatal("the input buffer is held after the burst was read")
	}
}

// Pending tells a server that waits for its socket (package netready) to read on: data
// of a record not yet returned, and records read ahead with an earlier one, are input
// the socket no longer has.
func TestPendingInputTheSocketNoLongerHas(t *testing.T) {
	s, c := connPair(t, tls.TLS_AES_128_GCM_SHA256)
	if s.Pending() {
		t.Fatal("a new connection holds input")
	}
	first, _ := sealed(c, "hello")
	second, _ := sealed(c, "world")
	if _, err := c.raw.Write(append(first, second...)); err != nil { // one write: the second is read ahead
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	if !s.Pending() {
		t.Fatal("three bytes of the first record and the second record are held, but Pending says none")
	}
	rest := make([]byte, 8)
	if _, err := io.ReadFull(s, rest); err != nil || string(buf)+string(rest) != "helloworld" {
		t.Fatalf("read %q %q, %v", buf, rest, err)
	}
	if s.Pending() {
		t.Fatal("everything was returned, but Pending says input is held")
	}
}
