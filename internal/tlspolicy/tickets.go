package tlspolicy

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"sync"
	"time"
)

// DefaultTicketLifetime is how long a session ticket resumes a session and how long its
// key stays in memory, unless the policy says otherwise.
const DefaultTicketLifetime = 24 * time.Hour

// maxTicketLifetime is Go's own bound: it refuses older tickets, whatever their key.
const maxTicketLifetime = 7 * 24 * time.Hour

// ticketKeys seals the listener's session tickets with keys of its own instead of Go's,
// which stay in memory for 7 days: whoever reads a ticket key out of the hub's memory
// can open every TLS 1.2 session whose ticket it sealed (the ticket holds the session's
// master secret and travels in clear), so a key is kept only for the lifetime, and a
// session resumes only within the lifetime of the handshake that made it: in TLS 1.2,
// the full handshake whose master secret every resumption reuses (Go seals it again in
// a new ticket, under the key of the day); in TLS 1.3, each resumption is a session of
// its own, with a new secret from a new key exchange. A key seals new tickets for the
// first half of its lifetime.
type ticketKeys struct {
	lifetime time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys []*ticketKey // newest first
}

type ticketKey struct {
	id      [ticketIDLen]byte
	aead    cipher.AEAD
	created time.Time
}

const ticketIDLen = 8

func newTicketKeys(lifetime time.Duration, now func() time.Time) *ticketKeys {
	return &ticketKeys{lifetime: lifetime, now: now}
}

// install makes c seal and open its session tickets with k.
func (k *ticketKeys) install(c *tls.Config) {
	c.WrapSession = k.wrap
	c.UnwrapSession = k.unwrap
}

// current is the key that seals new tickets, made when the newest is half its lifetime
// old; keys past their lifetime are dropped on the way.
func (k *ticketKeys) current() (*ticketKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	k.dropOld(now)
	if len(k.keys) > 0 && now.Sub(k.keys[0].created) < k.lifetime/2 {
		return k.keys[0], nil
	}
	var secret [32]byte
	key := &ticketKey{created: now}
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, err
	}
	if _, err := rand.Read(key.id[:]); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(secret[:])
	clear(secret[:])
	if err != nil {
		return nil, err
	}
	if key.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	k.keys = append([]*ticketKey{key}, k.keys...)
	// Dropped when its time is up even if no handshake comes to drop it.
	time.AfterFunc(k.lifetime, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.dropOld(k.now())
	})
	return key, nil
}

// dropOld forgets keys past their lifetime; k.mu is held.
func (k *ticketKeys) dropOld(now time.Time) {
	kept := k.keys[:0]
	for _, key := range k.keys {
		if now.Sub(key.created) < k.lifetime {
			kept = append(kept, key)
		}
	}
	clear(k.keys[len(kept):])
	k.keys = kept
}

// find is the live key with id, or nil.
func (k *ticketKeys) find(id []byte) *ticketKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dropOld(k.now())
	for _, key := range k.keys {
		if subtle.ConstantTimeCompare(key.id[:], id) == 1 {
			return key
		}
	}
	return nil
}

// wrap seals a session: key id, nonce, then the sealed state (the id authenticated too).
func (k *ticketKeys) wrap(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	state, err := ss.Bytes()
	if err != nil {
		return nil, err
	}
	key, err := k.current()
	if err != nil {
		return nil, err
	}
	out := make([]byte, ticketIDLen+key.aead.NonceSize(), ticketIDLen+key.aead.NonceSize()+len(state)+key.aead.Overhead())
	copy(out, key.id[:])
	if _, err := rand.Read(out[ticketIDLen:]); err != nil {
		return nil, err
	}
	return key.aead.Seal(out, out[ticketIDLen:], state, out[:ticketIDLen]), nil
}

// unwrap opens a ticket. One it cannot open (an unknown or dropped key, a forgery, an
// older ticket) gives nil and no error: the client gets a full handshake, not a failed
// connection.
func (k *ticketKeys) unwrap(identity []byte, _ tls.ConnectionState) (*tls.SessionState, error) {
	if len(identity) < ticketIDLen {
		return nil, nil
	}
	key := k.find(identity[:ticketIDLen])
	if key == nil || len(identity) < ticketIDLen+key.aead.NonceSize()+key.aead.Overhead() {
		return nil, nil
	}
	nonce := identity[ticketIDLen : ticketIDLen+key.aead.NonceSize()]
	state, err := key.aead.Open(nil, nonce, identity[ticketIDLen+key.aead.NonceSize():], identity[:ticketIDLen])
	if err != nil {
		return nil, nil
	}
	ss, err := tls.ParseSessionState(state)
	if err != nil {
		return nil, nil
	}
	if created, ok := sessionCreated(state); !ok || k.now().Sub(created) >= k.lifetime {
		return nil, nil
	}
	return ss, nil
}

// sessionCreated reads when a server's session was made (its full handshake) from its
// encoding, whose layout SessionState's documentation gives: version (2 bytes), type (1:
// server), cipher suite (2), created_at (8, Unix seconds).
func sessionCreated(state []byte) (time.Time, bool) {
	if len(state) < 13 || state[2] != 1 {
		return time.Time{}, false
	}
	return time.Unix(int64(binary.BigEndian.Uint64(state[5:13])), 0), true
}
