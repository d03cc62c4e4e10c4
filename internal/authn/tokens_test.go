package authn

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func openTokens(t *testing.T, dir string, cfg Config) *Tokens {
	t.Helper()
	tk, _, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestIssueAndVerifyEachAlgorithm(t *testing.T) {
	for _, alg := range []string{HS256, HS384, HS512} {
		dir := t.TempDir()
		tk := openTokens(t, dir, Config{Algorithm: alg})
		if fi, err := os.Stat(filepath.Join(dir, KeysFile)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: key file %v %v", alg, fi.Mode(), err)
		}
		if ks, _ := LoadKeys(dir); len(ks.Current().Secret) != keyBytes[alg] {
			t.Fatalf("%s: key of %d bytes", alg, len(ks.Current().Secret))
		}
		tok, exp, err := tk.Issue(Access, KindDevice, "dev42", 7, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Until(exp); d > 31*time.Second || d < 25*time.Second {
			t.Fatalf("access token lives %v, want 30s", d)
		}
		c, err := tk.Verify(tok, Access)
		if err != nil || c.Subject != "dev42" || c.Gen != 7 || c.Kind != KindDevice {
			t.Fatalf("%s: %+v %v", alg, c, err)
		}
		if _, err := tk.Verify(tok, Refresh); !errors.Is(err, ErrWrongType) {
			t.Fatalf("%s: an access token must not refresh: %v", alg, err)
		}
	}
}

// The hub's metrics split a verification as paper 004 does: the signature check is a
// part of the whole, named by the key's algorithm, also when the signature is wrong.
func TestVerifyTimedSplitsSignature(t *testing.T) {
	tk := openTokens(t, t.TempDir(), Config{Algorithm: HS384})
	tok, _, _ := tk.Issue(Access, KindDevice, "dev42", 1, "", 0)
	c, tm, err := tk.VerifyTimed(tok, Access)
	if err != nil || c.Subject != "dev42" {
		t.Fatal(c, err)
	}
	if tm.Alg != HS384 || tm.Signature <= 0 || tm.Signature > tm.Total {
		t.Fatalf("timing %+v", tm)
	}
	bad := []byte(tok)
	if i := len(bad) - 3; bad[i] == 'A' {
		bad[i] = 'B'
	} else {
		bad[i] = 'A'
	}
	if _, tm, err := tk.VerifyTimed(string(bad), Access); !errors.Is(err, ErrInvalid) || tm.Alg != HS384 || tm.Signature <= 0 {
		t.Fatalf("tampered: %+v %v", tm, err)
	}
	if _, tm, err := tk.VerifyTimed("not.a.token", Access); err == nil || tm.Alg != "" || tm.Signature != 0 || tm.Total <= 0 {
		t.Fatalf("garbage: %+v %v", tm, err)
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	tk := openTokens(t, dir, Config{})
	tok, _, _ := tk.Issue(Refresh, KindDevice, "dev42", 1, "", time.Hour)
	if _, err := tk.Verify(tok, Access); !errors.Is(err, ErrWrongType) {
		t.Fatalf("a refresh token must not call the API: %v", err)
	}
	parts := strings.Split(tok, ".")
	// Tampered payload: another subject under the same signature.
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), "dev42", "dev43", 1)
	if _, err := tk.Verify(parts[0]+"."+base64.RawURLEncoding.EncodeToString([]byte(forged))+"."+parts[2], Refresh); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tampered token: %v", err)
	}
	// Algorithm confusion: the same key's secret with another HMAC named in the header.
	ks, _ := LoadKeys(dir)
	k := ks.Current()
	c := Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "dev42", IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}, TokenType: Access, Kind: KindDevice}
	other := jwt.NewWithClaims(jwt.SigningMethodHS512, c)
	other.Header["kid"] = k.ID
	s, _ := other.SignedString(k.Secret)
	if _, err := tk.Verify(s, Access); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a token naming another algorithm than its key's: %v", err)
	}
	// Unsigned, naming the real key.
	none := jwt.NewWithClaims(jwt.SigningMethodNone, c)
	none.Header["kid"] = k.ID
	s, _ = none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if _, err := tk.Verify(s, Access); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unsigned token: %v", err)
	}
	// Expired.
	tk.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	old, _, _ := tk.Issue(Access, KindDevice, "dev42", 1, "", 0)
	tk.Now = nil
	if _, err := tk.Verify(old, Access); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired token: %v", err)
	}
	// Garbage and oversize.
	for _, bad := range []string{"", "a.b.c", strings.Repeat("a", MaxTokenLen+1)} {
		if _, err := tk.Verify(bad, Access); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%.10q: %v", bad, err)
		}
	}
	if _, _, err := tk.Issue(Refresh, KindDevice, "dev42", 1, "", 9000*time.Hour); err == nil {
		t.Fatal("a refresh token beyond max_refresh_ttl was issued")
	}
}

