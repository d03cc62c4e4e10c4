package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/devicecert"
)

// Files of the local CA in DATA/frontdoor (the folder keeps the name it had when only the
// front door used the CA, so existing hubs keep their CA and the trust users gave it).
const (
	CADir      = "frontdoor"
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// leafLifetime of certificates the local CA issues; they live in memory only and are
// renewed when a third of the lifetime is left.
const leafLifetime = 90 * 24 * time.Hour

// CA is the hub's local certificate authority: the front door's and the MQTT listener's
// server certificates, and the devices' client certificates. Its certificate carries a
// name constraint for the front-door domain, so a user who trusts it trusts it for
// nothing else.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// leafKey signs every leaf's TLS handshakes: one key per process keeps issuing cheap.
	leafKey *ecdsa.PrivateKey

	mu      sync.Mutex
	base    *tls.Certificate            // DOMAIN and *.DOMAIN
	devices map[string]*tls.Certificate // DEVICE.DOMAIN and *.DEVICE.DOMAIN
	domain  string
	// sub is the name rule: the label N whose N.DOMAIN and *.N.DOMAIN serve a TLS server
	// name, or "" for DOMAIN and *.DOMAIN.
	sub func(serverName string) string
}

// LoadOrCreateCA loads the CA in dataDir/frontdoor, creating it (key 0600) on first use.
// sub is the name rule for server certificates (GetCertificate): it names the label N
// under the domain whose wildcard serves a TLS server name (the front door passes the
// device of ALIAS.DEVICE.DOMAIN), "" for the domain's own; nil serves the domain's own
// certificate for every name.
func LoadOrCreateCA(dataDir, domain string, sub func(serverName string) string, log *slog.Logger) (*CA, error) {
	dir := filepath.Join(dataDir, CADir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	ca, err := loadCA(certPath, keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		if ca, err = createCA(certPath, keyPath, domain); err == nil {
			log.Info("created the front door's local CA; users trust it with 'iotsafe frontdoor ca'", "cert", certPath)
		}
	}
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ca.cert.PermittedDNSDomains, domain) {
		return nil, fmt.Errorf("pki: the local CA in %s is limited to %s, not %s: move %s and %s away to create a new one (users must then trust the new CA)",
			dir, strings.Join(ca.cert.PermittedDNSDomains, ", "), domain, CACertFile, CAKeyFile)
	}
	if ca.leafKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	ca.domain, ca.devices, ca.sub = domain, map[string]*tls.Certificate{}, sub
	return ca, nil
}

func loadCA(certPath, keyPath string) (*CA, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(keyPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("pki: the local CA's key %s has mode %v: it must not be readable by group or others (chmod 600 %s)", keyPath, fi.Mode().Perm(), keyPath)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		return nil, fmt.Errorf("pki: local CA in %s: %w", filepath.Dir(certPath), err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || pair.Leaf == nil {
		return nil, fmt.Errorf("pki: local CA in %s: unusable key", filepath.Dir(certPath))
	}
	return &CA{cert: pair.Leaf, key: signer}, nil
}

func createCA(certPath, keyPath, domain string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "iotsafe front door CA (" + host + ")", Organization: []string{"iotsafe"}},
		NotBefore:                   time.Now().Add(-time.Hour),
		NotAfter:                    time.Now().AddDate(10, 0, 0),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         []string{domain},
		// Only DNS names below the domain: no IP address at all, and e-mail and URI names
		// only under "invalid" (RFC 6761), a name nobody can hold.
		ExcludedIPRanges:        []*net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
		PermittedEmailAddresses: []string{"invalid"},
		PermittedURIDomains:     []string{"invalid"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	// The key first, 0600 from its first byte; the certificate is public.
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key}, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: %w", err)
	}
	return f.Close()
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// CertPEM is the CA certificate users add to their trust store.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// GetCertificate picks or issues the certificate for a TLS server name: a wildcard for
// the domain, or for the label the name rule gives (one wildcard label cannot cover
// ALIAS.DEVICE.DOMAIN, so a device gets its own). Issued leaves are cached; the cache is
// bounded.
func (ca *CA) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	device := ""
	if ca.sub != nil {
		device = ca.sub(hello.ServerName)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	c := ca.base
	if device != "" {
		c = ca.devices[device]
	}
	if c != nil && time.Until(c.Leaf.NotAfter) > leafLifetime/3 {
		return c, nil
	}
	names := []string{ca.domain, "*." + ca.domain}
	if device != "" {
		names = []string{device + "." + ca.domain, "*." + device + "." + ca.domain}
	}
	c, err := ca.issue(names)
	if err != nil {
		return nil, err
	}
	if device == "" {
		ca.base = c
	} else {
		if len(ca.devices) >= 4096 {
			clear(ca.devices)
		}
		ca.devices[device] = c
	}
	return c, nil
}

func (ca *CA) issue(names []string) (*tls.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, ca.leafKey.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: issuing a certificate for %s: %w", names[0], err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	// The leaf alone: the CA is the clients' trust anchor (iotsafe frontdoor ca), which
	// they hold already; sending it cost its bytes on every full handshake (issue 55.3).
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ca.leafKey, Leaf: leaf}, nil
}

// LoadCA loads the local CA a hub with a front door created in dataDir, for issuing
// device certificates offline; fs.ErrNotExist if there is none.
func LoadCA(dataDir string) (*CA, error) {
	dir := filepath.Join(dataDir, CADir)
	return loadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
}

// Pool is a certificate pool holding the CA: what verifies the device certificates it
// issued.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// IssueDeviceCert signs a client certificate for device name (incarnation gen) over pub,
// valid for lifetime; DER.
func (ca *CA) IssueDeviceCert(name string, gen int64, pub crypto.PublicKey, lifetime time.Duration) ([]byte, error) {
	tmpl, err := devicecert.Template(name, gen, lifetime)
	if err != nil {
		return nil, err
	}
	if na := ca.cert.NotAfter; tmpl.NotAfter.After(na) {
		tmpl.NotAfter = na
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
}
