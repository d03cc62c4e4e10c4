package control

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// DefaultPoll is how often Follow reads the change feed when nothing wakes it.
const DefaultPoll = time.Second

// Feed is the registry's change feed: the audit log, written in the same transaction as
// each change.
type Feed interface {
	Changes(ctx context.Context, after int64) ([]registry.Event, int64, error)
	// WatchChanges calls wake when a change commits (PostgreSQL's LISTEN/NOTIFY; a
	// SQLite registry returns at once) and fail when listening stops working.
	WatchChanges(ctx context.Context, wake func(), fail func(error))
}

// Follow applies the changes other processes made to the registry (another hub of a
// shared registry, a command that could not reach the admin socket) through the live
// subsystems, from the event after `after` on, until ctx ends: it reads the feed every
// poll, and at once when the registry says a change committed. A change Apply made here
// comes back through the feed too and finds nothing left to close.
func (c *Control) Follow(ctx context.Context, feed Feed, poll time.Duration, after int64, log *slog.Logger) {
	if c.live == nil {
		return
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	var failed int64 // a reload that failed (up to this event): tried again every poll
	wake := make(chan struct{}, 1)
	go feed.WatchChanges(ctx, func() {
		select {
		case wake <- struct{}{}:
		default: // a wake-up is pending already: it reads everything up to now
		}
	}, func(err error) {
		log.Warn("listening for registry changes failed; polling meanwhile", "every", poll, "err", err)
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		qctx, cancel := context.WithTimeout(ctx, poll*5)
		evs, next, err := feed.Changes(qctx, after)
		cancel()
		if err != nil {
			log.Warn("reading the registry's change feed failed; retrying", "err", err)
			continue
		}
		after = next
		failed = c.applyEvents(evs, failed, log)
	}
}

// applyEvents is each event's consequence: what revoked or removed devices and keys hold
// closes, a moved session is let go, anything else (grants, groups, accounts, enrolments,
// removals) rebuilds the policy and every view once. failed is an earlier reload that
// failed, tried again with these events (or alone); the reload that fails now is
// returned, 0 when none did.
func (c *Control) applyEvents(evs []registry.Event, failed int64, log *slog.Logger) int64 {
	reloadUpTo := failed
	closed := false
	for _, e := range evs {
		var why, fp string
		switch e.Kind {
		case registry.EventRevoked:
			why = WhyRevoked
		case registry.EventDeviceRemoved:
			why = WhyRemoved
		case registry.EventKeyRevoked:
			why, fp = WhyRevoked, strings.TrimPrefix(e.Detail, "key ")
		case registry.EventSSHCertRevoked: // "key FP: ..."
			why = WhyCertRevoked
			if f := strings.Fields(e.Detail); len(f) > 1 {
				fp = strings.TrimSuffix(f[1], ":")
			}
		case registry.EventSSHCAUntrusted: // "CA NAME FP"
			if f := strings.Fields(e.Detail); len(f) == 3 {
				c.mu.Lock()
				n := c.live.CloseCA(f[2], WhyCAUntrusted)
				c.mu.Unlock()
				if n > 0 {
					log.Info("closed sessions after a CA was no longer trusted elsewhere", "event", "change_applied", "ca", f[1], "closed", n)
				}
			}
			reloadUpTo = max(reloadUpTo, e.ID)
			continue
		case registry.EventSessionMoved:
			c.live.Moved(e.Device, e.Hub)
			continue
		case registry.EventProfileApplied:
			c.mu.Lock()
			n := c.live.CloseProfile(e.Detail, WhyProfileChanged(e.Detail))
			c.mu.Unlock()
			if n > 0 {
				log.Info("closed sessions after a profile was applied elsewhere; they come back under its new version",
					"event", "change_applied", "profile", e.Detail, "closed", n)
			}
			continue
		default:
			reloadUpTo = max(reloadUpTo, e.ID)
			continue
		}
		closed = true
		c.mu.Lock()
		n := c.live.Close(e.Device, fp, why)
		c.mu.Unlock()
		if e.Kind == registry.EventDeviceRemoved {
			c.live.Forget(e.Device)
			reloadUpTo = max(reloadUpTo, e.ID)
		}
		if n > 0 {
			log.Info("closed sessions after a registry change made elsewhere",
				"event", "change_applied", "device", e.Device, "change", e.Kind, "closed", n)
		}
	}
	// Once per batch: a reload refreshes the views too (and one the hub skips because it
	// read past these changes already did); revocations alone need the views only.
	switch {
	case reloadUpTo > 0:
		err := c.live.Reload(reloadUpTo)
		switch {
		case err != nil && failed == 0:
			// Said once; retried every poll (a change made meanwhile is folded in).
			log.Error("applying a registry change failed; retrying every poll until it works", "event_id", reloadUpTo, "err", err)
			return reloadUpTo
		case err != nil:
			return reloadUpTo
		case failed > 0:
			log.Info("applied the registry change that failed before", "event", "change_applied", "event_id", reloadUpTo)
		}
	case closed:
		c.live.Refresh()
	}
	return 0
}
