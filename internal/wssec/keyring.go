package wssec

import (
	"crypto/subtle"
	"fmt"
	"sync"
)

// Keyring remembers the suite keys derived from each key, so HKDF (a third of the cost
// of sealing or opening a small message) runs once per key and suite, not per message.
// A nil Keyring derives every time. Reset forgets everything: the hub's endpoint does so
// whenever the registry changes, so a replaced or removed key's material goes at once.
type Keyring struct {
	mu  sync.Mutex
	m   map[ringKey]ringEntry
	max int
}

type ringKey struct{ id, suite string }

type ringEntry struct {
	secret  []byte
	derived Derived
}

// NewKeyring holds up to max keys (65,536 when 0); past that it starts again empty.
func NewKeyring(max int) *Keyring {
	if max <= 0 {
		max = 65536
	}
	return &Keyring{m: map[ringKey]ringEntry{}, max: max}
}

// Derive is s.Derive(k), remembered.
func (r *Keyring) Derive(s *Suite, k Key) (Derived, error) {
	if r == nil {
		return s.Derive(k)
	}
	rk := ringKey{k.ID, s.Name}
	r.mu.Lock()
	e, ok := r.m[rk]
	r.mu.Unlock()
	if ok && subtle.ConstantTimeCompare(e.secret, k.Secret) == 1 {
		return e.derived, nil
	}
	d, err := s.Derive(k)
	if err != nil {
		return Derived{}, err
	}
	r.mu.Lock()
	if len(r.m) >= r.max {
		clear(r.m)
	}
	r.m[rk] = ringEntry{secret: append([]byte(nil), k.Secret...), derived: d}
	r.mu.Unlock()
	return d, nil
}

// Reset forgets every derived key.
func (r *Keyring) Reset() {
	r.mu.Lock()
	clear(r.m)
	r.mu.Unlock()
}

// Seal is the package's Seal with the derived keys remembered.
func (r *Keyring) Seal(f Format, m Message, s *Suite, k Key) ([]byte, error) {
	if err := checkMessage(m); err != nil {
		return nil, err
	}
	d, err := r.Derive(s, k)
	if err != nil {
		return nil, err
	}
	switch f {
	case CSec:
		return sealCSec(m, s, k.ID, d)
	case SecRec:
		return sealSecRec(m, s, k.ID, d)
	}
	return nil, fmt.Errorf("wssec: unknown format %q", f)
}
