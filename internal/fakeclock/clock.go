package fakeclock

import (
	"sync"
	"time"
)

// Clock is a time that moves only when told to.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New is a clock at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time; pass it where a func() time.Time is wanted.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
