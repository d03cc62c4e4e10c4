package regguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/registry"
)

// DefaultMaxEvents bounds the audit backlog; older events are dropped first and counted.
const DefaultMaxEvents = 10000

// EventRecovered is the audit event written when everything held is in the registry.
const EventRecovered = "registry_recovered"

// Guard is the registry as the hub's live subsystems use it: reads and other writes pass
// through to the embedded registry; revocations, violations and audit events survive a
// registry that cannot write.
type Guard struct {
	*registry.Registry
	log       *slog.Logger
	maxEvents int

	mu         sync.Mutex
	revoked    map[string]held // device -> revocation not yet written
	violations map[string]int  // device -> violations not yet counted in the registry
	events     []registry.Event
	dropped    int
	since      time.Time // degraded since; zero when nothing is held
	lastErr    string
}

type held struct {
	reason string
	at     time.Time
}

// New wraps reg; maxEvents <= 0 means DefaultMaxEvents.
func New(reg *registry.Registry, log *slog.Logger, maxEvents int) *Guard {
	if maxEvents <= 0 {
		maxEvents = DefaultMaxEvents
	}
	return &Guard{Registry: reg, log: log, maxEvents: maxEvents, revoked: map[string]held{}, violations: map[string]int{}}
}

// degrade records a failed write; the first one of an episode is logged loudly. Call
// with g.mu held.
func (g *Guard) degrade(what string, err error) {
	g.lastErr = err.Error()
	if g.since.IsZero() {
		g.since = time.Now()
		g.log.Error("the registry cannot write: revocations, violations and audit events are held in memory until it can (free space in the data folder); a hub restart before then forgets them",
			"failed", what, "err", err)
	}
}

// RevokeDevice revokes name in the registry or, when the registry cannot write, in memory
// (the device is refused from now on either way). It fails only for an unknown device.
func (g *Guard) RevokeDevice(ctx context.Context, name, reason string) error {
	err := g.Registry.RevokeDevice(ctx, name, reason)
	if err == nil || errors.Is(err, registry.ErrNotFound) {
		return err
	}
	if _, derr := g.Registry.Device(ctx, name); derr != nil {
		if errors.Is(derr, registry.ErrNotFound) {
			return derr
		}
		// Not even readable: hold it anyway; refusing a device that may not exist costs
		// nothing, missing a revocation costs a lot.
	}
	g.mu.Lock()
	if _, ok := g.revoked[name]; !ok {
		g.revoked[name] = held{reason: reason, at: time.Now()}
	}
	g.degrade("revoke "+name, err)
	g.mu.Unlock()
	g.log.Warn("device revoked in the hub's memory only; written to the registry when it can", "device", name, "reason", reason)
	return nil
}

// ReinstateDevice undoes a revocation, the registry's and one held in memory.
func (g *Guard) ReinstateDevice(ctx context.Context, name string) error {
	g.mu.Lock()
	_, held := g.revoked[name]
	delete(g.revoked, name)
	g.mu.Unlock()
	err := g.Registry.ReinstateDevice(ctx, name)
	if held && errors.Is(err, registry.ErrNotRevoked) {
		return nil // revoked in memory only: undone there
	}
	return err
}

// HeldRevocation reports whether name is revoked in memory only, and why.
func (g *Guard) HeldRevocation(name string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.revoked[name]
	return h.reason, ok
}

// Held lists the revocations held in memory (device -> reason).
func (g *Guard) Held() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.revoked) == 0 {
		return nil
	}
	m := make(map[string]string, len(g.revoked))
	for d, h := range g.revoked {
		m[d] = h.reason
	}
	return m
}

// overlay marks d revoked when a revocation of it is held.
func (g *Guard) overlay(d *registry.Device) {
	if d == nil || d.Revoked() {
		return
	}
	g.mu.Lock()
	h, ok := g.revoked[d.Name]
	g.mu.Unlock()
	if ok {
		at := h.at
		d.RevokedAt, d.RevokeWhy = &at, h.reason
	}
}

