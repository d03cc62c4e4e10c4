package scan

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/dtls/v3"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// dtlsServer is a real DTLS 1.2 server (pion/dtls) on a free loopback UDP port that
// completes handshakes and closes; opts add to its certificate.
func dtlsServer(t *testing.T, opts ...dtls.ServerOption) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"dtls.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	l, err := dtls.ListenWithOptions("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, append([]dtls.ServerOption{dtls.WithCertificates(cert)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// pion handshakes on demand; a probe never finishes, so each waits alone.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				c.(*dtls.Conn).HandshakeContext(ctx)
				c.Close()
			}()
		}
	}()
	return l.Addr().String()
}

// A DTLS 1.2 server that verifies addresses with a cookie: its version and suites are
// found, the cookie exchange is good, DTLS 1.0 is not
// claimed.
func TestScanDTLSWithCookie(t *testing.T) {
	addr := dtlsServer(t, dtls.WithCipherSuites(dtls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, dtls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret))
	r := ScanDTLS(context.Background(), addr, Options{Timeout: 2 * time.Second})
	if r.Error != "" {
		t.Fatalf("scan: %s", r.Error)
	}
	if !slices.Equal(r.Versions, []string{"DTLS 1.2"}) {
		t.Errorf("versions %v, want DTLS 1.2 alone", r.Versions)
	}
	// pion takes the client's order, so the order found is the probe's (and the scan
	// says so); the set is the server's.
	if got := slices.Sorted(slices.Values(r.Suites["DTLS 1.2"])); !slices.Equal(got, []string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-SHA"}) {
		t.Errorf("suites %v, want the server's two", got)
	}
	if !has(findings(r, Info, "suites"), "DTLS 1.2, in the order of the scan's offers") {
		t.Errorf("suites listed in the server's order, which pion does not have: %+v", r.Findings)
	}
	if f := findings(r, Good, "cookie"); len(f) != 1 {
		t.Errorf("cookie findings: %+v", r.Findings)
	}
	if f := findings(r, Good, "extended_master_secret"); len(f) != 1 {
		t.Errorf("extended master secret: %+v", r.Findings)
	}
	// The CBC suite is reported weak, the GCM one is not; and taking the client's order.
	if weak := findings(r, Weak, "suites"); len(weak) != 2 || !has(weak, "ECDHE-ECDSA-AES256-SHA (DTLS 1.2)") ||
		!has(weak, "DTLS 1.2: the server takes the client's order of preference") {
		t.Errorf("weak suites: %v", weak)
	}
	if r.Worst() != Weak {
		t.Errorf("worst finding %v, want weak (the CBC suite)", r.Worst())
	}
}

// Without a cookie exchange the server's whole first flight goes to whatever address
// a ClientHello claims: reported with the amplification it gives.
func TestScanDTLSWithoutCookie(t *testing.T) {
	addr := dtlsServer(t, dtls.WithInsecureSkipVerifyHello(true))
	r := ScanDTLS(context.Background(), addr, Options{Timeout: 2 * time.Second})
	if r.Error != "" {
		t.Fatalf("scan: %s", r.Error)
	}
	if f := append(findings(r, Weak, "cookie"), findings(r, Info, "cookie")...); len(f) != 1 || !has(f, "no cookie exchange") {
		t.Fatalf("cookie findings: %+v", r.Findings)
	}
}

// Nothing on the port: a clear error, no findings.
func TestScanDTLSNothingListening(t *testing.T) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	r := ScanDTLS(context.Background(), addr, Options{Timeout: 500 * time.Millisecond})
	if r.Error == "" || len(r.Findings) != 0 {
		t.Fatalf("scan of a closed port: %+v", r)
	}
}

