package authn

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// Errors of an account login; callers branch on them for the status they answer.
var (
	ErrBadCredentials = errors.New("wrong account name, password or token")
	ErrTooMany        = errors.New("too many failed logins: try again later")
	ErrSessionsFull   = errors.New("too many open sessions: try again later")
)

// Principal is an authenticated account.
type Principal struct {
	ID   int64
	Name string
	// Stamp, for a password login, changes whenever the account's password does (a
	// digest of its hash): a connection that logged in with the old one can be told.
	Stamp string
}

// stamp is the digest of an account's password hash (never the hash itself).
func stamp(acct *registry.Account) string {
	sum := sha256.Sum256([]byte(acct.Password))
	return hex.EncodeToString(sum[:8])
}

// Stamp is the account's current password stamp (Principal.Stamp); ok is false when
// the account is gone.
func (a *Accounts) Stamp(id int64) (s string, ok bool) {
	acct := a.dir.Load().byID[id]
	if acct == nil {
		return "", false
	}
	return stamp(acct), true
}

// Credential is the account's credential generation for its tokens: its password stamp
// and token epoch, so a new password or a logout ends the tokens issued before; ok is
// false when the account is gone.
func (a *Accounts) Credential(id int64) (cred string, ok bool) {
	acct := a.dir.Load().byID[id]
	if acct == nil {
		return "", false
	}
	return stamp(acct) + "." + strconv.FormatInt(acct.TokenEpoch, 36), true
}

// AccountStore is what Accounts reads and writes in the registry.
type AccountStore interface {
	Accounts(ctx context.Context) ([]*registry.Account, error)
	Tokens(ctx context.Context, account string) ([]registry.Token, error)
	LoginSessions(ctx context.Context, now time.Time) ([]registry.LoginSession, error)
	AddLoginSession(ctx context.Context, s registry.LoginSession) error
	RemoveLoginSession(ctx context.Context, hash string) error
}

// AccountLimits bound logins; a zero field takes its default.
type AccountLimits struct {
	// MaxFailedLogins per (client address, account) and per account within LoginWindow
	// before further attempts get ErrTooMany; 0 means 10.
	MaxFailedLogins int
	// LoginWindow is the failed-login counting window; 0 means 5m.
	LoginWindow time.Duration
	// SessionTTL is how long a login session lasts; 0 means 12h.
	SessionTTL time.Duration
}

func (l *AccountLimits) applyDefaults() {
	if l.MaxFailedLogins <= 0 {
		l.MaxFailedLogins = 10
	}
	if l.LoginWindow <= 0 {
		l.LoginWindow = 5 * time.Minute
	}
	if l.SessionTTL <= 0 {
		l.SessionTTL = 12 * time.Hour
	}
}

// Accounts checks the people and platform apps of the hub (the front door's portal and
// proxy, the REST API, MQTT platform logins) against one snapshot of the registry's
// accounts, API tokens and login sessions, under one failed-login limiter: a password
// guessed on MQTT counts against the same budget as on the portal.
type Accounts struct {
	store    AccountStore
	dir      atomic.Pointer[directory]
	pw       *passwordChecker
	sessions *sessionStore
}

