package authn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Config of the hub's tokens (hub.yaml "jwt:").
type Config struct {
	// Algorithm signs new tokens: HS256 (the default), HS384, HS512, or none.
	Algorithm string `yaml:"algorithm"`
	// AllowUnsigned must be true for Algorithm none: tokens anyone can forge, for
	// measuring only. The hub and --check-config warn whenever it is set, and on every
	// request that uses an unsigned token.
	AllowUnsigned bool `yaml:"allow_unsigned"`
	// AccessTTL is an access token's life; 0 means 30s (the paper's).
	AccessTTL time.Duration `yaml:"access_ttl"`
	// RefreshTTL is a refresh token's default life; 0 means 720h.
	RefreshTTL time.Duration `yaml:"refresh_ttl"`
	// MaxRefreshTTL bounds a refresh token's life (and how long a rotated key keeps
	// verifying); 0 means 8760h.
	MaxRefreshTTL time.Duration `yaml:"max_refresh_ttl"`
}

// ApplyDefaults fills zero fields.
func (c *Config) ApplyDefaults() {
	if c.Algorithm == "" {
		c.Algorithm = HS256
	}
	if c.AccessTTL <= 0 {
		c.AccessTTL = 30 * time.Second
	}
	if c.RefreshTTL <= 0 {
		c.RefreshTTL = 720 * time.Hour
	}
	if c.MaxRefreshTTL <= 0 {
		c.MaxRefreshTTL = 8760 * time.Hour
	}
}

// Validate checks the config (after ApplyDefaults).
func (c *Config) Validate() error {
	if !ValidAlgorithm(c.Algorithm) {
		return fmt.Errorf("jwt.algorithm: %q is not one of HS256, HS384, HS512, none", c.Algorithm)
	}
	if c.Algorithm == None && !c.AllowUnsigned {
		return errors.New("jwt.algorithm none makes tokens anyone can forge: it needs jwt.allow_unsigned: true (for measuring only)")
	}
	if c.RefreshTTL > c.MaxRefreshTTL {
		return fmt.Errorf("jwt.refresh_ttl %v is longer than jwt.max_refresh_ttl %v", c.RefreshTTL, c.MaxRefreshTTL)
	}
	if c.AccessTTL > c.RefreshTTL {
		return fmt.Errorf("jwt.access_ttl %v is longer than jwt.refresh_ttl %v", c.AccessTTL, c.RefreshTTL)
	}
	return nil
}

// Token types.
const (
	Access  = "ACCESS"
	Refresh = "REFRESH"
)

// Subject kinds.
const (
	KindDevice  = "device"
	KindAccount = "account"
)

// Claims are what a token says. Gen ties a token to one incarnation of its subject: a
// device's enrolment time, an account's id; a removed and re-added name does not inherit
// the old one's tokens.
type Claims struct {
	jwt.RegisteredClaims
	TokenType string `json:"tokenType"`
	Kind      string `json:"kind"`
	Gen       int64  `json:"gen"`
	// Cred is the subject's credential generation when the token was issued (a device's
	// telemetry secret, an account's password and token epoch): a new secret, a new
	// password or a logout changes it, and the subject's older tokens stop verifying.
	Cred string `json:"cred,omitempty"`
}

// Verification errors, each a distinct answer for the client.
var (
	ErrExpired   = errors.New("token expired")
	ErrWrongType = errors.New("wrong token type")
	ErrInvalid   = errors.New("invalid token")
	ErrUnsigned  = errors.New("unsigned token refused")
)

