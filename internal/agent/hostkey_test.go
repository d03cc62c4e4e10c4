package agent

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/iotsafe/iotsafe/internal/sshtest"
)

// A known_hosts file follows a rotation as OpenSSH's UpdateHostKeys does: the proven
// next key is added, and the key the hub stops announcing is dropped; the operator's
// other lines (other hosts, hashed, markers) stay as they were.
func TestKnownHostsFollowsRotation(t *testing.T) {
	const host = "hub.example:2222"
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2222}
	cur, next := sshtest.Signer(t).PublicKey(), sshtest.Signer(t).PublicKey()
	other := sshtest.Signer(t).PublicKey()
	path := filepath.Join(t.TempDir(), "known_hosts")
	operator := "# the operator's notes\n" + knownhosts.Line([]string{"other.example"}, other) + "\n" +
		"@revoked * " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other))) + "\n"
	if err := os.WriteFile(path, []byte(operator+knownhosts.Line([]string{knownhosts.Normalize(host)}, cur)+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	k, err := KnownHosts(path, false)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if k.Check(host, remote, next) == nil {
		t.Fatal("the next key must not be trusted before it is proven")
	}
	// Every announced key is proven (the hub counts the device), and only the new one
	// is added.
	prove := k.ToProve(host, remote, []ssh.PublicKey{cur, next})
	if len(prove) != 2 {
		t.Fatalf("to prove: %v", prove)
	}
	if err := k.Proven(log, host, remote, []ssh.PublicKey{cur, next}, prove); err != nil {
		t.Fatal(err)
	}
	if k.Check(host, remote, next) != nil || k.Check(host, remote, cur) != nil {
		t.Fatal("after the proof both keys are trusted")
	}
	if b, _ := os.ReadFile(path); strings.Count(string(b), "\n") != 5 {
		t.Fatalf("a known key must not be added twice:\n%s", b)
	}
	// Another hub behind the same name: its key, left out of this hub's announcement,
	// stays. Only what the hub says it retired goes.
	otherHub := sshtest.Signer(t).PublicKey()
	if err := k.appendKeys(host, []ssh.PublicKey{otherHub}); err != nil {
		t.Fatal(err)
	}
	k.reload()
	if err := k.Proven(log, host, remote, []ssh.PublicKey{next}, []ssh.PublicKey{next}); err != nil {
		t.Fatal(err)
	}
	if k.Check(host, remote, otherHub) != nil || k.Check(host, remote, cur) != nil {
		t.Fatal("a key left out of an announcement must stay")
	}
	// Promoted: the hub retires the old key.
	if err := k.Retired(log, host, []ssh.PublicKey{cur}); err != nil {
		t.Fatal(err)
	}
	if k.Check(host, remote, cur) == nil || k.Check(host, remote, next) != nil || k.Check(host, remote, otherHub) != nil {
		t.Fatal("the retired key must be dropped, the others kept")
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), operator) {
		t.Fatalf("the operator's lines changed:\n%s", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("the file's mode changed: %v", fi.Mode())
	}
}

// Fingerprint pins cannot grow by themselves: only pinned announced keys are proven.
func TestPinsProveOnlyPinnedKeys(t *testing.T) {
	cur, next := sshtest.Signer(t).PublicKey(), sshtest.Signer(t).PublicKey()
	p, err := PinFingerprint(ssh.FingerprintSHA256(cur))
	if err != nil {
		t.Fatal(err)
	}
	if prove := p.ToProve("h", nil, []ssh.PublicKey{cur, next}); len(prove) != 1 || !samePublicKey(prove[0], cur) {
		t.Fatalf("to prove: %v", prove)
	}
	p, _ = PinFingerprint(ssh.FingerprintSHA256(cur) + "," + ssh.FingerprintSHA256(next))
	if prove := p.ToProve("h", nil, []ssh.PublicKey{cur, next}); len(prove) != 2 {
		t.Fatalf("both pinned: %v", prove)
	}
	if p.Check("h", nil, next) != nil {
		t.Fatal("a pinned next key must be trusted")
	}
}

func samePublicKey(a, b ssh.PublicKey) bool { return string(a.Marshal()) == string(b.Marshal()) }
