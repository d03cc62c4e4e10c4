package netready

import (
	"fmt"
	"sync"
	"syscall"
	"time"
)

// Poller is one epoll instance and the goroutine that waits on it.
type Poller struct {
	epfd  int
	mu    sync.Mutex
	waits map[uint64]*Wait
	next  uint64
}

var (
	defaultOnce   sync.Once
	defaultPoller *Poller
	defaultErr    error
)

// Default is the process's Poller, started on first use; it lives as long as the
// process, as the runtime's own poller does.
func Default() (*Poller, error) {
	defaultOnce.Do(func() { defaultPoller, defaultErr = New() })
	return defaultPoller, defaultErr
}

// New starts a Poller.
func New() (*Poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("netready: epoll_create1: %w", err)
	}
	p := &Poller{epfd: fd, waits: map[uint64]*Wait{}}
	go p.loop()
	return p, nil
}

// events a Wait is armed for: input, the peer's end of writing, and (always reported)
// errors and hang-ups; one report per arming.
const events = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

func (p *Poller) loop() {
	evs := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, evs, -1)
		if err != nil {
			if err != syscall.EINTR {
				time.Sleep(10 * time.Millisecond) // not expected; never spin
			}
			continue
		}
		for _, ev := range evs[:n] {
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			p.mu.Lock()
			w := p.waits[key]
			p.mu.Unlock()
			if w != nil {
				w.fire()
			}
		}
	}
}

func (p *Poller) forget(key uint64) {
	p.mu.Lock()
	delete(p.waits, key)
	p.mu.Unlock()
}

// ctl adds or re-arms the socket, with w.mu held.
func (w *Wait) ctl() error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(uint32(w.key)), Pad: int32(uint32(w.key >> 32))}
	var err error
	cerr := w.rc.Control(func(fd uintptr) {
		op := syscall.EPOLL_CTL_MOD
		if !w.added {
			op = syscall.EPOLL_CTL_ADD
		}
		if err = syscall.EpollCtl(w.p.epfd, op, int(fd), &ev); err == nil {
			w.added = true
		}
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("netready: epoll_ctl: %w", err)
	}
	return nil
}

// del takes the socket out of the set, with w.mu held.
func (w *Wait) del() {
	w.rc.Control(func(fd uintptr) {
		syscall.EpollCtl(w.p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
}