// Tokens issues and verifies tokens with the keys of a KeyStore, re-reading them when
// they change (rotation by another process or hub takes effect within a second).
type Tokens struct {
	cfg       Config
	store     KeyStore
	keys      atomic.Pointer[KeySet]
	checkMu   sync.Mutex
	nextCheck atomic.Int64 // unix ns of the next look at the store
	raw       []byte       // the set as last read; checkMu
	parser    *jwt.Parser
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Opened says what Open did to the key file.
type Opened int

// What Open did.
const (
	KeysLoaded  Opened = iota
	KeysCreated        // there was no key file
	KeysRotated        // the configured algorithm differed from the current key's
)

// Open loads (or creates, with cfg.Algorithm) the keys in dir (OpenStore).
func Open(dir string, cfg Config) (*Tokens, Opened, error) {
	return OpenStore(context.Background(), FileKeys(dir), cfg)
}

// OpenStore loads (or creates, with cfg.Algorithm) the keys in store. When the
// configured algorithm is not the current key's, it rotates to a new key of that
// algorithm.
func OpenStore(ctx context.Context, store KeyStore, cfg Config) (*Tokens, Opened, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	ks, created, err := loadOrCreateKeys(ctx, store, cfg.Algorithm)
	if err != nil {
		return nil, 0, err
	}
	what := KeysLoaded
	if created {
		what = KeysCreated
	}
	if ks.Current().Alg != cfg.Algorithm {
		if _, err := RotateIn(ctx, store, cfg.Algorithm, cfg.MaxRefreshTTL); err != nil {
			return nil, 0, err
		}
		what = KeysRotated
	}
	raw, err := store.Read(ctx)
	if err != nil {
		return nil, 0, err
	}
	if ks, err = parseKeys(raw, store.Where()); err != nil {
		return nil, 0, err
	}
	t := &Tokens{cfg: cfg, store: store, raw: raw}
	t.keys.Store(ks)
	t.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{HS256, HS384, HS512, None}), // narrowed per key below
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(2*time.Second),
	)
	return t, what, nil
}

// unsignedAllowed reports whether an unsigned token may verify: only while the
// configuration both allows them and signs with none (a none key left in a shared key
// set by another hub's configuration verifies nothing here).
func (t *Tokens) unsignedAllowed() bool { return t.cfg.AllowUnsigned && t.cfg.Algorithm == None }

// Config is the configuration in use (defaults applied).
func (t *Tokens) Config() Config { return t.cfg }

// CurrentKey is the signing key's id and algorithm.
func (t *Tokens) CurrentKey() (id, alg string) {
	k := t.keys.Load().Current()
	return k.ID, k.Alg
}

func (t *Tokens) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// maybeReload re-reads the key set at most once a second and takes it if it changed.
func (t *Tokens) maybeReload() {
	now := time.Now()
	// Every request passes here: only one of them a second looks at the store.
	if now.UnixNano() < t.nextCheck.Load() || !t.checkMu.TryLock() {
		return
	}
	defer t.checkMu.Unlock()
	if now.UnixNano() < t.nextCheck.Load() {
		return
	}
	t.nextCheck.Store(now.Add(time.Second).UnixNano())
	// A shared store is a database: a slow one delays this one request, not all.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	raw, err := t.store.Read(ctx)
	if err != nil || bytes.Equal(raw, t.raw) {
		return
	}
	if ks, err := parseKeys(raw, t.store.Where()); err == nil {
		t.keys.Store(ks)
		t.raw = raw
	}
}

// Issue signs a token of typ for subject. ttl 0 takes the configured default; a refresh
// token's ttl may not exceed MaxRefreshTTL.
func (t *Tokens) Issue(typ, kind, subject string, gen int64, cred string, ttl time.Duration) (string, time.Time, error) {
	t.maybeReload()
	switch typ {
	case Access:
		if ttl <= 0 {
			ttl = t.cfg.AccessTTL
		}
	case Refresh:
		if ttl <= 0 {
			ttl = t.cfg.RefreshTTL
		}
		if ttl > t.cfg.MaxRefreshTTL {
			return "", time.Time{}, fmt.Errorf("a refresh token may live at most %v (jwt.max_refresh_ttl)", t.cfg.MaxRefreshTTL)
		}
	default:
		return "", time.Time{}, fmt.Errorf("authn: token type %q", typ)
	}
	now := t.now()
	exp := now.Add(ttl)
	k := t.keys.Load().Current()
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   subject,
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(exp),
		},
		TokenType: typ, Kind: kind, Gen: gen, Cred: cred,
	}
	var s string
	var err error
	if k.Alg == None {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, c)
		tok.Header["kid"] = k.ID
		s, err = tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
	} else {
		tok := jwt.NewWithClaims(jwt.GetSigningMethod(k.Alg), c)
		tok.Header["kid"] = k.ID
		s, err = tok.SignedString(k.Secret)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("authn: signing: %w", err)
	}
	return s, exp, nil
}

