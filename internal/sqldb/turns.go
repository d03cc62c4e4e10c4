package sqldb

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// turns hands one turn at a time to its callers, strictly in the order they asked
// (SQLite writers of one handle, see DB.writer). A waiter that gives up leaves the
// queue; one the turn reached meanwhile passes it on.
type turns struct {
	mu    sync.Mutex
	held  bool
	queue []chan struct{} // closed when the turn is handed to its waiter
}

// take waits for the turn, at most wait, and returns what hands it on (once).
func (q *turns) take(ctx context.Context, wait time.Duration) (release func(), err error) {
	q.mu.Lock()
	if !q.held {
		q.held = true
		q.mu.Unlock()
		return q.releaser(), nil
	}
	mine := make(chan struct{})
	q.queue = append(q.queue, mine)
	q.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-mine:
		return q.releaser(), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("database is locked: this process's other transactions held it for %v", wait)
	}
	q.mu.Lock()
	for i, c := range q.queue {
		if c == mine {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.mu.Unlock()
			return nil, err
		}
	}
	q.mu.Unlock()
	// Handed the turn while giving up: pass it on.
	q.releaser()()
	return nil, err
}

// waiting is how many wait for the turn.
func (q *turns) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

func (q *turns) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if len(q.queue) == 0 {
				q.held = false
				return
			}
			next := q.queue[0]
			q.queue = q.queue[1:]
			close(next) // the turn passes straight to it: held stays set
		})
	}
}
