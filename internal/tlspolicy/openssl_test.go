package tlspolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The OpenSSL names this package accepts are OpenSSL's own: every one the installed
// OpenSSL 3.0 knows maps to the same IANA name, and every default suite is among them.
// (RC4 and 3DES suites are not compiled into Debian's OpenSSL 3.0.)
func TestOpenSSLNamesAgreeWithOpenSSL(t *testing.T) {
	out, err := exec.Command("openssl", "ciphers", "-stdname", "ALL:COMPLEMENTOFALL").Output()
	if err != nil {
		t.Fatalf("openssl ciphers (installed by scripts/setup.sh): %v", err)
	}
	theirs := map[string]string{} // OpenSSL name -> IANA name
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "-" {
			theirs[f[2]] = f[0]
		}
	}
	checked := 0
	for ours, iana := range openSSLNames {
		if got, ok := theirs[ours]; ok {
			checked++
			if got != iana {
				t.Errorf("%s: OpenSSL says %s, we say %s", ours, got, iana)
			}
		}
	}
	for _, s := range tls.CipherSuites() {
		if secureSuite(s) {
			found := false
			for ours, iana := range openSSLNames {
				if iana == s.Name && theirs[ours] == iana {
					found = true
				}
			}
			if !found {
				t.Errorf("default suite %s has no OpenSSL name OpenSSL agrees with", s.Name)
			}
		}
	}
	if checked < 15 {
		t.Fatalf("only %d of our names are in OpenSSL's list", checked)
	}
}

// serve runs a Go TLS server with p and an ECDSA P-256 certificate on loopback.
func serve(t *testing.T, p Policy) string {
	t.Helper()
	c, err := p.Config()
	if err != nil {
		t.Fatal(err)
	}
	return serveConfig(t, c)
}

// serveConfig runs a Go TLS server with c and an ECDSA P-256 certificate on loopback;
// each connection gets "ok\n" after the handshake.
func serveConfig(t *testing.T, c *tls.Config) string {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: k}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if tc := conn.(*tls.Conn); tc.Handshake() == nil {
					tc.Write([]byte("ok\n"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// sClient runs openssl s_client with args and reports whether the handshake completed.
func sClient(t *testing.T, addr string, args ...string) bool {
	t.Helper()
	cmd := exec.Command("openssl", append([]string{"s_client", "-connect", addr, "-brief"}, args...)...)
	cmd.Stdin = strings.NewReader("")
	out, _ := cmd.CombinedOutput()
	return strings.Contains(string(out), "CONNECTION ESTABLISHED")
}

// A real client (OpenSSL) sees the policy: the default refuses a CBC-SHA1 suite the Go
// default would take, and TLS 1.1; allowed suites and groups handshake; an X25519-only
// listener refuses a client offering only P-256.
func TestOpenSSLClientSeesThePolicy(t *testing.T) {
	def := serve(t, Policy{})
	if !sClient(t, def, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256") {
		t.Error("default policy refused ECDHE-ECDSA-AES128-GCM-SHA256")
	}
	if sClient(t, def, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA") {
		t.Error("default policy accepted ECDHE-ECDSA-AES128-SHA (CBC, SHA-1)")
	}
	if sClient(t, def, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0") {
		t.Error("default policy accepted TLS 1.1")
	}
	if !sClient(t, def, "-tls1_3") {
		t.Error("default policy refused TLS 1.3")
	}
	// The default groups: P-384 yes, P-521 only where an operator lists it (issue 55.4).
	if !sClient(t, def, "-groups", "P-384") || sClient(t, def, "-groups", "P-521") {
		t.Error("the default groups: P-384 must work and P-521 alone must not")
	}
	if p521 := serve(t, Policy{Groups: []string{"X25519", "P-521"}}); !sClient(t, p521, "-groups", "P-521") {
		t.Error("P-521 listed by the operator was refused")
	}
	x := serve(t, Policy{Groups: []string{"X25519"}})
	if !sClient(t, x, "-groups", "X25519") || sClient(t, x, "-groups", "P-256") {
		t.Error("an X25519-only listener: X25519 must work and P-256 alone must not")
	}
	// The refusals above are the policy's, not the client's: allowed, the same clients
	// connect.
	weak := serve(t, Policy{MinVersion: "1.1", Suites: []string{"ECDHE-ECDSA-AES128-SHA"}, AllowInsecure: true})
	if !sClient(t, weak, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA") {
		t.Error("allow_insecure with ECDHE-ECDSA-AES128-SHA listed did not offer it")
	}
	if !sClient(t, weak, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0") {
		t.Error("allow_insecure with min_version 1.1 refused TLS 1.1")
	}
}
