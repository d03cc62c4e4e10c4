package hostkey

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

var allAlgos = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA512}

func TestLoadCreatesPrivateStableKeys(t *testing.T) {
	dir := t.TempDir()
	s1, err := Load(dir, []string{ssh.KeyAlgoED25519})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "host_ed25519_key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host key mode %v %v", fi.Mode(), err)
	}
	s2, _ := Load(dir, []string{ssh.KeyAlgoED25519})
	if fp(s1.Signing[0].PublicKey()) != fp(s2.Signing[0].PublicKey()) || s2.Rotating() {
		t.Fatal("host key changed across loads, or a rotation appeared")
	}
	os.Chmod(filepath.Join(dir, "host_ed25519_key"), 0o644)
	if _, err := Load(dir, []string{ssh.KeyAlgoED25519}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a group/world-readable key must be refused: %v", err)
	}
}

func fp(k ssh.PublicKey) string { return ssh.FingerprintSHA256(k) }

// A whole rotation: add a next key, announce it, promote it, and start the next one.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	set, err := Load(dir, []string{ssh.KeyAlgoED25519})
	if err != nil {
		t.Fatal(err)
	}
	first := set.Signing[0].PublicKey()
	if _, err := Promote(dir); err == nil || !strings.Contains(err.Error(), "no next key") {
		t.Fatalf("promote without a next key: %v", err)
	}
	if _, err := AddNext(dir, "ecdsa"); err == nil || !strings.Contains(err.Error(), "no ecdsa signing key") {
		t.Fatalf("a next key of a type the hub does not sign with: %v", err)
	}
	if _, err := AddNext(dir, "dsa"); err == nil || !strings.Contains(err.Error(), "ed25519, ecdsa, rsa") {
		t.Fatalf("an unknown type: %v", err)
	}
	next, err := AddNext(dir, "ed25519")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "host_ed25519_key.next")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("next key mode %v %v", fi, err)
	}
	if _, err := AddNext(dir, "ed25519"); err == nil || !strings.Contains(err.Error(), fp(next)) {
		t.Fatalf("a second next key must be refused, naming the first: %v", err)
	}
	set, err = Load(dir, []string{ssh.KeyAlgoED25519})
	if err != nil {
		t.Fatal(err)
	}
	if !set.Rotating() || len(set.Next) != 1 || fp(set.Signing[0].PublicKey()) != fp(first) || !set.IsNext(next) || set.IsNext(first) {
		t.Fatalf("after add: %+v", set)
	}
	if ann := set.Announced(); len(ann) != 2 || fp(ann[0]) != fp(first) || fp(ann[1]) != fp(next) {
		t.Fatalf("announced %v", ann)
	}

	ps, err := Promote(dir)
	if err != nil || len(ps) != 1 || fp(ps[0].Retired) != fp(first) || fp(ps[0].Signing) != fp(next) {
		t.Fatalf("promote: %+v %v", ps, err)
	}
	set, err = Load(dir, []string{ssh.KeyAlgoED25519})
	if err != nil {
		t.Fatal(err)
	}
	if fp(set.Signing[0].PublicKey()) != fp(next) || len(set.Next) != 0 || len(set.Retired) != 1 || fp(set.Retired[0]) != fp(first) || !set.Rotating() {
		t.Fatalf("after promote: %+v", set)
	}
	if len(set.Announced()) != 1 {
		t.Fatal("a retired key must not be announced")
	}
	if _, err := set.Prove([]byte("sid"), []ssh.PublicKey{first}); err == nil {
		t.Fatal("the retired key's private part must be gone")
	}
	list, err := List(dir)
	if err != nil || len(list) != 2 || list[0].State != "signing" || list[1].State != "retired" || list[1].Fingerprint != fp(first) {
		t.Fatalf("list %+v %v", list, err)
	}

	third, err := AddNext(dir, "ed25519")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "host_ed25519_key.retired.pub")); !os.IsNotExist(err) {
		t.Fatalf("a new rotation forgets the retired key: %v", err)
	}
	dropped, err := DropNext(dir, "ed25519")
	if err != nil || fp(dropped) != fp(third) {
		t.Fatalf("drop: %v %v", dropped, err)
	}
	if _, err := DropNext(dir, "ed25519"); err == nil {
		t.Fatal("dropping a missing next key must be an error")
	}
	set, _ = Load(dir, []string{ssh.KeyAlgoED25519})
	if set.Rotating() {
		t.Fatalf("after drop: %+v", set)
	}
}

func TestProofs(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, allAlgos); err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds() {
		if _, err := AddNext(dir, k); err != nil {
			t.Fatal(err)
		}
	}
	set, err := Load(dir, allAlgos)
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Announced()
	if len(keys) != 6 {
		t.Fatalf("announced %d keys", len(keys))
	}
	parsed, err := ParseKeys(MarshalKeys(keys))
	if err != nil || len(parsed) != len(keys) {
		t.Fatalf("round trip: %v", err)
	}
	sid := []byte("session-1")
	reply, err := set.Prove(sid, parsed)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyProofs(sid, keys, reply); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(reply, []byte(ssh.KeyAlgoRSASHA512)) {
		t.Fatal("an RSA proof must use rsa-sha2-512")
	}
	if err := VerifyProofs([]byte("session-2"), keys, reply); err == nil {
		t.Fatal("a proof made for another session must not verify")
	}
	if err := VerifyProofs(sid, keys[:5], reply); err == nil || !strings.Contains(err.Error(), "more proofs") {
		t.Fatalf("extra proofs: %v", err)
	}
	if err := VerifyProofs(sid, []ssh.PublicKey{keys[1], keys[0]}, reply); err == nil {
		t.Fatal("proofs out of order must not verify")
	}
	other, _ := Load(t.TempDir(), []string{ssh.KeyAlgoED25519})
	if _, err := set.Prove(sid, []ssh.PublicKey{other.Signing[0].PublicKey()}); err == nil || !strings.Contains(err.Error(), "not one of this hub's keys") {
		t.Fatalf("a stranger's key: %v", err)
	}
}

func TestParseKeysRefusesBadLists(t *testing.T) {
	set, _ := Load(t.TempDir(), []string{ssh.KeyAlgoED25519})
	one := MarshalKeys(set.Announced())
	many := bytes.Repeat(one, MaxKeys+1)
	for name, p := range map[string][]byte{
		"truncated":    one[:len(one)-1],
		"trailing":     append(append([]byte{}, one...), 0, 0),
		"not a key":    appendString(nil, []byte("junk")),
		"over the cap": many,
	} {
		if _, err := ParseKeys(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if ks, err := ParseKeys(nil); err != nil || len(ks) != 0 {
		t.Fatalf("empty list: %v %v", ks, err)
	}
}

// FuzzParseKeys: a device's prove request is untrusted input; any bytes give keys that
// marshal back to the same bytes, or an error.
func FuzzParseKeys(f *testing.F) {
	set, _ := Load(f.TempDir(), []string{ssh.KeyAlgoED25519})
	f.Add(MarshalKeys(set.Announced()))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseKeys(data)
		if err != nil {
			return
		}
		if len(keys) > MaxKeys || !bytes.Equal(MarshalKeys(keys), data) {
			t.Fatalf("%d keys that do not marshal back to the input", len(keys))
		}
	})
}
