package frontdoor

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// SessionCookie names the login page's session cookie.
const SessionCookie = "iotsafe_session"

// principal is an authenticated account.
type principal struct {
	ID   int64
	Name string
	// viaHeader: the credentials came in the Authorization header, which is then not
	// passed on to the device (it is the front door's secret, not the device's).
	viaHeader bool
}

var (
	errNoCredentials  = errors.New("log in: HTTP Basic, a Bearer token, or the login page")
	errBadCredentials = errors.New("wrong account name, password or token")
	errTooMany        = errors.New("too many failed logins: try again later")
)

// directory is a snapshot of accounts and tokens; Reload swaps in a new one, so removing
// an account or revoking a token takes effect at once without a query per request.
type directory struct {
	byName map[string]*registry.Account
	byID   map[int64]*registry.Account
	tokens map[string]registry.Token // by hash
}

func loadDirectory(ctx context.Context, reg *registry.Registry) (*directory, error) {
	accts, err := reg.Accounts(ctx)
	if err != nil {
		return nil, err
	}
	toks, err := reg.Tokens(ctx, "")
	if err != nil {
		return nil, err
	}
	d := &directory{byName: map[string]*registry.Account{}, byID: map[int64]*registry.Account{}, tokens: map[string]registry.Token{}}
	for _, a := range accts {
		d.byName[a.Name], d.byID[a.ID] = a, a
	}
	for _, t := range toks {
		if t.RevokedAt == nil {
			d.tokens[t.Hash] = t
		}
	}
	return d, nil
}

// authenticator checks credentials. Password checks (argon2id, ~19 MiB each) run at most
// two at a time; a success is remembered for a few minutes under a keyed hash, so HTTP
// Basic clients do not pay argon2 on every request.
type authenticator struct {
	sem      chan struct{}
	cacheKey [32]byte
	mu       sync.Mutex
	ok       map[[32]byte]time.Time
	limit    *failLimiter
	dummy    string // verified against for unknown names, so timing does not reveal accounts
}

const passwordCacheTTL = 5 * time.Minute

func newAuthenticator(limit *failLimiter) *authenticator {
	a := &authenticator{sem: make(chan struct{}, 2), ok: map[[32]byte]time.Time{}, limit: limit}
	rand.Read(a.cacheKey[:])
	a.dummy, _ = credential.HashPassword("not-a-real-password-" + time.Now().String())
	return a
}

// password checks name/pw from client address ip.
func (a *authenticator) password(ctx context.Context, dir *directory, ip, name, pw string) (principal, error) {
	// Failures count per (address, account) and per account: one address's failures
	// never lock out another account, nor an API token.
	pair := "pair:" + ip + "\x00" + name
	if a.limit.blocked(pair) || a.limit.blocked("account:"+name) {
		return principal{}, errTooMany
	}
	acct := dir.byName[name]
	hash := a.dummy
	if acct != nil && acct.Password != "" {
		hash = acct.Password
	}
	mac := hmac.New(sha256.New, a.cacheKey[:])
	mac.Write([]byte(name + "\x00" + hash + "\x00" + pw))
	var k [32]byte
	mac.Sum(k[:0])
	a.mu.Lock()
	exp, cached := a.ok[k]
	a.mu.Unlock()
	if cached && time.Now().Before(exp) && acct != nil {
		return principal{ID: acct.ID, Name: acct.Name, viaHeader: true}, nil
	}
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return principal{}, ctx.Err()
	}
	err := credential.VerifyPassword(hash, pw)
	<-a.sem
	if err != nil || acct == nil || acct.Password == "" {
		a.limit.fail(pair)
		a.limit.fail("account:" + name)
		return principal{}, errBadCredentials
	}
	a.mu.Lock()
	if len(a.ok) > 10000 {
		clear(a.ok)
	}
	a.ok[k] = time.Now().Add(passwordCacheTTL)
	a.mu.Unlock()
	return principal{ID: acct.ID, Name: acct.Name, viaHeader: true}, nil
}

// token checks a bearer token. A valid token is always accepted: tokens are random and
// cannot be guessed, so failures of others (from the same address, say) never refuse
// it; an address that keeps sending invalid tokens is told to slow down.
func (a *authenticator) token(dir *directory, ip, tok string) (principal, error) {
	t, ok := dir.tokens[credential.HashToken(tok)]
	if ok && t.Usable(time.Now()) && dir.byID[t.AccountID] != nil {
		return principal{ID: t.AccountID, Name: t.Account, viaHeader: true}, nil
	}
	if a.limit.blocked("token:" + ip) {
		return principal{}, errTooMany
	}
	a.limit.fail("token:" + ip)
	return principal{}, errBadCredentials
}

