package sshca

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

func line(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }

func newKey(t *testing.T, dir, name string) ssh.PublicKey {
	t.Helper()
	path := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(path + ".pub")
	k, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The CA key is made once, mode 0600; a certificate it signs is what stock ssh-keygen
// reads; the KRL it writes revokes exactly the serials and keys it names, as stock
// ssh-keygen -Q says.
func TestCertificatesAndKRLWithStockSSHKeygen(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatal("ssh-keygen is needed (scripts/setup.sh installs openssh-client)")
	}
	data, tmp := t.TempDir(), t.TempDir()
	if _, err := Load(data); err != ErrNoCA {
		t.Fatalf("load before init: %v", err)
	}
	ca, created, err := Create(data)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if fi, _ := os.Stat(Path(data)); fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v", fi.Mode().Perm())
	}
	if again, created, err := Create(data); err != nil || created || line(again.PublicKey()) != line(ca.PublicKey()) {
		t.Fatalf("create again: %v %v", created, err)
	}

	write := func(name string, c *ssh.Certificate) string {
		p := filepath.Join(tmp, name+"-cert.pub")
		if err := os.WriteFile(p, ssh.MarshalAuthorizedKey(c), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	good, revoked, byKey := newKey(t, tmp, "good"), newKey(t, tmp, "revoked"), newKey(t, tmp, "bykey")
	sign := func(k ssh.PublicKey, serial uint64, name string) string {
		c, err := Sign(ca, Request{Key: k, Serial: serial, KeyID: name + "@test", Principals: []string{name}, Validity: time.Hour}, now)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, c)
	}
	goodCert, revokedCert, byKeyCert := sign(good, 10, "good"), sign(revoked, 11, "revoked"), sign(byKey, 12, "bykey")
	out, err := exec.Command("ssh-keygen", "-L", "-f", goodCert).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Serial: 10") || !strings.Contains(string(out), "user certificate") || !strings.Contains(string(out), "good@test") {
		t.Fatalf("ssh-keygen -L: %v\n%s", err, out)
	}
	if _, err := Sign(ca, Request{Key: good, Serial: 1, Validity: time.Hour}, now); err == nil {
		t.Error("a certificate without a principal was signed")
	}

	krl, err := MarshalKRL(Revoked{Serials: map[string][]uint64{line(ca.PublicKey()): {11, 99}}, Keys: []string{line(byKey)}}, 7, now, "test")
	if err != nil {
		t.Fatal(err)
	}
	krlPath := filepath.Join(tmp, "revoked.krl")
	os.WriteFile(krlPath, krl, 0o644)
	check := func(file string, wantRevoked bool) {
		t.Helper()
		out, err := exec.Command("ssh-keygen", "-Q", "-f", krlPath, file).CombinedOutput()
		got := strings.Contains(string(out), "REVOKED")
		if got != wantRevoked || (err != nil) != wantRevoked {
			t.Errorf("ssh-keygen -Q %s: revoked %v (err %v), want %v\n%s", filepath.Base(file), got, err, wantRevoked, out)
		}
	}
	check(goodCert, false)
	check(revokedCert, true)
	check(byKeyCert, true)
	check(filepath.Join(tmp, "bykey.pub"), true)
	check(filepath.Join(tmp, "good.pub"), false)
}
