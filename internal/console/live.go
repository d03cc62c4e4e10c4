package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// livePoll is how often the live feed reads the audit log while anyone follows it.
const livePoll = time.Second

// liveFeed follows the registry's audit log for the console's open pages: one reader
// for all of them, running only while a page follows, telling each page when an event
// it cares about arrives. A page then fetches its own fresh rendering: the browser never
// polls per device, and what it shows is always the server's escaped HTML.
type liveFeed struct {
	reg Registry
	log *slog.Logger

	mu        sync.Mutex
	subs      map[*liveSub]struct{}
	perAcct   map[int64]int
	running   bool
	stop      chan struct{}
	closeOnce sync.Once
	// positioned is closed once the feed first knew where the log ended (tests wait on
	// it: an event before that is not news).
	positioned     chan struct{}
	positionedOnce sync.Once
}

type liveSub struct {
	account int64
	wants   func(registry.Event) bool
	wake    chan struct{} // capacity 1: a page needs one "changed", however many events
}

func newLiveFeed(reg Registry, log *slog.Logger) *liveFeed {
	return &liveFeed{reg: reg, log: log, subs: map[*liveSub]struct{}{}, perAcct: map[int64]int{}, stop: make(chan struct{}), positioned: make(chan struct{})}
}

var errTooManyStreams = fmt.Errorf("too many live pages open: close some (at most %d per account, %d in all)", maxStreamsPerAccount, maxStreams)

func (f *liveFeed) subscribe(account int64, wants func(registry.Event) bool) (*liveSub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) >= maxStreams || f.perAcct[account] >= maxStreamsPerAccount {
		return nil, errTooManyStreams
	}
	s := &liveSub{account: account, wants: wants, wake: make(chan struct{}, 1)}
	f.subs[s] = struct{}{}
	f.perAcct[account]++
	if !f.running {
		f.running = true
		go f.run()
	}
	return s, nil
}

func (f *liveFeed) unsubscribe(s *liveSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, s)
	if f.perAcct[s.account]--; f.perAcct[s.account] <= 0 {
		delete(f.perAcct, s.account)
	}
}

func (f *liveFeed) close() { f.closeOnce.Do(func() { close(f.stop) }) }

// run reads the events past the newest one it saw, every livePoll, until nobody follows.
func (f *liveFeed) run() {
	last := int64(-1)
	t := time.NewTicker(livePoll)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var evs []registry.Event
		var err error
		if last <= 0 {
			// Where the log ends now: what comes after it is news. (An empty log is asked
			// again: Events reads no "after 0".)
			evs, err = f.reg.Events(ctx, registry.EventFilter{Limit: 1})
			if err == nil && len(evs) > 0 {
				last = evs[len(evs)-1].ID
				f.positionedOnce.Do(func() { close(f.positioned) })
			}
			evs = nil
		} else {
			evs, err = f.reg.Events(ctx, registry.EventFilter{After: last, Limit: 1000})
		}
		cancel()
		if err != nil {
			f.log.Warn("console: reading the audit log for live pages failed; retrying", "err", err)
		}
		if len(evs) > 0 {
			last = evs[len(evs)-1].ID
		}
		f.mu.Lock()
		if len(f.subs) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		for s := range f.subs {
			for _, e := range evs {
				if s.wants(e) {
					select {
					case s.wake <- struct{}{}:
					default:
					}
					break
				}
			}
		}
		f.mu.Unlock()
		select {
		case <-f.stop:
			f.mu.Lock()
			f.running = false
			f.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// stream is a page's live stream (server-sent events): "changed" when an event of the
// page's device (or, on the fleet and audit pages, any device the caller sees) arrives,
// at most one a second.
func (c *Console) stream(w http.ResponseWriter, r *http.Request, cl caller) {
	device := r.URL.Query().Get("device")
	if device != "" && !c.d.Policy().AllowedAccount(cl.ID, device, registry.RightView) {
		c.fail(w, http.StatusNotFound, "no such device")
		return
	}
	scope := c.scope(cl, registry.RightView)
	sub, err := c.live.subscribe(cl.ID, func(e registry.Event) bool {
		if device != "" {
			return e.Device == device
		}
		return c.visible(cl, scope, e.Device)
	})
	if err != nil {
		c.fail(w, http.StatusTooManyRequests, err.Error())
		return
	}
	defer c.live.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w) // through the front door's access log's writer
	write := func(s string) bool {
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a page that does not read is let go
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 3000\n\n") {
		return
	}
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.live.stop:
			return
		case <-ping.C:
			if !write(": ping\n\n") {
				return
			}
		case <-sub.wake:
			// The session may have ended meanwhile (logout, password change).
			if _, ok := c.d.Accounts.Session(cl.sid); !ok {
				write("event: ended\ndata: {}\n\n")
				return
			}
			if !write("event: changed\ndata: {}\n\n") {
				return
			}
		}
	}
}
