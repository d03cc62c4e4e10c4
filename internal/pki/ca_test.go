package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deviceRule is a name rule as the front door's: the label just below the domain.
func deviceRule(domain string) func(string) string {
	return func(name string) string {
		rest, ok := strings.CutSuffix(name, "."+domain)
		if !ok {
			return ""
		}
		return rest[strings.LastIndex(rest, ".")+1:]
	}
}

// With the front door's name rule, the CA serves the domain and each device's names
// (ALIAS.DEVICE.DOMAIN needs the device's own wildcard), and nothing outside the domain.
func TestLocalCAIssuesVerifiableCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "devices.example.com", deviceRule("devices.example.com"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, CADir, CAKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode %v, %v", fi.Mode().Perm(), err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	for _, name := range []string{"devices.example.com", "dev42.devices.example.com", "cam.dev42.devices.example.com", "other.example.org"} {
		c, err := ca.GetCertificate(&tls.ClientHelloInfo{ServerName: name})
		if err != nil {
			t.Fatal(err)
		}
		// The leaf alone goes out: clients hold the root (issue 55.3).
		if len(c.Certificate) != 1 {
			t.Fatalf("%s: a chain of %d certificates is sent, want the leaf alone", name, len(c.Certificate))
		}
		_, err = c.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name})
		if name == "other.example.org" {
			if err == nil {
				t.Error("certificate valid for a name outside the domain")
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Same CA on the next start; another domain is refused with a way out.
	again, err := LoadOrCreateCA(dir, "devices.example.com", nil, slog.New(slog.DiscardHandler))
	if err != nil || string(again.CertPEM()) != string(ca.CertPEM()) {
		t.Fatalf("CA not reused: %v", err)
	}
	if _, err := LoadOrCreateCA(dir, "other.example.org", nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "limited to devices.example.com") {
		t.Fatalf("domain change: %v", err)
	}
}

// The name constraint means that even a leaf the CA signed for another domain is not
// trusted: users who trust the CA trust it for the front door's names only.
func TestLocalCANameConstraint(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "devices.example.com", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.issue([]string{"bank.example.org"})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "bank.example.org"}); err == nil {
		t.Fatal("the local CA's signature is trusted outside its domain")
	}
}

func writePair(t *testing.T, dir, cn string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
}

func TestOperatorCertificateReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir, "*.first.example")
	fc, err := newFileCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, _ := fc.GetCertificate(nil)
		return c.Leaf.Subject.CommonName
	}
	if cn() != "*.first.example" {
		t.Fatal(cn())
	}
	writePair(t, dir, "*.second.example")
	os.Chtimes(filepath.Join(dir, "tls.crt"), time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	fc.checked = time.Time{} // skip the two-second throttle
	if cn() != "*.second.example" {
		t.Fatalf("after renewal: %s", cn())
	}
	// A broken file (half-written renewal) keeps the working certificate.
	os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("garbage"), 0o644)
	fc.checked = time.Time{}
	if cn() != "*.second.example" {
		t.Fatalf("after a broken write: %s", cn())
	}
}

// The local CA can vouch for DNS names below its domain only: a leaf it signed that also
// names an IP address, an e-mail address or a URI does not verify.
func TestLocalCAExcludesOtherNameTypes(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "devices.example.com", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	u, _ := url.Parse("https://bank.example.org/")
	for name, tweak := range map[string]func(*x509.Certificate){
		"none":  func(*x509.Certificate) {},
		"ip":    func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.ParseIP("192.0.2.1")} },
		"ipv6":  func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.ParseIP("2001:db8::1")} },
		"email": func(c *x509.Certificate) { c.EmailAddresses = []string{"ceo@bank.example.org"} },
		"uri":   func(c *x509.Certificate) { c.URIs = []*url.URL{u} },
	} {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: serial(), DNSNames: []string{"dev1.devices.example.com"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		tweak(tmpl)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(der)
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "dev1.devices.example.com"})
		if name == "none" && err != nil {
			t.Fatalf("a plain DNS leaf does not verify: %v", err)
		}
		if name != "none" && err == nil {
			t.Errorf("a leaf with an %s name verified under the local CA", name)
		}
	}
}

func TestLocalCAKeyReadableByOthersRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOrCreateCA(dir, "devices.example.com", nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, CADir, CAKeyFile), 0o640)
	if _, err := LoadOrCreateCA(dir, "devices.example.com", nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable CA key: %v", err)
	}
}