// DeviceByKey is the registry's, with held revocations applied.
func (g *Guard) DeviceByKey(ctx context.Context, key ssh.PublicKey) (*registry.Device, bool, error) {
	d, revoked, err := g.Registry.DeviceByKey(ctx, key)
	if err == nil && !revoked {
		g.overlay(d)
		revoked = d.Revoked()
	}
	return d, revoked, err
}

// Device is the registry's, with held revocations applied.
func (g *Guard) Device(ctx context.Context, name string) (*registry.Device, error) {
	d, err := g.Registry.Device(ctx, name)
	if err == nil {
		g.overlay(d)
	}
	return d, err
}

// DeviceStates is the registry's, with held revocations applied.
func (g *Guard) DeviceStates(ctx context.Context) ([]registry.DeviceState, error) {
	states, err := g.Registry.DeviceStates(ctx)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.revoked) > 0 {
		for i := range states {
			if _, ok := g.revoked[states[i].Name]; ok {
				states[i].Revoked = true
			}
		}
	}
	return states, nil
}

// AddViolation counts a violation in the registry or, when it cannot write, in memory,
// and returns the device's count either way (so on_violation still fires).
func (g *Guard) AddViolation(ctx context.Context, device, detail, remote string, record bool) (int, error) {
	n, err := g.Registry.AddViolation(ctx, device, detail, remote, record)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		return n + g.violations[device], nil
	}
	d, derr := g.Registry.Device(ctx, device)
	if derr != nil {
		return 0, err // unknown or unreadable: nothing to count against
	}
	g.violations[device]++
	if record {
		g.push(registry.Event{At: time.Now(), Device: device, Kind: registry.EventViolation, Detail: detail, Remote: remote})
	}
	g.degrade("violation of "+device, err)
	return d.Violations + g.violations[device], nil
}

// AddEvent appends to the audit log, or to the backlog when the registry cannot write.
func (g *Guard) AddEvent(ctx context.Context, e registry.Event) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return g.holdOnFailure(g.Registry.AddEvent(ctx, e), e)
}

// OpenSession records a session's start in the registry or, when it cannot write, its
// session_open event in the backlog (the device's last seen and algorithms wait for the
// next session).
func (g *Guard) OpenSession(ctx context.Context, device, remote string, algos registry.Algorithms, detail string) error {
	e := registry.Event{At: time.Now(), Device: device, Kind: registry.EventSessionOpen, Detail: detail, Remote: remote}
	return g.holdOnFailure(g.Registry.OpenSession(ctx, device, remote, algos, detail), e)
}

// CloseSession records a session's end in the registry or, when it cannot write, its
// session_close event in the backlog.
func (g *Guard) CloseSession(ctx context.Context, device, remote string) error {
	e := registry.Event{At: time.Now(), Device: device, Kind: registry.EventSessionClose, Remote: remote}
	return g.holdOnFailure(g.Registry.CloseSession(ctx, device, remote), e)
}

// holdOnFailure keeps e in the backlog when err says the registry did not write it.
func (g *Guard) holdOnFailure(err error, e registry.Event) error {
	if err == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.push(e)
	g.degrade("audit event "+e.Kind, err)
	return nil
}

// push adds e to the backlog, dropping the oldest past the bound. Call with g.mu held.
func (g *Guard) push(e registry.Event) {
	if len(g.events) >= g.maxEvents {
		g.events = g.events[1:]
		g.dropped++
	}
	g.events = append(g.events, e)
}

// State is what the hub holds in memory.
type State struct {
	Since       time.Time `json:"since"`
	Error       string    `json:"error"`
	Revocations int       `json:"held_revocations"`
	Violations  int       `json:"held_violations"`
	Events      int       `json:"held_events"`
	Dropped     int       `json:"dropped_events"`
}

// Degraded returns what is held, or nil when nothing is.
func (g *Guard) Degraded() *State {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.since.IsZero() {
		return nil
	}
	s := &State{Since: g.since, Error: g.lastErr, Revocations: len(g.revoked), Events: len(g.events), Dropped: g.dropped}
	for _, n := range g.violations {
		s.Violations += n
	}
	return s
}

