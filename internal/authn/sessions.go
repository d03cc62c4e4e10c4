package authn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// sessionStore holds login sessions: in the registry, so that they outlive a hub
// restart, and in memory for the check on every request. Both are keyed by the SHA-256
// of the cookie: neither a copy of the registry nor a memory dump yields usable cookies.
// The registry is the truth; load replaces the memory copy with it (at start and after
// account changes, e.g. a password change that ended an account's sessions).
type sessionStore struct {
	ttl   time.Duration
	store AccountStore
	mu    sync.Mutex // also serialises create and delete with load, so none is lost
	m     map[[32]byte]session
}

type session struct {
	accountID int64
	expires   time.Time
}

const maxSessions = 100000

func newSessionStore(ttl time.Duration, store AccountStore) *sessionStore {
	return &sessionStore{ttl: ttl, store: store, m: map[[32]byte]session{}}
}

// load replaces the memory copy with the registry's sessions that have not expired.
func (st *sessionStore) load(ctx context.Context) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	rows, err := st.store.LoginSessions(ctx, time.Now())
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
			return "", ErrSessionsFull
		}
	}
	k := sha256.Sum256([]byte(id))
	sess := session{accountID: accountID, expires: time.Now().Add(st.ttl)}
	if err := st.store.AddLoginSession(ctx, registry.LoginSession{Hash: hex.EncodeToString(k[:]), AccountID: accountID, ExpiresAt: sess.expires}); err != nil {
		return "", err
	}
	st.m[k] = sess
	return id, nil
}

func (st *sessionStore) get(id string) (session, bool) {
	k := sha256.Sum256([]byte(id))
	st.mu.Lock()
	s, ok := st.m[k]
	if ok && time.Now().After(s.expires) {
		delete(st.m, k)
		st.mu.Unlock()
		return session{}, false
	}
	st.mu.Unlock()
	if ok {
		return s, true
	}
	return st.lookup(k)
}

// SessionLookup is a store that answers for one session: another hub of a shared
// registry may have started it after this one loaded its sessions.
type SessionLookup interface {
	LoginSession(ctx context.Context, hash string, at time.Time) (registry.LoginSession, error)
}

// lookup asks the store for a session memory does not hold, and keeps it.
func (st *sessionStore) lookup(k [32]byte) (session, bool) {
	sl, ok := st.store.(SessionLookup)
	if !ok {
		return session{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := sl.LoginSession(ctx, hex.EncodeToString(k[:]), time.Now())
	if err != nil {
		return session{}, false
	}
	s := session{accountID: r.AccountID, expires: r.ExpiresAt}
	st.mu.Lock()
	if len(st.m) < maxSessions {
		st.m[k] = s
	}
	st.mu.Unlock()
	return s, true
}

func (st *sessionStore) delete(ctx context.Context, id string) error {
	k := sha256.Sum256([]byte(id))
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.m, k)
	return st.store.RemoveLoginSession(ctx, hex.EncodeToString(k[:]))
}
