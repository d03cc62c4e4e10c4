//go:build !linux

package netready

import (
	"errors"
	"sync"
)

// Poller is not available here: callers keep a goroutine per connection.
type Poller struct {
	mu    sync.Mutex
	waits map[uint64]*Wait
	next  uint64
}

var errUnsupported = errors.New("netready: needs epoll (Linux)")

// Default fails on this system.
func Default() (*Poller, error) { return nil, errUnsupported }

// New fails on this system.
func New() (*Poller, error) { return nil, errUnsupported }

func (p *Poller) forget(uint64) {}
func (w *Wait) ctl() error      { return errUnsupported }
func (w *Wait) del()            {}
