package telemetry

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/diskspace"
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
	msgRate, msgBurst   float64
	byteRate, byteBurst float64

	mu      sync.Mutex
	devices map[string]*bucket
	swept   time.Time
}

type bucket struct {
	msgs, bytes float64
	at          time.Time
}

func newBudgets(c Config) *budgets {
	return &budgets{msgRate: c.DeviceRate, msgBurst: float64(c.DeviceBurst),
		byteRate: float64(c.DeviceBytesRate), byteBurst: float64(c.DeviceBytesRate) * bytesBurstSeconds,
		devices: map[string]*bucket{}}
}

// bytesBurstSeconds is how many seconds of the byte rate a device may send at once.
const bytesBurstSeconds = 16

// take spends n messages of size bytes from the device's budget, or says when they fit.
func (b *budgets) take(device string, n int, size int, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	k := b.devices[device]
	if k == nil {
		k = &bucket{msgs: b.msgBurst, bytes: b.byteBurst, at: now}
		b.devices[device] = k
	}
	dt := now.Sub(k.at).Seconds()
	k.msgs = math.Min(b.msgBurst, k.msgs+dt*b.msgRate)
	k.bytes = math.Min(b.byteBurst, k.bytes+dt*b.byteRate)
	k.at = now
	need, needBytes := float64(n), float64(size)
	switch {
	case need > k.msgs:
		return &RateError{Device: device, Limit: "telemetry.device_rate", RetryAfter: wait(need-k.msgs, b.msgRate)}
	case needBytes > k.bytes:
		return &RateError{Device: device, Limit: "telemetry.device_bytes_rate", RetryAfter: wait(needBytes-k.bytes, b.byteRate)}
	}
	k.msgs -= need
	k.bytes -= needBytes
	return nil
}

func wait(missing, rate float64) time.Duration {
	return max(time.Second, time.Duration(missing/rate*float64(time.Second)))
}

// sweep forgets, once a minute, the buckets that are full again (idle devices).
func (b *budgets) sweep(now time.Time) {
	if now.Sub(b.swept) < time.Minute {
		return
	}
	b.swept = now
	for d, k := range b.devices {
		dt := now.Sub(k.at).Seconds()
		if k.msgs+dt*b.msgRate >= b.msgBurst && k.bytes+dt*b.byteRate >= b.byteBurst {
			delete(b.devices, d)
		}
	}
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