// String says what is held, for logs and the admin status.
func (s *State) String() string {
	return fmt.Sprintf("the registry cannot write since %s (%s): holding %d revocations, %d violations, %d audit events in memory (%d dropped)",
		s.Since.Format(time.DateTime), s.Error, s.Revocations, s.Violations, s.Events, s.Dropped)
}

// Flush writes what is held; it stops at the first write that fails. When everything is
// written the episode ends with an EventRecovered audit event.
func (g *Guard) Flush(ctx context.Context) error {
	g.mu.Lock()
	if g.since.IsZero() {
		g.mu.Unlock()
		return nil
	}
	revoked := make(map[string]held, len(g.revoked))
	for d, h := range g.revoked {
		revoked[d] = h
	}
	violations := make(map[string]int, len(g.violations))
	for d, n := range g.violations {
		violations[d] = n
	}
	events := append([]registry.Event(nil), g.events...)
	g.mu.Unlock()

	fail := func(err error) error {
		g.mu.Lock()
		g.lastErr = err.Error()
		g.mu.Unlock()
		return err
	}
	for d, h := range revoked {
		reason := fmt.Sprintf("%s (revoked at %s while the registry could not write)", h.reason, h.at.UTC().Format(time.RFC3339))
		if err := g.Registry.RevokeDevice(ctx, d, reason); err != nil && !errors.Is(err, registry.ErrNotFound) {
			return fail(err)
		}
		g.mu.Lock()
		delete(g.revoked, d)
		g.mu.Unlock()
	}
	for d, n := range violations {
		if _, err := g.Registry.AddViolations(ctx, d, n); err != nil && !errors.Is(err, registry.ErrNotFound) {
			return fail(err)
		}
		g.mu.Lock()
		if g.violations[d] -= n; g.violations[d] <= 0 {
			delete(g.violations, d)
		}
		g.mu.Unlock()
	}
	for _, e := range events {
		if err := g.Registry.AddEvent(ctx, e); err != nil {
			return fail(err)
		}
		g.mu.Lock()
		// Pushes only append; a drop (the backlog full) may have removed e already.
		if len(g.events) > 0 && g.events[0] == e {
			g.events = g.events[1:]
		}
		g.mu.Unlock()
	}
	g.mu.Lock()
	if len(g.revoked) > 0 || len(g.violations) > 0 || len(g.events) > 0 {
		g.mu.Unlock()
		return nil // more arrived meanwhile: the next flush takes them
	}
	since, dropped := g.since, g.dropped
	g.since, g.dropped, g.lastErr = time.Time{}, 0, ""
	g.mu.Unlock()
	detail := fmt.Sprintf("the registry could not write from %s to %s; %d revocations, %d violation counts and %d audit events held in memory were written, %d audit events were dropped (backlog bound %d)",
		since.UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339), len(revoked), len(violations), len(events), dropped, g.maxEvents)
	if err := g.Registry.AddEvent(ctx, registry.Event{Kind: EventRecovered, Detail: detail}); err != nil {
		g.log.Error("recording the registry's recovery failed", "err", err)
	}
	g.log.Warn("the registry writes again: what was held in memory is written", "detail", detail)
	return nil
}

// Run flushes every interval until ctx ends.
func (g *Guard) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.Flush(ctx); err != nil {
				g.log.Debug("registry still cannot write", "err", err)
			}
		}
	}
}

// ClaimDevices is the registry's, with held revocations applied.
func (g *Guard) ClaimDevices(ctx context.Context, gateway, devProfile string, maxDevices int, claims []registry.Claim) ([]registry.Claimed, error) {
	out, err := g.Registry.ClaimDevices(ctx, gateway, devProfile, maxDevices, claims)
	for _, c := range out {
		if c.Device != nil {
			g.overlay(c.Device)
		}
	}
	return out, err
}
