package credential

import (
	"errors"
	"strings"
	"testing"
)

func TestPasswordRoundTrip(t *testing.T) {
	h, err := HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q", h)
	}
	if err := VerifyPassword(h, "correct horse battery"); err != nil {
		t.Fatalf("right password refused: %v", err)
	}
	if err := VerifyPassword(h, "correct horse batterx"); !errors.Is(err, ErrMismatch) {
		t.Fatalf("wrong password: %v", err)
	}
	h2, _ := HashPassword("correct horse battery")
	if h == h2 {
		t.Fatal("two hashes of one password are equal: salt not random")
	}
}

func TestPasswordPolicy(t *testing.T) {
	if _, err := HashPassword("short"); err == nil {
		t.Fatal("short password accepted")
	}
	if _, err := HashPassword(strings.Repeat("x", MaxPasswordLen+1)); err == nil {
		t.Fatal("huge password accepted")
	}
}

func TestVerifyRejectsTamperedHashes(t *testing.T) {
	for _, bad := range []string{
		"", "plain", "$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=4194304,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", // 4 GiB
		"$argon2id$v=19$m=19456,t=1000,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA",
		"$argon2id$v=19$m=19456,t=2,p=1$!!$aGFzaGhhc2hoYXNoaGFzaA",
	} {
		if err := VerifyPassword(bad, "whatever-long"); err == nil || errors.Is(err, ErrMismatch) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestToken(t *testing.T) {
	tok, h, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if !LooksLikeToken(tok) || HashToken(tok) != h || strings.Contains(h, tok) {
		t.Fatalf("token %q hash %q", tok, h)
	}
	if LooksLikeToken("iots_short") {
		t.Fatal("short token accepted")
	}
}