// NewAccounts reads the store's accounts, tokens and login sessions.
func NewAccounts(ctx context.Context, store AccountStore, limits AccountLimits) (*Accounts, error) {
	limits.applyDefaults()
	a := &Accounts{store: store,
		pw:       newPasswordChecker(newFailLimiter(limits.MaxFailedLogins, limits.LoginWindow)),
		sessions: newSessionStore(limits.SessionTTL, store),
	}
	if err := a.Reload(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload re-reads accounts, tokens and login sessions (after account and token
// changes): a removed account, a revoked token or an ended session stops at once,
// without a query per request.
func (a *Accounts) Reload(ctx context.Context) error {
	d, err := loadDirectory(ctx, a.store)
	if err != nil {
		return err
	}
	if err := a.sessions.load(ctx); err != nil {
		return err
	}
	a.dir.Store(d)
	return nil
}

// Password checks an account's password from client address ip, under the failed-login
// limits.
func (a *Accounts) Password(ctx context.Context, ip, name, password string) (Principal, error) {
	return a.pw.check(ctx, a.dir.Load(), ip, name, password)
}

// Token checks an account's API token. A valid token is always accepted: tokens are
// random and cannot be guessed, so failures of others (from the same address, say) never
// refuse it; an address that keeps sending invalid tokens is told to slow down.
func (a *Accounts) Token(ip, token string) (Principal, error) {
	dir := a.dir.Load()
	t, ok := dir.tokens[credential.HashToken(token)]
	if ok && t.Usable(time.Now()) && dir.byID[t.AccountID] != nil {
		return Principal{ID: t.AccountID, Name: t.Account}, nil
	}
	if a.pw.limit.blocked("token:" + ip) {
		return Principal{}, ErrTooMany
	}
	a.pw.limit.fail("token:" + ip)
	return Principal{}, ErrBadCredentials
}

// Name returns a live account's name.
func (a *Accounts) Name(id int64) (string, bool) {
	acct := a.dir.Load().byID[id]
	if acct == nil {
		return "", false
	}
	return acct.Name, true
}

// LogName is name if it is an account, else a short hash of it: an access log must not
// keep what someone typed into the name field (it is sometimes their password).
func (a *Accounts) LogName(name string) string {
	if a.dir.Load().byName[name] != nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "unknown:" + hex.EncodeToString(sum[:4])
}

// NewSession starts a login session for an account and returns its cookie value.
func (a *Accounts) NewSession(ctx context.Context, accountID int64) (string, error) {
	return a.sessions.create(ctx, accountID)
}

// Session returns the live account of a login session's cookie value.
func (a *Accounts) Session(cookie string) (Principal, bool) {
	s, ok := a.sessions.get(cookie)
	if !ok {
		return Principal{}, false
	}
	acct := a.dir.Load().byID[s.accountID]
	if acct == nil {
		return Principal{}, false
	}
	return Principal{ID: acct.ID, Name: acct.Name}, true
}

// EndSession ends a login session (logout). It is gone from memory even when the
// registry cannot be written; the error says it may come back at the next Reload.
func (a *Accounts) EndSession(ctx context.Context, cookie string) error {
	return a.sessions.delete(ctx, cookie)
}

// directory is a snapshot of accounts and tokens; Reload swaps in a new one.
type directory struct {
	byName map[string]*registry.Account
	byID   map[int64]*registry.Account
	tokens map[string]registry.Token // by hash
}

func loadDirectory(ctx context.Context, store AccountStore) (*directory, error) {
	accts, err := store.Accounts(ctx)
	if err != nil {
		return nil, err
	}
	toks, err := store.Tokens(ctx, "")
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

// passwordChecker checks passwords. Checks (argon2id, ~19 MiB each) run at most two at a
// time; a success is remembered for a few minutes under a keyed hash, so HTTP Basic
// clients do not pay argon2 on every request.
type passwordChecker struct {
	sem      chan struct{}
	cacheKey [32]byte
	mu       sync.Mutex
	ok       map[[32]byte]time.Time
	limit    *failLimiter
	dummy    string // verified against for unknown names, so timing does not reveal accounts
}

const passwordCacheTTL = 5 * time.Minute

func newPasswordChecker(limit *failLimiter) *passwordChecker {
	c := &passwordChecker{sem: make(chan struct{}, 2), ok: map[[32]byte]time.Time{}, limit: limit}
	rand.Read(c.cacheKey[:])
	c.dummy, _ = credential.HashPassword("not-a-real-password-" + time.Now().String())
	return c
}

func (c *passwordChecker) check(ctx context.Context, dir *directory, ip, name, pw string) (Principal, error) {
	// Failures count per (address, account) and per account: one address's failures
	// never lock out another account, nor an API token.
	pair := "pair:" + ip + "\x00" + name
	if c.limit.blocked(pair) || c.limit.blocked("account:"+name) {
		return Principal{}, ErrTooMany
	}
	acct := dir.byName[name]
	hash := c.dummy
	if acct != nil && acct.Password != "" {
		hash = acct.Password
	}
	mac := hmac.New(sha256.New, c.cacheKey[:])
	mac.Write([]byte(name + "\x00" + hash + "\x00" + pw))
	var k [32]byte
	mac.Sum(k[:0])
	c.mu.Lock()
	exp, cached := c.ok[k]
	c.mu.Unlock()
	if cached && time.Now().Before(exp) && acct != nil {
		return Principal{ID: acct.ID, Name: acct.Name, Stamp: stamp(acct)}, nil
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return Principal{}, ctx.Err()
	}
	err := credential.VerifyPassword(hash, pw)
	<-c.sem
	if err != nil || acct == nil || acct.Password == "" {
		c.limit.fail(pair)
		c.limit.fail("account:" + name)
		return Principal{}, ErrBadCredentials
	}
	c.mu.Lock()
	if len(c.ok) > 10000 {
		clear(c.ok)
	}
	c.ok[k] = time.Now().Add(passwordCacheTTL)
	c.mu.Unlock()
	return Principal{ID: acct.ID, Name: acct.Name, Stamp: stamp(acct)}, nil
}
