package telemetry

import (
	"context"
	"sync"
)

// feed hands every committed batch to waiters (long polls, streams) without a query per
// waiter: a linked list of ticks, each closed when its batch is committed. A waiter holds
// the tick current when it last looked at the database and walks forward from it; ticks
// no waiter holds any more are garbage.
type feed struct {
	mu  sync.Mutex
	cur *tick
}

type tick struct {
	done  chan struct{} // closed once items and next are set
	items []Notification
	next  *tick
}

func newFeed() *feed { return &feed{cur: &tick{done: make(chan struct{})}} }

// current is the tick the next commit will close.
func (f *feed) current() *tick {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// publish announces a committed batch.
func (f *feed) publish(items []Notification) {
	f.mu.Lock()
	t := f.cur
	t.items, t.next = items, &tick{done: make(chan struct{})}
	f.cur = t.next
	f.mu.Unlock()
	close(t.done)
}

// waitFrom returns the notifications of batches committed from t on that match flt,
// blocking until there is at least one or ctx ends.
func waitFrom(ctx context.Context, t *tick, flt *Filter) ([]Notification, *tick, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, t, ctx.Err()
		case <-t.done:
		}
		var out []Notification
		for _, n := range t.items {
			if flt.matches(&n) {
				out = append(out, n)
				if len(out) == flt.Take {
					break
				}
			}
		}
		t = t.next
		if len(out) > 0 {
			return out, t, nil
		}
	}
}