func TestUnsignedOnlyWhenAllowed(t *testing.T) {
	if _, _, err := Open(t.TempDir(), Config{Algorithm: None}); err == nil {
		t.Fatal("algorithm none without allow_unsigned was accepted")
	}
	dir := t.TempDir()
	tk := openTokens(t, dir, Config{Algorithm: None, AllowUnsigned: true})
	tok, _, err := tk.Issue(Access, KindDevice, "dev1", 1, "", 0)
	if err != nil || !strings.HasSuffix(tok, ".") {
		t.Fatalf("unsigned token %q %v", tok, err)
	}
	if _, err := tk.Verify(tok, Access); err != nil {
		t.Fatalf("unsigned allowed: %v", err)
	}
	// The operator turns signing back on, leaving allow_unsigned set: the none key is
	// gone from the key set and its tokens stop at once (issue 48, item 9).
	signed := openTokens(t, dir, Config{Algorithm: HS256, AllowUnsigned: true})
	if _, err := signed.Verify(tok, Access); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned token after signing was turned on: %v", err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, KeysFile))
	if strings.Contains(string(raw), `"alg": "none"`) {
		t.Fatalf("the none key is still in the key set:\n%s", raw)
	}
}

// A leaked key is retired at once: its tokens stop verifying, new ones work (item 13).
func TestRetireNow(t *testing.T) {
	dir := t.TempDir()
	tk := openTokens(t, dir, Config{})
	leaked, _, _ := tk.Issue(Refresh, KindDevice, "dev1", 1, "", 0)
	if _, err := RetireNow(context.Background(), FileKeys(dir), HS256); err != nil {
		t.Fatal(err)
	}
	fresh := openTokens(t, dir, Config{})
	if _, err := fresh.Verify(leaked, Refresh); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a token of the retired key: %v", err)
	}
	tok, _, _ := fresh.Issue(Refresh, KindDevice, "dev1", 1, "", 0)
	if _, err := fresh.Verify(tok, Refresh); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
}

func TestRotationKeepsOldTokensValid(t *testing.T) {
	dir := t.TempDir()
	tk := openTokens(t, dir, Config{})
	old, _, _ := tk.Issue(Refresh, KindDevice, "dev1", 1, "", 0)
	oldKid, _ := tk.CurrentKey()
	k, err := Rotate(dir, HS512, 8760*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Another process rotated: a new Tokens (the hub re-reads within a second) signs
	// with the new key and still accepts the old one's tokens.
	tk2 := openTokens(t, dir, Config{Algorithm: HS512})
	if kid, alg := tk2.CurrentKey(); kid != k.ID || kid == oldKid || alg != HS512 {
		t.Fatalf("current key %s %s", kid, alg)
	}
	if _, err := tk2.Verify(old, Refresh); err != nil {
		t.Fatalf("a token of the retired key: %v", err)
	}
	// Past the longest token life the retired key verifies nothing.
	tk2.Now = func() time.Time { return time.Now().Add(8761 * time.Hour) }
	if _, err := tk2.Verify(old, Refresh); err == nil {
		t.Fatal("the retired key verified past max_refresh_ttl")
	}
	// Configured algorithm differs from the current key's: Open rotates.
	_, what, err := Open(dir, Config{Algorithm: HS384})
	if err != nil || what != KeysRotated {
		t.Fatalf("open with another algorithm: %v %v", what, err)
	}
}

func TestUnsafeKeyFileRefused(t *testing.T) {
	dir := t.TempDir()
	openTokens(t, dir, Config{})
	os.Chmod(filepath.Join(dir, KeysFile), 0o644)
	if _, _, err := Open(dir, Config{}); !errors.Is(err, ErrUnsafeKeyFile) {
		t.Fatalf("world-readable key file: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	tk, _, err := Open(dir, Config{})
	if err != nil {
		f.Fatal(err)
	}
	good, _, _ := tk.Issue(Access, KindDevice, "dev1", 1, "", 0)
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("..")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := tk.Verify(s, Access)
		if err == nil && s != good {
			// Only a token this key signed may verify: re-signing its claims must give s.
			if c.Subject == "" {
				t.Fatalf("verified a token without subject: %q", s)
			}
			if !strings.HasPrefix(s, strings.SplitN(good, ".", 2)[0]) {
				t.Fatalf("verified a token with another header: %q", s)
			}
		}
	})
}

// BenchmarkVerify measures one access token's parse and verification per algorithm
// (paper 004 reports JWT processing as a share of the request).
func BenchmarkVerify(b *testing.B) {
	for _, alg := range []string{None, HS256, HS384, HS512} {
		b.Run(alg, func(b *testing.B) {
			tk, _, err := Open(b.TempDir(), Config{Algorithm: alg, AllowUnsigned: alg == None})
			if err != nil {
				b.Fatal(err)
			}
			tok, _, _ := tk.Issue(Access, KindDevice, "dev1", 1, "", 0)
			b.ResetTimer()
			for b.Loop() {
				if _, err := tk.Verify(tok, Access); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
