package agent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func writeKey(t *testing.T, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	// Written beside and renamed, as an operator installing a key should.
	if err := os.WriteFile(path+".tmp", pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sameKey(a, b ssh.Signer) bool {
	return ssh.FingerprintSHA256(a.PublicKey()) == ssh.FingerprintSHA256(b.PublicKey())
}

// A key installed in place of the old one is used from the next connection; a broken or
// missing file leaves the last good key in use; without a file the key never changes.
func TestKeySourceFollowsTheFile(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "dev1")
	first := writeKey(t, path)
	k := newKeySource(path, first, log)
	if !sameKey(k.current(), first) {
		t.Fatal("unchanged file: another key")
	}
	second := writeKey(t, path)
	if !sameKey(k.current(), second) {
		t.Fatal("the rotated key in the file is not used")
	}
	os.WriteFile(path, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nhalf written"), 0o600)
	if !sameKey(k.current(), second) {
		t.Fatal("a broken file replaced the working key")
	}
	os.Remove(path)
	if !sameKey(k.current(), second) {
		t.Fatal("a missing file replaced the working key")
	}
	third := writeKey(t, path)
	if !sameKey(k.current(), third) {
		t.Fatal("the key written after a broken one is not used")
	}
	if fixed := newKeySource("", first, log); !sameKey(fixed.current(), first) {
		t.Fatal("a key without a file changed")
	}
}

func TestReadableKeyWarns(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	path := filepath.Join(t.TempDir(), "dev1")
	first := writeKey(t, path)
	newKeySource(path, first, log)
	if strings.Contains(out.String(), "key_file_readable") {
		t.Fatalf("a 0600 key drew a warning: %s", out.String())
	}
	os.Chmod(path, 0o644)
	newKeySource(path, first, log)
	if !strings.Contains(out.String(), `"event":"key_file_readable"`) {
		t.Fatalf("a 0644 key drew no warning: %s", out.String())
	}
}
