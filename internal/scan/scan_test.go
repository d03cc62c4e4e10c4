package scan

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/pki"
)

func findings(r *Report, sev Severity, check string) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Severity == sev && (check == "" || f.Check == check) {
			out = append(out, f.Detail)
		}
	}
	return out
}

func has(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A deliberately weak OpenSSL server (TLS 1.0 and up, every suite OpenSSL 3.0 has at
// security level 0): the scan finds the old versions, the anonymous and NULL suites,
// the RSA key exchange and CBC suites, and that it still serves after malformed input.
func TestScanWeakOpenSSLServer(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not installed: run scripts/setup.sh")
	}
	dir := t.TempDir()
	cert, key, _, err := lab.WriteServerCert(dir, "weak", true)
	if err != nil {
		t.Fatal(err)
	}
	port, err := lab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// A 1024-bit DH group for the DHE suites (a safe prime: OpenSSL 3 ignores DSA-style
	// parameters and picks its own 2048-bit group).
	dh := filepath.Join(dir, "dh.pem")
	if out, err := exec.Command("openssl", "dhparam", "-out", dh, "1024").CombinedOutput(); err != nil {
		t.Fatalf("openssl dhparam: %v\n%s", err, out)
	}
	p, err := lab.StartProc("s_server", nil, "openssl", "s_server", "-accept", addr, "-cert", cert, "-key", key,
		"-cipher", "ALL:COMPLEMENTOFALL:@SECLEVEL=0", "-min_protocol", "TLSv1", "-dhparam", dh, "-www")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.ReadLine(ctx, "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	o := Options{Name: "lab"}
	r := ScanTLS(ctx, addr, "tls", nil, o)
	Robustness(ctx, r, addr, o)
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	weak, insecure := findings(r, Weak, ""), findings(r, Insecure, "")
	// OpenSSL's s_server takes the client's order unless told -serverpref.
	for _, want := range []string{"TLS 1.0 accepted", "TLS 1.1 accepted", "DHE group of 1024 bits", "AES128-SHA (1.0, 1.1, 1.2): RSA key exchange", "ECDHE-RSA-AES128-SHA (1.0, 1.1, 1.2): CBC", "chain not trusted",
		"TLS 1.2: the server takes the client's order of preference"} {
		if !has(weak, want) {
			t.Errorf("weak finding %q missing: %q", want, weak)
		}
	}
	for _, want := range []string{"ADH-AES128-SHA", "NULL-SHA256 (1.2): no encryption"} {
		if !has(insecure, want) {
			t.Errorf("insecure finding %q missing: %q", want, insecure)
		}
	}
	if !has(findings(r, Good, "robustness"), "still serves") || !has(findings(r, Good, "downgrade"), "TLS_FALLBACK_SCSV honoured") {
		t.Errorf("findings: %+v", r.Findings)
	}
	if r.Worst() != Insecure {
		t.Errorf("worst %v", r.Worst())
	}
	compareWithSSLScan(t, addr, r)
}

// compareWithSSLScan checks the scan against Debian's sslscan (a reference tool) on the
// same server: the same versions, the same suites per version, the same TLS 1.3 groups.
func compareWithSSLScan(t *testing.T, addr string, r *Report) {
	t.Helper()
	xmlFile := filepath.Join(t.TempDir(), "sslscan.xml")
	if out, err := exec.Command("sslscan", "--no-colour", "--xml="+xmlFile, addr).CombinedOutput(); err != nil {
		t.Fatalf("sslscan: %v\n%s", err, out)
	}
	b, err := os.ReadFile(xmlFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Protocols []struct {
			Type    string `xml:"type,attr"`
			Version string `xml:"version,attr"`
			Enabled string `xml:"enabled,attr"`
		} `xml:"ssltest>protocol"`
		Ciphers []struct {
			Status, SSLVersion, Cipher string `xml:",attr"`
		} `xml:"ssltest>cipher"`
		Groups []struct {
			SSLVersion string `xml:"sslversion,attr"`
			ID         string `xml:"id,attr"`
		} `xml:"ssltest>group"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var theirVersions []string
	for _, p := range doc.Protocols {
		if p.Enabled == "1" {
			theirVersions = append(theirVersions, map[string]string{"ssl": "SSL ", "tls": "TLS "}[p.Type]+map[string]string{"3": "3.0"}[p.Version]+strings.TrimPrefix(p.Version, "3"))
		}
	}
	if !slices.Equal(theirVersions, r.Versions) {
		t.Errorf("versions: sslscan %v, ours %v", theirVersions, r.Versions)
	}
	theirs := map[string][]string{}
	for _, c := range doc.Ciphers {
		if c.Status == "accepted" || c.Status == "preferred" {
			v := "TLS " + strings.TrimPrefix(c.SSLVersion, "TLSv")
			theirs[v] = append(theirs[v], c.Cipher)
		}
	}
	for v, list := range theirs {
		ours := slices.Clone(r.Suites[v])
		slices.Sort(list)
		slices.Sort(ours)
		if !slices.Equal(list, ours) {
			t.Errorf("%s suites differ:\n sslscan %v\n ours    %v", v, list, ours)
		}
	}
	var theirGroups []string
	for _, g := range doc.Groups {
		if g.SSLVersion == "TLSv1.3" {
			var id uint16
			fmt.Sscanf(g.ID, "0x%x", &id)
			theirGroups = append(theirGroups, GroupName(id))
		}
	}
	ourGroups := slices.Clone(r.Groups)
	slices.Sort(theirGroups)
	slices.Sort(ourGroups)
	if !slices.Equal(theirGroups, ourGroups) {
		t.Errorf("TLS 1.3 groups: sslscan %v, ours %v", theirGroups, ourGroups)
	}
}

// Go's TLS server as the hub configures it by default: nothing weak, every TLS 1.3
// group found, the certificate trusted and named, sessions resumed.
func TestScanGoServerDefaults(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, client, err := lab.WriteServerCert(dir, "good", false)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}})
	if err != nil {
		t.Fatal(err)
	}
	serveTLS(t, ln, func(c *tls.Conn) {
		c.Write([]byte("hello"))
		c.Read(make([]byte, 1))
	})
	ctx := context.Background()
	o := Options{Name: "lab", Roots: client.RootCAs}
	r := ScanTLS(ctx, ln.Addr().String(), "tls", nil, o)
	Robustness(ctx, r, ln.Addr().String(), o)
	if w := r.Worst(); w >= Weak {
		t.Fatalf("weak findings on Go's defaults: %+v", r.Findings)
	}
	// Go's server has an order of its own (and ChaCha20 is not used to find it out).
	for check, want := range map[string]string{"groups": "X25519 P-256 P-384 P-521 X25519MLKEM768", "certificate": "chain trusted", "resumption": "sessions resume",
		"suites": "TLS 1.2, in the server's order: ECDHE-ECDSA-AES128-GCM-SHA256"} {
		all := append(findings(r, Info, check), findings(r, Good, check)...)
		if !has(all, want) {
			t.Errorf("%s: %q missing in %q", check, want, all)
		}
	}
	if all := findings(r, Info, "certificate"); has(all, "carries its root") {
		t.Errorf("a leaf alone reported as carrying its root: %q", all)
	}
	// The wrong name is insecure, and an unknown root weak.
	r = ScanTLS(ctx, ln.Addr().String(), "tls", nil, Options{Name: "other.test", Roots: x509.NewCertPool()})
	if !has(findings(r, Insecure, "certificate"), "does not name other.test") || !has(findings(r, Weak, "certificate"), "not trusted") {
		t.Errorf("certificate findings: %+v", r.Findings)
	}
}

// serveTLS accepts on ln until the test ends: each connection's handshake, then then
// (if set), then its close.
func serveTLS(t *testing.T, ln net.Listener, then func(*tls.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil && then != nil {
					then(c.(*tls.Conn))
				}
			}()
		}
	}()
}

// A server that sends its self-signed root with the leaf: the scan says so, with the
// root's size (issue 55.3, as sslyze warns); the chain is still trusted.
func TestScanReportsARootInTheChain(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, "devices.test", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.GetCertificate(&tls.ClientHelloInfo{ServerName: "devices.test"})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(ca.CertPEM())
	withRoot := *leaf
	withRoot.Certificate = [][]byte{leaf.Certificate[0], block.Bytes}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{withRoot}})
	if err != nil {
		t.Fatal(err)
	}
	serveTLS(t, ln, nil)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	r := ScanTLS(context.Background(), ln.Addr().String(), "tls", nil, Options{Name: "devices.test", Roots: roots})
	info := findings(r, Info, "certificate")
	if !has(info, "the chain carries its root") || !has(info, fmt.Sprintf("(%d bytes on every full handshake", len(block.Bytes))) {
		t.Fatalf("no finding on the root in the chain: %q", info)
	}
	if !has(findings(r, Good, "certificate"), "chain trusted") {
		t.Fatalf("the chain with its root is still trusted: %+v", r.Findings)
	}
}

// Nothing listening is an error of the scan, not a finding.
func TestScanNothingListening(t *testing.T) {
	port, _ := lab.FreePort()
	r := ScanTLS(context.Background(), "127.0.0.1:"+strconv.Itoa(port), "tls", nil, Options{})
	if r.Error == "" || r.Worst() != Insecure {
		t.Fatalf("%+v", r)
	}
}

// A plain TCP port (an HTTP server here) is not a TLS endpoint: an error, with no
// finding beside it that would rate it as a weak TLS one (issue 55.5).
func TestScanPlainTCPPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	}()
	r := ScanTLS(context.Background(), ln.Addr().String(), "tls", nil, Options{})
	if !strings.Contains(r.Error, "not a TLS endpoint") || len(r.Findings) != 0 {
		t.Fatalf("a plain port: error %q, findings %+v", r.Error, r.Findings)
	}
}

// FuzzDHPrimeBits: whatever follows a ServerHello, the reader returns a size or an error.
func FuzzDHPrimeBits(f *testing.F) {
	ske := []byte{12, 0, 0, 9, 0, 3, 0x80, 0, 1, 0, 1, 2, 0}
	f.Add(append([]byte{22, 3, 3, 0, byte(len(ske))}, ske...))
	f.Add([]byte{22, 3, 3, 0, 4, 14, 0, 0, 0})
	f.Add([]byte{22, 3, 3, 0, 6, 12, 0, 0, 2, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		bits, err := dhPrimeBits(&handshakeReader{r: bytes.NewReader(b)})
		if err == nil && bits <= 0 {
			t.Fatalf("%d bits and no error", bits)
		}
	})
}

// FuzzReadReply: whatever a server sends, the reader returns a ServerHello, an alert
// or an error, and never reads past its bound.
func FuzzReadReply(f *testing.F) {
	good, _ := hello{version: VersionTLS12, suites: []uint16{0xc02b}}.marshal()
	sh := []byte{2, 0, 0, 42, 3, 3}
	sh = append(sh, make([]byte, 32)...)
	sh = append(sh, 0, 0xc0, 0x2b, 0, 0, 0)
	sh[3] = byte(len(sh) - 4)
	f.Add(append([]byte{22, 3, 3, 0, byte(len(sh))}, sh...))
	f.Add([]byte{21, 3, 3, 0, 2, 2, 40})
	f.Add(good)
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		sh, err := readReply(r)
		if err == nil && sh == nil {
			t.Fatal("no ServerHello and no error")
		}
	})
}

// A stock OpenSSH server told to offer legacy algorithms: the scan finds each, and the
// strict key exchange it offers. (Root: sshd's privilege separation; CI runs as root.)
func TestScanWeakSSHD(t *testing.T) {
	addr, port := startSSHD(t, "Ciphers +aes128-cbc\nMACs +hmac-sha1\nKexAlgorithms +diffie-hellman-group14-sha1\n", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := ScanSSH(ctx, addr, Options{})
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	weak := findings(r, Weak, "")
	for _, want := range []string{"aes128-cbc: CBC", "hmac-sha1: SHA-1", "diffie-hellman-group14-sha1: SHA-1"} {
		if !has(weak, want) {
			t.Errorf("%q missing in %q", want, weak)
		}
	}
	if !has(findings(r, Good, "kex"), "strict key exchange") || !has(findings(r, Info, "banner"), "OpenSSH") {
		t.Errorf("findings %+v", r.Findings)
	}
	// ssh-audit (the reference tool, Debian's 2.5.0) on the same server: every algorithm
	// it warns about or fails is in a finding of ours, but for those docs/scan.md explains
	// (post-quantum sntrup761 and the strict-kex marker, which it does not know).
	out, err := exec.Command("ssh-audit", "-n", "-l", "warn", "-p", strconv.Itoa(port), "127.0.0.1").CombinedOutput()
	if len(out) == 0 {
		t.Fatalf("ssh-audit: %v", err)
	}
	var all []string
	for _, f := range r.Findings {
		if f.Check != "banner" && !strings.HasPrefix(f.Detail, "offered:") {
			all = append(all, f.Detail)
		}
	}
	explained := []string{"sntrup761x25519-sha512", "sntrup761x25519-sha512@openssh.com", "kex-strict-s-v00@openssh.com"}
	flagged := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "(kex)") && !strings.HasPrefix(line, "(key)") && !strings.HasPrefix(line, "(enc)") && !strings.HasPrefix(line, "(mac)") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || slices.Contains(explained, fields[1]) {
			continue
		}
		flagged++
		if !has(all, fields[1]+":") {
			t.Errorf("ssh-audit flags %s (%s); the scan does not", fields[1], line)
		}
	}
	if flagged < 5 {
		t.Errorf("ssh-audit flagged %d algorithms, expected the weak ones at least:\n%s", flagged, out)
	}
}

// startSSHD runs a stock sshd on a free loopback port with the lab's configuration plus
// extra; prepare, if set, changes its folder first (its host key). It returns the
// address and the port.
func startSSHD(t *testing.T, extra string, prepare func(dir string)) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("sshd needs root (privilege separation); CI runs as root")
	}
	dir := t.TempDir()
	port, err := lab.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cfg, _, _, err := lab.PrepareSSHD(dir, addr, extra)
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(dir)
	}
	p, err := lab.StartProc("sshd", nil, "/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lab.WaitTCP(ctx, p, addr); err != nil {
		t.Fatal(err)
	}
	return addr, port
}

// DHEat (issue 55.2): a stock OpenSSH 9.2 told to admit thousands of unauthenticated
// connections (the lab's MaxStartups) completes key exchanges from one source as fast as
// it can compute them; the scan reports it when asked (--dheat), and notes the key
// exchanges that are not post-quantum beside the hybrid it offers.
func TestScanSSHDHEat(t *testing.T) {
	addr, _ := startSSHD(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := ScanSSH(ctx, addr, Options{}); has(findings(r, Weak, "kex"), "DHEat") || has(findings(r, Good, "kex"), "throttled") {
		t.Fatalf("the rate was measured without being asked for: %+v", r.Findings)
	}
	r := ScanSSH(ctx, addr, Options{KexRate: true})
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	// The rate itself depends on the machine: it is reported, and rated by addKexRate
	// (TestKexRateRating), not asserted here.
	if all := append(findings(r, Weak, "kex"), findings(r, Good, "kex")...); !has(all, "unauthenticated key exchanges") || !has(all, "from one source") {
		t.Errorf("no DHEat finding: %+v", r.Findings)
	}
	if !has(findings(r, Info, "kex"), "not post-quantum, beside the hybrid: curve25519-sha256 ") {
		t.Errorf("no note on the classical key exchanges beside sntrup761: %+v", findings(r, Info, "kex"))
	}
}

// Above 20 unauthenticated key exchanges a second from one source a server is open to
// DHEat; at or below, it throttles.
func TestKexRateRating(t *testing.T) {
	for _, c := range []struct {
		rate float64
		sev  Severity
		want string
	}{{250, Weak, "DHEat (CVE-2002-20001): 250 unauthenticated key exchanges a second"}, {9.3, Good, "throttled: 9.3 a second"}} {
		r := &Report{}
		addKexRate(r, c.rate, 0)
		if !has(findings(r, c.sev, "kex"), c.want) {
			t.Errorf("rate %v: %+v", c.rate, r.Findings)
		}
	}
}

// A stock OpenSSH server with a 1024-bit RSA host key behind a good algorithm name
// (rsa-sha2-512): the scan rates the key itself, as ssh-audit does (issue 55.1), and
// says which key it read.
func TestScanSSHHostKeySize(t *testing.T) {
	addr, port := startSSHD(t, "", func(dir string) {
		key := filepath.Join(dir, "host_key")
		os.Remove(key)
		os.Remove(key + ".pub")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "rsa", "-b", "1024", "-N", "", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v %s", err, out)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := ScanSSH(ctx, addr, Options{})
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if bad := findings(r, Insecure, "hostkey"); !has(bad, "RSA 1024 bits: under 2048 bits") || !has(bad, "(key SHA256:") {
		t.Fatalf("a 1024-bit RSA host key: %+v", r.Findings)
	}
	if r.Worst() < Insecure {
		t.Fatalf("the scan's worst finding is %v", r.Worst())
	}
	// ssh-audit, the reference, fails the same key.
	out, _ := exec.Command("ssh-audit", "-n", "-l", "warn", "-p", strconv.Itoa(port), "127.0.0.1").CombinedOutput()
	if !strings.Contains(string(out), "(key) rsa-sha2-512 (1024-bit)") || !strings.Contains(string(out), "[fail] using small 1024-bit modulus") {
		t.Fatalf("ssh-audit on the same server:\n%s", out)
	}
}
