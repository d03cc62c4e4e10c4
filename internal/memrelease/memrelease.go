package memrelease

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Config of the watcher (the hub's memory section).
type Config struct {
	// ReleaseWhenQuiet turns the watcher on; nil means on.
	ReleaseWhenQuiet *bool `yaml:"release_when_quiet"`
}

// On reports whether the watcher runs.
func (c Config) On() bool { return c.ReleaseWhenQuiet == nil || *c.ReleaseWhenQuiet }

// Thresholds: quiet is a second allocating under QuietRate bytes, or under a
// sixteenth of the busiest second since the last release (a large hub's background
// work, its broker's housekeeping over every client, allocates more than QuietRate
// while idle), for QuietFor; a burst is at least Burst bytes allocated in the busy
// seconds since the last release (a slow trickle, such as a fleet's keepalives, is the
// collector's own business); releases are at least Spacing apart. A release costs two collections of the live heap; a burst of
// Burst bytes costs the collector at least as much on its own, so the bursts bound the
// releases' share.
const (
	Burst     = 32 << 20
	QuietRate = 1 << 20
	QuietFor  = 3 * time.Second
	Spacing   = 10 * time.Second
	tick      = time.Second
)

// Watcher decides when to release; Step is its logic, Run its clock.
type Watcher struct {
	release   func()
	lastAlloc uint64
	sinceLast uint64 // allocated in busy seconds since the last release
	peak      uint64 // the busiest second since the last release
	quiet     time.Duration
	lastAt    time.Time
	started   bool
}

// New returns a watcher that calls release (nil: Release) when a burst is over.
func New(release func()) *Watcher {
	if release == nil {
		release = Release
	}
	return &Watcher{release: release}
}

// Step takes the allocation counter (bytes allocated since the start) read at now and
// releases if a burst is over; it reports whether it did.
func (w *Watcher) Step(now time.Time, allocated uint64) bool {
	if !w.started {
		w.started, w.lastAlloc = true, allocated
		return false
	}
	delta := allocated - w.lastAlloc
	w.lastAlloc = allocated
	w.peak = max(w.peak, delta)
	if delta < max(QuietRate*uint64(tick/time.Second), w.peak/16) {
		w.quiet += tick
	} else {
		w.quiet = 0
		w.sinceLast += delta
	}
	if w.quiet < QuietFor || w.sinceLast < Burst || (!w.lastAt.IsZero() && now.Sub(w.lastAt) < Spacing) {
		return false
	}
	w.release()
	w.sinceLast, w.peak, w.lastAt = 0, 0, now
	return true
}

// Run steps the watcher once a second until ctx ends, logging each release at debug
// level with what it gave back.
func (w *Watcher) Run(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(tick)
	defer t.Stop()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			metrics.Read(sample)
			before := retained()
			if w.Step(now, sample[0].Value.Uint64()) {
				log.Debug("a burst is over: memory given back to the system", "event", "memory_released",
					"retained_before", before, "retained_after", retained())
			}
		}
	}
}

// shrinkCollections is how many collections a release runs. A goroutine's stack
// shrinks by half at most once per collection, and a client's goroutine that went
// 32 KiB deep while publishing waits for its next packet in under 2 KiB: three
// halvings bring it to 4 KiB, the fourth collection is FreeOSMemory's.
const shrinkCollections = 4

// Release collects until every idle goroutine's stack has shrunk as far as it can and
// returns every free page to the system.
func Release() {
	for range shrinkCollections - 1 {
		runtime.GC()
	}
	debug.FreeOSMemory()
}

// retained is what the Go runtime holds from the system and has not released.
func retained() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}
