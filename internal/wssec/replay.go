package wssec

import (
	"fmt"
	"sync"
	"time"
)

// Replay refuses a message created outside the window around now, and a message id a
// key has already used within it. Ids are remembered only as long as their message could
// still be accepted, and only after the message verified, so only key holders fill it.
type Replay struct {
	Window time.Duration
	Max    int // ids remembered at most; when full, new messages wait for room (refused)

	mu   sync.Mutex
	seen map[string]time.Time // key id + message id -> when it can be forgotten
}

// DefaultWindow is how far a message's creation time may be from the receiver's clock.
const DefaultWindow = 5 * time.Minute

// NewReplay is a replay window (DefaultWindow when window is 0) remembering at most max
// ids (200,000 when 0).
func NewReplay(window time.Duration, max int) *Replay {
	if window <= 0 {
		window = DefaultWindow
	}
	if max <= 0 {
		max = 200000
	}
	return &Replay{Window: window, Max: max, seen: map[string]time.Time{}}
}

// Check records (keyID, messageID) or says why the message is refused.
func (r *Replay) Check(keyID, messageID string, created, now time.Time) error {
	if created.Before(now.Add(-r.Window)) || created.After(now.Add(r.Window)) {
		return fmt.Errorf("%w: created %s, the window is %s either side of %s", ErrExpired, created.UTC().Format(TimeLayout), r.Window, now.UTC().Format(TimeLayout))
	}
	k := keyID + "\x00" + messageID
	r.mu.Lock()
	defer r.mu.Unlock()
	if until, ok := r.seen[k]; ok && now.Before(until) {
		return fmt.Errorf("%w: %s", ErrReplay, trim(messageID))
	}
	if len(r.seen) >= r.Max {
		for id, until := range r.seen {
			if !now.Before(until) {
				delete(r.seen, id)
			}
		}
		if len(r.seen) >= r.Max {
			return fmt.Errorf("%w: the replay window holds %d message ids; try again later", ErrExpired, r.Max)
		}
	}
	r.seen[k] = created.Add(r.Window)
	return nil
}

// Forget takes (keyID, messageID) out of the window: for a message the receiver could
// not act on (its store was full), so the sender may send the same message again.
func (r *Replay) Forget(keyID, messageID string) {
	r.mu.Lock()
	delete(r.seen, keyID+"\x00"+messageID)
	r.mu.Unlock()
}

// Len is how many ids are remembered.
func (r *Replay) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}
