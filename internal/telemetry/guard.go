package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/diskspace"
	"github.com/iotsafe/iotsafe/internal/throttle"
)

// What the store refuses before it writes: a device over its budget, a disk nearly
// full. Each error says which limit and what to do.
var (
	// ErrRateLimited: the device sends faster than telemetry.device_rate or
	// device_bytes_rate allow; it may send again after a while (RateError.RetryAfter).
	ErrRateLimited = errors.New("telemetry: the device sends faster than its budget")
	// ErrDiskFull: the data folder's disk has less than telemetry.min_free_mib left.
	// Notifications wait; the registry and the audit log keep working.
	ErrDiskFull = errors.New("telemetry: the data folder's disk is nearly full")
)

// RateError is ErrRateLimited for one device, with how long until its next message fits.
type RateError struct {
	Device     string
	Limit      string // the setting: telemetry.device_rate or telemetry.device_bytes_rate
	RetryAfter time.Duration
}

func (e *RateError) Error() string {
	return fmt.Sprintf("device %s sends faster than %s allows: retry after %s", e.Device, e.Limit, e.RetryAfter.Round(time.Second))
}

func (e *RateError) Unwrap() error { return ErrRateLimited }

// budgets are the devices' token buckets: messages and bytes, refilled at the configured
// rates up to their bursts. One set for every path (REST, SOAP, MQTT), so a device
// cannot spread a flood over them.
type budgets struct {
	msgs, bytes *throttle.Buckets
}

func newBudgets(c Config) *budgets {
	return &budgets{msgs: throttle.NewBuckets(c.DeviceRate, float64(c.DeviceBurst)),
		bytes: throttle.NewBuckets(float64(c.DeviceBytesRate), float64(c.DeviceBytesRate)*bytesBurstSeconds)}
}

// bytesBurstSeconds is how many seconds of the byte rate a device may send at once.
const bytesBurstSeconds = 16

// take spends n messages of size bytes from the device's budget, or says when they fit.
func (b *budgets) take(device string, n int, size int, now time.Time) error {
	if wait, ok := b.msgs.Take(device, float64(n), now); !ok {
		return &RateError{Device: device, Limit: "telemetry.device_rate", RetryAfter: wait}
	}
	if wait, ok := b.bytes.Take(device, float64(size), now); !ok {
		b.msgs.Refund(device, float64(n))
		return &RateError{Device: device, Limit: "telemetry.device_bytes_rate", RetryAfter: wait}
	}
	return nil
}

// diskGuard refuses writes while the store's disk is below its floor; it reads the free
// space at most once a second.
type diskGuard struct {
	dir    string // "" (a PostgreSQL store): no guard here, the database server has its own
	minMiB int64

	mu   sync.Mutex
	at   time.Time
	free int64
}

func (g *diskGuard) check(now time.Time) error {
	if g == nil || g.dir == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.at) >= time.Second {
		g.free, g.at = diskspace.FreeMiB(g.dir), now
	}
	if g.free >= 0 && g.free < g.minMiB {
		return fmt.Errorf("%w: %s has %d MiB free, below telemetry.min_free_mib (%d): notifications and commands wait until space is freed (retention, or a larger disk)",
			ErrDiskFull, g.dir, g.free, g.minMiB)
	}
	return nil
}

// Admit spends a device's budget for messages that are not stored but cost the hub all
// the same (an MQTT publish on a topic that is not stored, a retained message): the same
// budget as its notifications, whichever path they take.
func (s *Store) Admit(device string, n, size int) error {
	return s.budgets.take(device, n, size, time.Now())
}

// admit checks a batch of notifications against their devices' budgets and the disk.
func (s *Store) admit(items []Notification) error {
	now := time.Now()
	if err := s.disk.check(now); err != nil {
		return err
	}
	if len(items) == 1 { // the common case, without a map
		return s.budgets.take(items[0].Device, 1, items[0].size(), now)
	}
	type use struct{ n, size int }
	per := map[string]use{}
	for i := range items {
		u := per[items[i].Device]
		per[items[i].Device] = use{u.n + 1, u.size + items[i].size()}
	}
	for d, u := range per {
		if err := s.budgets.take(d, u.n, u.size, now); err != nil {
			return err
		}
	}
	return nil
}

// capCheck applies telemetry.max_per_device as devices write, not only hourly: after
// every capEvery of a device's appends (a hundredth of the cap) its oldest past the cap
// are deleted in the background, so a device holds at most the cap and a hundredth.
type capCheck struct {
	every  int
	pruned func(device string) // tests

	mu       sync.Mutex
	since    map[string]int      // appends since the device's last check
	inFlight map[string]struct{} // devices being pruned
}

func newCapCheck(maxPerDevice int, pruned func(string)) *capCheck {
	return &capCheck{every: max(1, maxPerDevice/100), pruned: pruned, since: map[string]int{}, inFlight: map[string]struct{}{}}
}

// committed counts a batch's appends and starts the prunes that are due.
func (s *Store) capCommitted(batch []*appendReq) {
	c := s.caps
	if c == nil {
		return
	}
	var due []string
	c.mu.Lock()
	for _, r := range batch {
		for i := range r.items {
			d := r.items[i].Device
			if c.since[d]++; c.since[d] >= c.every {
				if _, busy := c.inFlight[d]; !busy {
					c.inFlight[d] = struct{}{}
					delete(c.since, d)
					due = append(due, d)
				}
			}
		}
	}
	c.mu.Unlock()
	for _, d := range due {
		go func() {
			defer func() { c.mu.Lock(); delete(c.inFlight, d); c.mu.Unlock() }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := s.pruneDevice(ctx, d); err != nil && !errors.Is(err, ErrClosed) && s.log != nil {
				s.log.Warn("applying telemetry.max_per_device to a device failed; the hourly pass applies it", "device", d, "err", err)
			}
			if c.pruned != nil {
				c.pruned(d)
			}
		}()
	}
}
