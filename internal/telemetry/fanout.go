package telemetry

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// The store is the one place a notification fans out from. Two ways in:
//
//   - Subscribe: a reader of every commit (a broker's subscribers, later other
//     transports). It runs on a goroutine of its own, walking the feed the long polls
//     walk, so it sees this hub's commits and, on a shared store, the other hubs' in
//     the order the feed has them (commit order), each once, and never slows the
//     writer.
//   - SetDurableHook: the one thing that must hold a notification before its device is
//     answered (the MQTT bridge's queue). It runs in the appender's goroutine, beside the
//     commit, and its error fails the append.
//
// A notification's Via names the path that carried it in, so a subscriber that is itself
// a path skips what it already delivered (the broker its own MQTT messages).

// DurableHook takes notifications that must be durable somewhere else too before their
// appender is answered. It gets what Append and AppendOnce queue once they passed the
// store's checks (valid, within the device's budget) and, for AppendRelayed, what is
// above the source's mark: a once key found used in the commit, rare, has its items
// handed over all the same. It must return quickly on ctx's end.
type DurableHook func(ctx context.Context, items []Notification) error

// durable holds the hook; nil until one is set.
type durable struct{ fn atomic.Pointer[DurableHook] }

// SetDurableHook installs fn (nil removes it). Appends in flight keep the one they took.
func (s *Store) SetDurableHook(fn DurableHook) {
	if fn == nil {
		s.durable.fn.Store(nil)
		return
	}
	s.durable.fn.Store(&fn)
}

// hook is the installed DurableHook, or nil.
func (s *Store) hook() DurableHook {
	if p := s.durable.fn.Load(); p != nil {
		return *p
	}
	return nil
}

// alongside runs the durable hook for items while commit waits for the store, and joins
// the two: the store's error first, else the hook's as ErrOverloaded (stored, but not
// held by the hook: the caller retries, and the store will hold it twice).
func (s *Store) alongside(ctx context.Context, items []Notification, commit func() error) error {
	h := s.hook()
	if h == nil {
		return commit()
	}
	held := make(chan error, 1)
	mine := slices.Clone(items) // the writer sets ids and timestamps in items meanwhile
	go func() { held <- h(ctx, mine) }()
	err := commit()
	if herr := <-held; herr != nil && err == nil {
		return &overloadedError{herr}
	}
	return err
}

// overloadedError is a durable hook's refusal of a stored notification.
type overloadedError struct{ err error }

func (e *overloadedError) Error() string {
	return ErrOverloaded.Error() + ": stored, but not held where it must also be: " + e.err.Error()
}

func (e *overloadedError) Unwrap() []error { return []error{ErrOverloaded, e.err} }

// Subscribe calls fn with each batch of notifications committed from now on, until ctx
// ends: this hub's and, on a shared store, the other hubs', in the feed's order (there,
// "now" is where the follower is: a commit just before may come too). fn runs
// on one goroutine of the subscription, so it sees batches one at a time; a slow fn
// delays only itself (the batches it has not reached stay in memory). The slice is
// shared with every other reader: fn must not change it. The returned wait
// blocks until the subscription's goroutine has returned.
func (s *Store) Subscribe(ctx context.Context, fn func([]Notification)) (wait func()) {
	t := s.feed.current()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.done:
			}
			if len(t.items) > 0 {
				fn(t.items)
			}
			t = t.next
		}
	}()
	return wg.Wait
}
