package netready

import (
	"errors"
	"sync"
	"syscall"
	"time"
)

// ErrStopped is Arm's error once the Wait is stopped.
var ErrStopped = errors.New("netready: the wait is stopped")

// Wait is one connection's registration with a Poller.
type Wait struct {
	p    *Poller
	rc   syscall.RawConn
	key  uint64
	wake func()

	mu       sync.Mutex
	added    bool // in the epoll set (re-armed with EPOLL_CTL_MOD)
	armed    bool // a wake is due
	stopped  bool
	deadline time.Time
	timer    *time.Timer
}

// Watch registers c with p; wake is called once per Arm (from the poller's goroutine
// or a timer's: it must not block, and usually starts a goroutine).
func (p *Poller) Watch(c syscall.Conn, wake func()) (*Wait, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	w := &Wait{p: p, rc: rc, wake: wake}
	p.mu.Lock()
	p.next++
	w.key = p.next
	p.waits[w.key] = w
	p.mu.Unlock()
	return w, nil
}

// Arm asks for one wake: once the connection has input or hangs up, once deadline
// passes (the zero time: no deadline), or on Wake, whichever comes first. Input that is
// already there wakes at once. An error (the connection is closed, the Wait stopped)
// means no wake will come.
func (w *Wait) Arm(deadline time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrStopped
	}
	w.armed = true
	if err := w.ctl(); err != nil {
		w.armed = false
		return err
	}
	w.deadline = deadline
	switch {
	case deadline.IsZero():
		if w.timer != nil {
			w.timer.Stop()
		}
	case w.timer == nil:
		w.timer = time.AfterFunc(time.Until(deadline), w.expire)
	default:
		w.timer.Reset(time.Until(deadline))
	}
	return nil
}

// Wake wakes the Wait now if it is armed.
func (w *Wait) Wake() { w.fire() }

// Stop ends the Wait: no wake comes after it returns, and the poller forgets it.
func (w *Wait) Stop() {
	w.mu.Lock()
	w.stopped, w.armed = true, false
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.added {
		w.del() // fails once the connection is closed: the socket has left the set then
	}
	w.mu.Unlock()
	w.p.forget(w.key)
}

// fire wakes once per Arm.
func (w *Wait) fire() {
	w.mu.Lock()
	if !w.armed {
		w.mu.Unlock()
		return
	}
	w.armed = false
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.wake()
}

// expire is the deadline timer's: a timer that an earlier Arm set and a later one
// moved may still run; it only wakes once the current deadline has passed.
func (w *Wait) expire() {
	w.mu.Lock()
	if !w.armed || w.deadline.IsZero() {
		w.mu.Unlock()
		return
	}
	if d := time.Until(w.deadline); d > 0 {
		w.timer.Reset(d)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.fire()
}
