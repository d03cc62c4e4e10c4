package authn

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The hot path of every API request is one token check. The generic library decodes
// the header into a map and the claims through reflection and custom decoders, which
// cost several times the HMAC itself (paper 004's figure 6 against figure 5). Tokens of
// the exact shape this package issues are checked here instead: the header segment must
// be byte for byte the one a known key signs with, so it needs no parsing and names one
// key (and so one algorithm); the claims go into a flat struct. Anything else is handed
// to the library, so both paths accept exactly the same tokens (FuzzCompactAgrees).

// compactKey is a key's precomputed header segment and pooled MACs.
type compactKey struct {
	key  *Key
	macs sync.Pool // hash.Hash keyed with the secret, reset after use
}

// scratch is verifyCompact's buffers; maxScratch bounds those kept (a token is at most a
// request header, but a long one need not stay).
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxScratch = 8 << 10

// compactIndex maps header segments to keys; built once per key set.
type compactIndex map[string]*compactKey

func (ks *KeySet) compact() compactIndex {
	ks.indexOnce.Do(func() {
		ks.index = compactIndex{}
		for i := range ks.Keys {
			k := &ks.Keys[i]
			// The library marshals the header map with sorted keys.
			h, err := json.Marshal(map[string]any{"alg": k.Alg, "kid": k.ID, "typ": "JWT"})
			if err != nil {
				continue
			}
			ck := &compactKey{key: k}
			if newHash := hashFor(k.Alg); newHash != nil {
				secret := k.Secret
				ck.macs.New = func() any { return hmac.New(newHash, secret) }
			}
			ks.index[base64.RawURLEncoding.EncodeToString(h)] = ck
		}
	})
	return ks.index
}

func hashFor(alg string) func() hash.Hash {
	switch alg {
	case HS256:
		return sha256.New
	case HS384:
		return sha512.New384
	case HS512:
		return sha512.New
	}
	return nil
}

// flatClaims are Claims without the library's decoders. Pointers tell a JSON null or
// an absent claim from a zero; integers make the decoder refuse what the library's
// float parsing might read differently (fractions, strings), which then goes to it.
type flatClaims struct {
	Subject   string          `json:"sub"`
	Issuer    string          `json:"iss"`
	ID        string          `json:"jti"`
	Audience  json.RawMessage `json:"aud"`
	ExpiresAt *int64          `json:"exp"`
	NotBefore *int64          `json:"nbf"`
	IssuedAt  *int64          `json:"iat"`
	TokenType string          `json:"tokenType"`
	Kind      string          `json:"kind"`
	Gen       int64           `json:"gen"`
	Cred      string          `json:"cred"`
}

// Refusals of the compact path, worded as the library's.
var (
	errBadSignature = fmt.Errorf("%w: signature is invalid", ErrInvalid)
	errNoExpiry     = fmt.Errorf("%w: exp claim is required", ErrInvalid)
	errNotYet       = fmt.Errorf("%w: token is not valid yet", ErrInvalid)
	errFuture       = fmt.Errorf("%w: token used before issued", ErrInvalid)
)

// maxExactSeconds bounds claim times the library (which parses them as float64) reads
// exactly.
const maxExactSeconds = 1 << 53

// verifyCompact checks token if it has this package's shape. handled is false when it
// does not, and the library must decide; when handled, err is the library's answer.
func (t *Tokens) verifyCompact(token string, ks *KeySet, now time.Time, tm *Timing) (c *Claims, handled bool, err error) {
	head, rest, ok := strings.Cut(token, ".")
	if !ok {
		return nil, false, nil
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return nil, false, nil
	}
	ck := ks.compact()[head]
	if ck == nil || ks.byID(ck.key.ID, now, t.cfg.MaxRefreshTTL) != ck.key {
		return nil, false, nil
	}
	k := ck.key
	tm.Alg = k.Alg
	// One pooled buffer holds the token, its decoded signature and payload, and the MAC:
	// a check allocates only the claims it returns (their strings are copies).
	bp := scratch.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxScratch {
			scratch.Put(bp)
		}
	}()
	enc := base64.RawURLEncoding
	need := len(token) + enc.DecodedLen(len(sig)) + enc.DecodedLen(len(payload)) + sha512.Size
	if cap(*bp) < need {
		*bp = make([]byte, 0, need)
	}
	b := append((*bp)[:0], token...) // fits: nothing below moves b's array
	signed := b[:len(head)+1+len(payload)]
	// The library's order: decoding, then the key's rules, the signature, the claims.
	b, err = enc.AppendDecode(b, b[len(signed)+1:])
	if err != nil {
		return nil, false, nil
	}
	want := b[len(token):]
	b, err = enc.AppendDecode(b, signed[len(head)+1:])
	if err != nil {
		return nil, false, nil
	}
	raw := b[len(token)+len(want):]
	f, ok := canonicalClaims(raw)
	if !ok && (json.Unmarshal(raw, &f) != nil || f.Audience != nil) {
		return nil, false, nil
	}
	for _, v := range []*int64{f.ExpiresAt, f.NotBefore, f.IssuedAt} {
		if v != nil && (*v > maxExactSeconds || *v < -maxExactSeconds) {
			return nil, false, nil
		}
	}
	if k.Alg == None {
		if len(want) != 0 {
			return nil, false, nil
		}
		if !t.unsignedAllowed() {
			return nil, true, ErrUnsigned
		}
	} else if !ck.signed(signed, want, b[len(b):], tm) {
		return nil, true, errBadSignature
	}
	if err := f.inTime(now); err != nil {
		return nil, true, err
	}
	return f.claims(), true, nil
}

