package authn

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// compactFixture is a key set with one key per algorithm and a fixed clock.
type compactFixture struct {
	tk  *Tokens
	ks  *KeySet
	now time.Time
}

func newCompactFixture(t testing.TB, allowUnsigned bool) *compactFixture {
	tk, _, err := Open(t.TempDir(), Config{AllowUnsigned: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_900_000_000, 0)
	tk.Now = func() time.Time { return now }
	ks := &KeySet{}
	for _, alg := range []string{HS256, HS384, HS512, None} {
		k, err := newKey(alg, now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ks.Keys = append(ks.Keys, k)
	}
	return &compactFixture{tk: tk, ks: ks, now: now}
}

// token builds a token for key i with the canonical header, payload as given, and a
// signature that is right (sigMode 0) or not.
func (f *compactFixture) token(i int, payload []byte, sigMode uint8) string {
	k := &f.ks.Keys[i%len(f.ks.Keys)]
	var head string
	for h, ck := range f.ks.compact() {
		if ck.key == k {
			head = h
		}
	}
	signing := head + "." + base64.RawURLEncoding.EncodeToString(payload)
	var sig []byte
	if newHash := hashFor(k.Alg); newHash != nil {
		m := hmac.New(newHash, k.Secret)
		m.Write([]byte(signing))
		sig = m.Sum(nil)
	}
	switch sigMode % 4 {
	case 1:
		if len(sig) > 0 {
			sig[len(sig)/2] ^= 1
		} else {
			sig = []byte{1}
		}
	case 2:
		sig = nil
	case 3:
		return signing + ".%%%"
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func outcome(err error) string {
	for _, e := range []error{ErrExpired, ErrUnsigned, ErrInvalid} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

// agree checks that the compact path, where it decides, decides as the library does.
func (f *compactFixture) agree(t *testing.T, tok string) (handled bool) {
	var tmC, tmL Timing
	cc, handled, errC := f.tk.verifyCompact(tok, f.ks, f.now, &tmC)
	cl, errL := f.tk.verifyLibrary(tok, f.ks, f.now, &tmL)
	if !handled {
		return false
	}
	if outcome(errC) != outcome(errL) {
		t.Fatalf("token %q: compact says %v, library says %v", tok, errC, errL)
	}
	if errC == nil {
		a, _ := json.Marshal(cc)
		b, _ := json.Marshal(cl)
		if string(a) != string(b) {
			t.Fatalf("token %q: compact claims %s, library claims %s", tok, a, b)
		}
	}
	if tmC.Alg != tmL.Alg {
		t.Fatalf("token %q: algorithm %q and %q", tok, tmC.Alg, tmL.Alg)
	}
	return true
}

// The compact path handles the tokens this package issues, and for every token it
// decides it answers as the library: same refusal, same claims.
func TestCompactAgreesWithLibrary(t *testing.T) {
	for _, allow := range []bool{false, true} {
		f := newCompactFixture(t, allow)
		now := f.now.Unix()
		payloads := []string{
			`{"sub":"dev1","iat":%d,"nbf":%d,"exp":%d,"tokenType":"ACCESS","kind":"device","gen":7}`,
			`{"sub":"dev1","exp":%[3]d,"nbf":%[2]d,"iat":%[1]d,"tokenType":"ACCESS","kind":"device","gen":7}`, // the issuer's order
		}
		cases := [][3]int64{{now, now, now + 30}, {now, now, now - 10}, {now + 60, now, now + 90}, {now, now + 60, now + 90}, {now, now, now + 1}}
		for i := range f.ks.Keys {
			for _, c := range cases {
				for mode := range uint8(4) {
					for _, pl := range payloads {
						f.agree(t, f.token(i, []byte(fmt.Sprintf(pl, c[0], c[1], c[2])), mode))
					}
				}
			}
			if !f.agree(t, f.token(i, []byte(fmt.Sprintf(payloads[0], now, now, now+30)), 0)) {
				t.Fatalf("key %s: the compact path did not handle an issued token", f.ks.Keys[i].Alg)
			}
		}
		for _, odd := range []string{`{"sub":"d\u0065v","exp":1900000030,"nbf":1,"iat":1,"tokenType":"ACCESS","kind":"device","gen":07}`,
			`{"sub":"dev","exp":1900000030,"nbf":1,"iat":1,"tokenType":"ACCESS","kind":"device","gen":99999999999999999999}`,
			`{"sub":"dev","exp":1900000030,"nbf":1,"iat":1,"tokenType":"ACCESS","kind":"device","gen":1} `, `{"exp":null}`, `{"exp":"1900000030"}`, `{"exp":1.5e9}`, `{"aud":null,"exp":1900000030}`, `{"exp":1900000030} trailing`,
			`{"sub":"a","exp":1900000030,"EXP":1}`, `{"exp":99999999999999999999}`, `[]`, `{"gen":"7","exp":1900000030}`, `{"nbf":null,"iat":null,"exp":1900000030}`} {
			for i := range f.ks.Keys {
				f.agree(t, f.token(i, []byte(odd), 0))
			}
		}
	}
}

// Issued tokens take the compact path; the answer is the library's.
func TestIssuedTokensTakeTheCompactPath(t *testing.T) {
	for _, alg := range []string{HS256, HS384, HS512, None} {
		tk := openTokens(t, t.TempDir(), Config{Algorithm: alg, AllowUnsigned: alg == None})
		tok, _, err := tk.Issue(Access, KindDevice, "dev9", 3, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var tm Timing
		c, handled, err := tk.verifyCompact(tok, tk.keys.Load(), time.Now(), &tm)
		if !handled || err != nil || c.Subject != "dev9" || c.Gen != 3 || c.TokenType != Access {
			t.Fatalf("%s: handled %v, %+v, %v", alg, handled, c, err)
		}
		if alg != None && tm.Signature <= 0 {
			t.Fatalf("%s: signature not timed", alg)
		}
	}
}

// FuzzCompactAgrees feeds arbitrary claims, keys, signatures and clocks to both paths.
func FuzzCompactAgrees(f *testing.F) {
	f.Add([]byte(`{"sub":"dev1","iat":1900000000,"nbf":1900000000,"exp":1900000030,"tokenType":"ACCESS","kind":"device","gen":7}`), uint8(0), uint8(0), int64(0), false)
	f.Add([]byte(`{"sub":"dev1","exp":1900000030,"aud":["x"]}`), uint8(1), uint8(1), int64(40), true)
	f.Add([]byte(`{"exp":null,"nbf":1e3}`), uint8(3), uint8(2), int64(-5), true)
	// The issuer's own form, read without reflection.
	f.Add([]byte(`{"sub":"dev1","exp":1900000030,"nbf":1900000000,"iat":1900000000,"tokenType":"ACCESS","kind":"device","gen":-0}`), uint8(2), uint8(0), int64(0), false)
	// With the credential generation, as tokens are issued now.
	f.Add([]byte(`{"sub":"dev1","exp":1900000030,"nbf":1900000000,"iat":1900000000,"tokenType":"REFRESH","kind":"device","gen":7,"cred":"a1b2c3d4e5f60718"}`), uint8(0), uint8(0), int64(0), false)
	fx := [2]*compactFixture{newCompactFixture(f, false), newCompactFixture(f, true)}
	f.Fuzz(func(t *testing.T, payload []byte, key, sigMode uint8, clock int64, allow bool) {
		x := fx[0]
		if allow {
			x = fx[1]
		}
		saved := x.now
		defer func() { x.now = saved }()
		x.now = x.now.Add(time.Duration(clock%100_000) * time.Second)
		x.tk.Now = func() time.Time { return x.now }
		x.agree(t, x.token(int(key), payload, sigMode))
	})
}

// The issuer's payloads take the reflection-free reader; escapes, other orders and
// leading zeros do not.
func TestCanonicalClaims(t *testing.T) {
	good := `{"sub":"dev-1","exp":1900000030,"nbf":1900000000,"iat":1900000000,"tokenType":"ACCESS","kind":"device","gen":1763879000123456}`
	f, ok := canonicalClaims([]byte(good))
	if !ok || f.Subject != "dev-1" || *f.ExpiresAt != 1900000030 || f.Gen != 1763879000123456 || f.Kind != "device" {
		t.Fatalf("%+v %v", f, ok)
	}
	withCred := strings.TrimSuffix(good, "}") + `,"cred":"a1b2.c3"}`
	if f, ok := canonicalClaims([]byte(withCred)); !ok || f.Cred != "a1b2.c3" {
		t.Fatalf("with cred: %+v %v", f, ok)
	}
	for _, bad := range []string{strings.Replace(good, "dev-1", `d\u0065v`, 1), strings.TrimSuffix(good, "}") + `,"cred":7}`, strings.Replace(good, "1763879000123456", "01", 1),
		good + " ", strings.Replace(good, `"exp"`, `"EXP"`, 1), strings.Replace(good, "dev-1", "dév", 1)} {
		if _, ok := canonicalClaims([]byte(bad)); ok {
			t.Errorf("accepted %s", bad)
		}
	}
}
