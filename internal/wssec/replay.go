package wssec

import (
	"container/heap"
	"fmt"
	"sync"
	"time"
)

// Replay refuses a message created outside the window around now, and a message id a
// key has already used within it. Ids are remembered only as long as their message could
// still be accepted, and only after the message verified, so only key holders fill it.
// Each key has its own ids and its own bound: a key that sends too fast fills only its
// own window, never another device's.
type Replay struct {
	Window time.Duration
	PerKey int // ids remembered per key at most; when a key's are all live, its new messages are refused (ErrBusy)

	mu   sync.Mutex
	keys map[string]*keyIDs
}

// keyIDs are one key's live message ids, with their expiry times in a heap so that
// expired ones leave in O(log n) each, without a scan.
type keyIDs struct {
	until map[string]time.Time
	order expiries
}

type expiry struct {
	id    string
	until time.Time
}

type expiries []expiry

func (e expiries) Len() int           { return len(e) }
func (e expiries) Less(i, j int) bool { return e[i].until.Before(e[j].until) }
func (e expiries) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *expiries) Push(x any)        { *e = append(*e, x.(expiry)) }
func (e *expiries) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// expire drops the ids whose messages can no longer be accepted at now.
func (k *keyIDs) expire(now time.Time) {
	for len(k.order) > 0 && !now.Before(k.order[0].until) {
		x := heap.Pop(&k.order).(expiry)
		if u, ok := k.until[x.id]; ok && u.Equal(x.until) {
			delete(k.until, x.id)
		}
	}
}

// DefaultWindow is how far a message's creation time may be from the receiver's clock.
const DefaultWindow = 5 * time.Minute

// DefaultPerKey bounds one key's remembered ids: a device sending ten messages a second
// stays under it with the default window.
const DefaultPerKey = 10000

// NewReplay is a replay window (DefaultWindow when window is 0) remembering at most
// perKey ids for each key (DefaultPerKey when 0).
func NewReplay(window time.Duration, perKey int) *Replay {
	if window <= 0 {
		window = DefaultWindow
	}
	if perKey <= 0 {
		perKey = DefaultPerKey
	}
	return &Replay{Window: window, PerKey: perKey, keys: map[string]*keyIDs{}}
}

// Check records (keyID, messageID) or says why the message is refused: ErrExpired,
// ErrReplay, or ErrBusy when the key's ids are all live.
func (r *Replay) Check(keyID, messageID string, created, now time.Time) error {
	if created.Before(now.Add(-r.Window)) || created.After(now.Add(r.Window)) {
		return fmt.Errorf("%w: created %s, the window is %s either side of %s", ErrExpired, created.UTC().Format(TimeLayout), r.Window, now.UTC().Format(TimeLayout))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[keyID]
	if k == nil {
		k = &keyIDs{until: map[string]time.Time{}}
		r.keys[keyID] = k
	}
	k.expire(now)
	if _, ok := k.until[messageID]; ok {
		return fmt.Errorf("%w: %s", ErrReplay, trim(messageID))
	}
	if len(k.until) >= r.PerKey {
		return fmt.Errorf("%w: key %s sent %d messages within the window; try again later", ErrBusy, trim(keyID), r.PerKey)
	}
	until := created.Add(r.Window)
	k.until[messageID] = until
	heap.Push(&k.order, expiry{id: messageID, until: until})
	return nil
}

// Forget takes (keyID, messageID) out of the window: for a message the receiver could
// not act on (its store was full), so the sender may send the same message again.
func (r *Replay) Forget(keyID, messageID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[keyID]; k != nil {
		delete(k.until, messageID) // its heap entry goes when it expires
	}
}

// Drop forgets a key's ids (the key was replaced or its device removed).
func (r *Replay) Drop(keyID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.keys, keyID)
}

// Len is how many ids are remembered, over all keys.
func (r *Replay) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.keys {
		n += len(k.until)
	}
	return n
}