// MaxTokenLen bounds a token before parsing.
const MaxTokenLen = 4096

// Verify checks a token's signature with the key it names (whose algorithm must be the
// token's), its times, and that it is of type want.
func (t *Tokens) Verify(token, want string) (*Claims, error) {
	c, _, err := t.VerifyTimed(token, want)
	return c, err
}

// Timing splits one verification as paper 004 does: the whole of it, from the base64
// string to checked claims, and the signature check alone within it. Alg is the
// algorithm of the key the token named ("" if none was found).
type Timing struct {
	Total, Signature time.Duration
	Alg              string
}

// timedMethod measures the signature check of the method it wraps.
type timedMethod struct {
	jwt.SigningMethod
	took *time.Duration
}

func (m timedMethod) Verify(signingString string, sig []byte, key any) error {
	start := time.Now()
	err := m.SigningMethod.Verify(signingString, sig, key)
	*m.took = time.Since(start)
	return err
}

// VerifyTimed is Verify that also says how long the parts took (the hub's metrics).
func (t *Tokens) VerifyTimed(token, want string) (*Claims, Timing, error) {
	start := time.Now()
	var tm Timing
	c, err := t.verify(token, want, &tm)
	tm.Total = time.Since(start)
	return c, tm, err
}

func (t *Tokens) verify(token, want string, tm *Timing) (*Claims, error) {
	if len(token) > MaxTokenLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxTokenLen)
	}
	t.maybeReload()
	ks := t.keys.Load()
	now := t.now()
	c, handled, err := t.verifyCompact(token, ks, now, tm)
	if !handled {
		c, err = t.verifyLibrary(token, ks, now, tm)
	}
	if err != nil {
		return nil, err
	}
	if c.TokenType != want {
		return nil, fmt.Errorf("%w: a %s token where a %s token is needed", ErrWrongType, c.TokenType, want)
	}
	if c.Subject == "" || (c.Kind != KindDevice && c.Kind != KindAccount) {
		return nil, fmt.Errorf("%w: no subject", ErrInvalid)
	}
	return c, nil
}

// verifyLibrary checks any token with the generic library: what verifyCompact does not
// handle.
func (t *Tokens) verifyLibrary(token string, ks *KeySet, now time.Time, tm *Timing) (*Claims, error) {
	var c Claims
	p := t.parser
	if t.Now != nil {
		p = jwt.NewParser(jwt.WithValidMethods([]string{HS256, HS384, HS512, None}), jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(), jwt.WithLeeway(2*time.Second), jwt.WithTimeFunc(t.Now))
	}
	_, err := p.ParseWithClaims(token, &c, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		k := ks.byID(kid, now, t.cfg.MaxRefreshTTL)
		if k == nil {
			return nil, errors.New("unknown or expired key id")
		}
		// The key decides the algorithm, never the token.
		if tok.Method.Alg() != k.Alg {
			return nil, fmt.Errorf("algorithm %s is not this key's", tok.Method.Alg())
		}
		tm.Alg = k.Alg
		// The parser checks the signature with tok.Method right after this function.
		tok.Method = timedMethod{tok.Method, &tm.Signature}
		if k.Alg == None {
			if !t.unsignedAllowed() {
				return nil, ErrUnsigned
			}
			return jwt.UnsafeAllowNoneSignatureType, nil
		}
		return k.Secret, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, ErrExpired
	case errors.Is(err, ErrUnsigned):
		return nil, ErrUnsigned
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &c, nil
}