// signed reports whether want is the MAC of signed under ck's key; out is room for the
// MAC (the pooled buffer's tail).
func (ck *compactKey) signed(signed, want, out []byte, tm *Timing) bool {
	start := time.Now()
	mac := ck.macs.Get().(hash.Hash)
	mac.Write(signed)
	good := hmac.Equal(mac.Sum(out), want)
	mac.Reset()
	ck.macs.Put(mac)
	tm.Signature = time.Since(start)
	return good
}

// inTime checks the time claims at now, in the library's order of answers: expired
// first, then any other failed claim.
func (f *flatClaims) inTime(now time.Time) error {
	const leeway = 2 * time.Second
	if f.ExpiresAt == nil {
		return errNoExpiry
	}
	if !now.Before(time.Unix(*f.ExpiresAt, 0).Add(leeway)) {
		return ErrExpired
	}
	if f.NotBefore != nil && now.Before(time.Unix(*f.NotBefore, 0).Add(-leeway)) {
		return errNotYet
	}
	if f.IssuedAt != nil && now.Before(time.Unix(*f.IssuedAt, 0).Add(-leeway)) {
		return errFuture
	}
	return nil
}

// claims are f as the Claims a check returns.
func (f *flatClaims) claims() *Claims {
	c := &Claims{TokenType: f.TokenType, Kind: f.Kind, Gen: f.Gen, Cred: f.Cred}
	c.Subject, c.Issuer, c.ID = f.Subject, f.Issuer, f.ID
	c.ExpiresAt = newDate(f.ExpiresAt)
	c.NotBefore = newDate(f.NotBefore)
	c.IssuedAt = newDate(f.IssuedAt)
	return c
}

func newDate(v *int64) *jwt.NumericDate {
	if v == nil {
		return nil
	}
	return jwt.NewNumericDate(time.Unix(*v, 0))
}

// canonicalClaims reads the payload exactly as Issue writes it (encoding/json's field
// order, no escapes, plain integers) without reflection; ok is false for anything else,
// which json.Unmarshal then reads. On what it accepts both give the same values: no
// duplicate keys, no escapes or non-ASCII in strings, integers within int64.
func canonicalClaims(b []byte) (f flatClaims, ok bool) {
	p := canonical{b: b}
	var exp, nbf, iat int64
	ok = p.lit(`{"sub":`) && p.str(&f.Subject) &&
		p.lit(`,"exp":`) && p.int(&exp) && p.lit(`,"nbf":`) && p.int(&nbf) && p.lit(`,"iat":`) && p.int(&iat) &&
		p.lit(`,"tokenType":`) && p.str(&f.TokenType) && p.lit(`,"kind":`) && p.str(&f.Kind) &&
		p.lit(`,"gen":`) && p.int(&f.Gen) && (!p.lit(`,"cred":`) || p.str(&f.Cred)) && p.lit(`}`) && len(p.b) == 0
	if !ok {
		return flatClaims{}, false
	}
	f.ExpiresAt, f.NotBefore, f.IssuedAt = &exp, &nbf, &iat
	return f, true
}

type canonical struct{ b []byte }

func (p *canonical) lit(s string) bool {
	if len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// str reads a string of printable ASCII without quotes or backslashes.
func (p *canonical) str(out *string) bool {
	if len(p.b) == 0 || p.b[0] != '"' {
		return false
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			*out = string(p.b[1:i])
			p.b = p.b[i+1:]
			return true
		case c < 0x20 || c > 0x7e || c == '\\':
			return false
		}
	}
	return false
}

// int reads an integer as JSON writes it: an optional minus, no leading zeros.
func (p *canonical) int(out *int64) bool {
	i := 0
	if i < len(p.b) && p.b[i] == '-' {
		i++
	}
	start := i
	for i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9' {
		i++
	}
	if i == start || (p.b[start] == '0' && i > start+1) {
		return false
	}
	v, err := strconv.ParseInt(string(p.b[:i]), 10, 64)
	if err != nil {
		return false
	}
	*out = v
	p.b = p.b[i:]
	return true
}