// A fragmented ServerHello is reassembled; a HelloVerifyRequest gives its cookie; an
// alert is an error.
func TestDTLSAssembler(t *testing.T) {
	sh := []byte{0xfe, 0xfd}
	sh = append(sh, make([]byte, 32)...)
	sh = append(sh, 0, 0xc0, 0x2b, 0)
	frag := func(seq uint16, off, n int, body []byte) []byte {
		total := len(body)
		hs := []byte{2, byte(total >> 16), byte(total >> 8), byte(total), byte(seq >> 8), byte(seq), byte(off >> 16), byte(off >> 8), byte(off), byte(n >> 16), byte(n >> 8), byte(n)}
		hs = append(hs, body[off:off+n]...)
		return append([]byte{22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
	}
	var a dtlsAssembler
	if r, err := a.add(frag(1, 0, 10, sh)); r != nil || err != nil {
		t.Fatalf("half a ServerHello: %+v %v", r, err)
	}
	r, err := a.add(frag(1, 10, len(sh)-10, sh))
	if err != nil || r == nil || r.hello == nil || r.hello.suite != 0xc02b || r.hello.version != VersionDTLS12 {
		t.Fatalf("reassembled: %+v %v", r, err)
	}
	hvr := []byte{22, 0xfe, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17, 3, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5, 0xfe, 0xff, 2, 0xaa, 0xbb}
	a = dtlsAssembler{}
	if r, err := a.add(hvr); err != nil || r == nil || !bytes.Equal(r.cookie, []byte{0xaa, 0xbb}) {
		t.Fatalf("HelloVerifyRequest: %+v %v", r, err)
	}
	a = dtlsAssembler{}
	var al alert
	if _, err := a.add([]byte{21, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 70}); !errors.As(err, &al) || al.desc != 70 {
		t.Fatalf("alert: %v", err)
	}
}

// FuzzDTLSReply: whatever datagrams come back, the assembler neither panics nor
// returns a reply and an error at once. Seeds in testdata/fuzz/FuzzDTLSReply too.
func FuzzDTLSReply(f *testing.F) {
	f.Add([]byte{22, 0xfe, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17, 3, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5, 0xfe, 0xff, 2, 0xaa, 0xbb})
	f.Add([]byte{21, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 70})
	first, _ := hello{version: VersionDTLS12, suites: []uint16{0xc02b}}.marshalDTLS(nil, 0)
	f.Add(first)
	f.Fuzz(func(t *testing.T, b []byte) {
		var a dtlsAssembler
		for len(b) > 0 {
			n := min(len(b), 1+int(b[0])%200)
			r, err := a.add(b[:n])
			if r != nil && err != nil {
				t.Fatalf("a reply and an error: %+v %v", r, err)
			}
			if r != nil && r.hello == nil && r.cookie == nil {
				t.Fatal("an empty reply")
			}
			b = b[n:]
		}
	})
}

// OpenSSL's DTLS server with everything OpenSSL 3.0 has at security level 0 and a
// cookie exchange (-listen): both versions, the anonymous suites found insecure, the
// cookie good. OpenSSL serves one peer at a time: the scan gets through its probes only
// because each ends its handshake with an alert.
func TestScanOpenSSLDTLSServer(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not installed: run scripts/setup.sh")
	}
	dir := t.TempDir()
	cert, key, _, err := lab.WriteServerCert(dir, "weak", true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	// -quiet: s_server then ignores the end of its standard input (/dev/null), and
	// prints no ACCEPT line: the test waits for its socket instead.
	p, err := lab.StartProc("s_server", nil, "openssl", "s_server", "-dtls", "-listen", "-quiet", "-accept", addr,
		"-cert", cert, "-key", key, "-cipher", "ALL:COMPLEMENTOFALL:@SECLEVEL=0", "-min_protocol", "DTLSv1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := waitUDPBound(ctx, addr); err != nil {
		t.Fatalf("s_server: %v\n%s", err, p.StderrTail())
	}
	r := ScanDTLS(ctx, addr, Options{Timeout: 5 * time.Second})
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if !slices.Equal(r.Versions, []string{"DTLS 1.2", "DTLS 1.0"}) {
		t.Errorf("versions %v", r.Versions)
	}
	if !has(findings(r, Weak, "versions"), "DTLS 1.0 accepted") || !has(findings(r, Good, "cookie"), "cookie") {
		t.Errorf("findings: %+v", r.Findings)
	}
	if !has(findings(r, Insecure, "suites"), "ADH-AES128-SHA (DTLS 1.2, DTLS 1.0): no authentication") {
		t.Errorf("insecure suites: %v", findings(r, Insecure, "suites"))
	}
	// Every suite once per version.
	for v, list := range r.Suites {
		if len(slices.Compact(slices.Sorted(slices.Values(list)))) != len(list) {
			t.Errorf("%s lists a suite twice: %v", v, list)
		}
	}
}

// waitUDPBound returns once a socket is bound to addr's UDP port (the kernel's table,
// /proc/net/udp), as a readiness signal for a server that prints none.
func waitUDPBound(ctx context.Context, addr string) error {
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	want := fmt.Sprintf(":%04X ", n)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile("/proc/net/udp")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 1 && strings.HasSuffix(f[1]+" ", want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing bound to UDP %s: %w", addr, ctx.Err())
		case <-tick.C:
		}
	}
}