// knownName is name if it is an account, else a short hash of it: the access log must
// not keep what someone typed into the name field (it is sometimes their password).
func knownName(dir *directory, name string) string {
	if dir.byName[name] != nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "unknown:" + hex.EncodeToString(sum[:4])
}

// authenticate finds the caller of r: Authorization header first, then the session cookie.
func (s *Server) authenticate(r *http.Request, ip string) (principal, error) {
	dir := s.dir.Load()
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, _ := strings.Cut(h, " ")
		switch strings.ToLower(scheme) {
		case "basic":
			name, pw, ok := r.BasicAuth()
			if !ok {
				return principal{}, errBadCredentials
			}
			return s.auth.password(r.Context(), dir, ip, name, pw)
		case "bearer":
			return s.auth.token(dir, ip, strings.TrimSpace(cred))
		}
		return principal{}, errBadCredentials
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if sess, ok := s.sessions.get(c.Value); ok {
			if acct := dir.byID[sess.accountID]; acct != nil {
				return principal{ID: acct.ID, Name: acct.Name}, nil
			}
		}
	}
	return principal{}, errNoCredentials
}

// failLimiter counts failed logins per key (client address, account) in fixed windows.
type failLimiter struct {
	max    int
	window time.Duration
	mu     sync.Mutex
	m      map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

func newFailLimiter(max int, window time.Duration) *failLimiter {
	return &failLimiter{max: max, window: window, m: map[string]*failWindow{}}
}

func (l *failLimiter) blocked(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[key]
	return w != nil && time.Since(w.start) < l.window && w.n >= l.max
}

func (l *failLimiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[key]
	if w == nil || time.Since(w.start) >= l.window {
		if len(l.m) > 100000 {
			for k, v := range l.m {
				if time.Since(v.start) >= l.window {
					delete(l.m, k)
				}
			}
		}
		w = &failWindow{start: time.Now()}
		l.m[key] = w
	}
	w.n++
}

// sessionStore holds login-page sessions: in the registry, so that they outlive a hub
// restart, and in memory for the check on every request. Both are keyed by the SHA-256
// of the cookie: neither a copy of the registry nor a memory dump yields usable cookies.
// The registry is the truth; load replaces the memory copy with it (at start and after
// account changes, e.g. a password change that ended an account's sessions).
type sessionStore struct {
	ttl time.Duration
	reg *registry.Registry
	mu  sync.Mutex // also serialises create and delete with load, so none is lost
	m   map[[32]byte]session
}

type session struct {
	accountID int64
	expires   time.Time
}

const maxSessions = 100000

var errSessionsFull = errors.New("too many open sessions: try again later")

func newSessionStore(ttl time.Duration, reg *registry.Registry) *sessionStore {
	return &sessionStore{ttl: ttl, reg: reg, m: map[[32]byte]session{}}
}

// load replaces the memory copy with the registry's sessions that have not expired.
func (st *sessionStore) load(ctx context.Context) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	rows, err := st.reg.LoginSessions(ctx, time.Now())
	if err != nil {
		return err
	}
	m := make(map[[32]byte]session, len(rows))
	for _, r := range rows {
		var k [32]byte
		if b, err := hex.DecodeString(r.Hash); err == nil && len(b) == len(k) {
			copy(k[:], b)
			m[k] = session{accountID: r.AccountID, expires: r.ExpiresAt}
		}
	}
	st.m = m
	return nil
}

func (st *sessionStore) create(ctx context.Context, accountID int64) (string, error) {
	id, err := credential.NewSessionID()
	if err != nil {
		return "", err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.m) >= maxSessions {
		for k, v := range st.m {
			if time.Now().After(v.expires) {
				delete(st.m, k)
			}
		}
		if len(st.m) >= maxSessions {
			return "", errSessionsFull
		}
	}
	k := sha256.Sum256([]byte(id))
	sess := session{accountID: accountID, expires: time.Now().Add(st.ttl)}
	if err := st.reg.AddLoginSession(ctx, registry.LoginSession{Hash: hex.EncodeToString(k[:]), AccountID: accountID, ExpiresAt: sess.expires}); err != nil {
		return "", err
	}
	st.m[k] = sess
	return id, nil
}

func (st *sessionStore) get(id string) (session, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := sha256.Sum256([]byte(id))
	s, ok := st.m[k]
	if ok && time.Now().After(s.expires) {
		delete(st.m, k)
		return session{}, false
	}
	return s, ok
}

// delete ends a session (logout). It is gone from memory even when the registry cannot
// be written; the error says the session may come back at the next load.
func (st *sessionStore) delete(ctx context.Context, id string) error {
	k := sha256.Sum256([]byte(id))
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.m, k)
	return st.reg.RemoveLoginSession(ctx, hex.EncodeToString(k[:]))
}
