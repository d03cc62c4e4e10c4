package hub

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// DefaultChangePoll is how often the hub reads the registry's change feed.
const DefaultChangePoll = time.Second

// watchChanges applies what other processes changed in the registry (revocations,
// removals, grants, accounts) even when they could not tell the hub over the admin socket:
// the admin socket makes a change take effect at once; this makes sure it always does,
// within a poll. The feed is the audit log, written in the same transaction as each change.
// On PostgreSQL the registry also wakes the hub the moment a change commits (another
// hub's, or an admin command's on another machine), so it does not wait for the poll.
func (h *Hub) watchChanges(ctx context.Context, every time.Duration, after int64) {
	t := time.NewTicker(every)
	defer t.Stop()
	wake := make(chan struct{}, 1)
	go h.reg.WatchChanges(ctx, func() {
		select {
		case wake <- struct{}{}:
		default: // a wake-up is pending already: it reads everything up to now
		}
	}, func(err error) {
		h.log.Warn("listening for registry changes failed; polling every second meanwhile", "err", err)
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		qctx, cancel := context.WithTimeout(ctx, every*5)
		evs, next, err := h.reg.Changes(qctx, after)
		cancel()
		if err != nil {
			h.log.Warn("reading the registry's change feed failed; retrying", "err", err)
			continue
		}
		after = next
		h.applyChanges(evs)
	}
}

// applyChanges closes the sessions revoked or removed devices and keys still hold, and
// rebuilds the access policy once if grants or accounts changed.
func (h *Hub) applyChanges(evs []registry.Event) {
	if len(evs) > 0 {
		h.kickPorts() // a new device brings sockets, maybe on a new port
	}
	reload, devicesChanged := false, false
	for _, e := range evs {
		var why, fp string
		switch e.Kind {
		case registry.EventRevoked:
			why = "key revoked"
		case registry.EventDeviceRemoved:
			why = "device removed"
		case registry.EventKeyRevoked:
			why, fp = "key revoked", strings.TrimPrefix(e.Detail, "key ")
		case registry.EventSessionMoved:
			// Another hub of the registry has the device now: this hub's session of it is
			// stale (the device reconnected elsewhere), unless the device is back here.
			if e.Hub == h.reg.Hub() || h.deviceIsHere(e.Device) {
				continue
			}
			if n := h.ssh.KickKey(e.Device, "", "session moved to hub "+e.Hub); n > 0 {
				h.log.Info("closed a session the device has now on another hub", "event", "session_moved_away", "device", e.Device, "hub", e.Hub, "closed", n)
			}
			continue
		default:
			// Already in the policy if a reload (the admin socket's) read past it.
			reload = reload || e.ID > h.policyUpTo.Load()
			continue
		}
		devicesChanged = true
		if e.Kind == registry.EventDeviceRemoved {
			h.forgetNotifications(e.Device)
		}
		h.kickMu.Lock()
		n := h.ssh.KickKey(e.Device, fp, why)
		if n > 0 {
			h.feedKicks.put(e.Device, fp, why, n)
		}
		h.kickMu.Unlock()
		if n > 0 {
			h.log.Info("closed sessions after a registry change the admin socket did not deliver",
				"event", "change_applied", "device", e.Device, "change", e.Kind, "closed", n)
		}
	}
	if reload {
		if err := h.ReloadAccess(); err != nil {
			h.log.Error("access reload after a registry change failed", "err", err)
		}
	} else if devicesChanged {
		h.reloadTelemetry()
	}
}

// deviceIsHere reports whether the registry says this hub holds the device's session
// (it came back after a move the change feed is only now delivering).
func (h *Hub) deviceIsHere(device string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := h.reg.Device(ctx, device)
	return err == nil && d.Hub == h.reg.Hub()
}

// kickMemo remembers, for a short while, the sessions the change feed closed, so that the
// admin socket's kick for the same change (sent by the command right after its write)
// reports them rather than 0: which of the two paths closes a session first is a race.
type kickMemo struct {
	mu sync.Mutex
	m  map[string]kickRecord
}

type kickRecord struct {
	n  int
	at time.Time
}

// kickMemoFor is how long a feed's kick is reported to the admin kick that follows.
const kickMemoFor = 30 * time.Second

func (k *kickMemo) put(device, fp, why string, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]kickRecord{}
	}
	for key, r := range k.m { // keep it small
		if time.Since(r.at) > kickMemoFor {
			delete(k.m, key)
		}
	}
	k.m[device+"\x00"+fp+"\x00"+why] = kickRecord{n: n, at: time.Now()}
}

func (k *kickMemo) take(device, fp, why string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := device + "\x00" + fp + "\x00" + why
	r, ok := k.m[key]
	if !ok || time.Since(r.at) > kickMemoFor {
		return 0
	}
	delete(k.m, key)
	return r.n
}
