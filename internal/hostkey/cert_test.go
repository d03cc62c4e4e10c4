package hostkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func hostCert(t *testing.T, ca ssh.Signer, key ssh.PublicKey, typ uint32) []byte {
	t.Helper()
	c := &ssh.Certificate{Key: key, CertType: typ, ValidPrincipals: []string{"hub"}, ValidBefore: ssh.CertTimeInfinity}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return ssh.MarshalAuthorizedKey(c)
}

// A host certificate beside the signing key is loaded with it; one of another key, or a
// user certificate, stops the hub with what to do; a promotion puts the next key's
// certificate in place of the old key's, or removes the old one when there is none.
func TestHostCertificates(t *testing.T) {
	dir := t.TempDir()
	_, caKey, _ := ed25519.GenerateKey(rand.Reader)
	ca, _ := ssh.NewSignerFromSigner(caKey)
	set, err := Load(dir, []string{ssh.KeyAlgoED25519})
	if err != nil || len(set.Certificates) != 0 {
		t.Fatalf("load: %v %v", set, err)
	}
	certPath := filepath.Join(dir, "host_ed25519_key"+CertSuffix)
	os.WriteFile(certPath, hostCert(t, ca, set.Signing[0].PublicKey(), ssh.UserCert), 0o644)
	if _, err := Load(dir, []string{ssh.KeyAlgoED25519}); err == nil || !strings.Contains(err.Error(), "not a host certificate") {
		t.Fatalf("a user certificate: %v", err)
	}
	os.WriteFile(certPath, hostCert(t, ca, ca.PublicKey(), ssh.HostCert), 0o644)
	if _, err := Load(dir, []string{ssh.KeyAlgoED25519}); err == nil || !strings.Contains(err.Error(), "certifies another key") {
		t.Fatalf("a certificate of another key: %v", err)
	}
	os.WriteFile(certPath, hostCert(t, ca, set.Signing[0].PublicKey(), ssh.HostCert), 0o644)
	if set, err = Load(dir, []string{ssh.KeyAlgoED25519}); err != nil || len(set.Certificates) != 1 {
		t.Fatalf("a good certificate: %v %v", set, err)
	}

	// Promoted with its certificate signed ahead: it follows the key.
	next, err := AddNext(dir, "ed25519")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "host_ed25519_key.next"+CertSuffix), hostCert(t, ca, next, ssh.HostCert), 0o644)
	if _, err := Promote(dir); err != nil {
		t.Fatal(err)
	}
	if set, err = Load(dir, []string{ssh.KeyAlgoED25519}); err != nil || len(set.Certificates) != 1 || fp(set.Certificates[0].Key) != fp(next) {
		t.Fatalf("after a promotion with the next key's certificate: %v %v", set, err)
	}
	// Promoted without one: the old certificate goes, the hub starts without.
	if _, err := AddNext(dir, "ed25519"); err != nil {
		t.Fatal(err)
	}
	if _, err := Promote(dir); err != nil {
		t.Fatal(err)
	}
	if set, err = Load(dir, []string{ssh.KeyAlgoED25519}); err != nil || len(set.Certificates) != 0 {
		t.Fatalf("after a promotion without a certificate: %v %v", set, err)
	}
}
