package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"golang.org/x/crypto/ssh"
)

func openWith(t *testing.T, dir string, want sockets.Config) (*Registry, error) {
	t.Helper()
	r, err := Open(context.Background(), location(t, dir), want)
	if err == nil {
		t.Cleanup(func() { r.Close() })
	}
	return r, err
}

// The registry records its pool at the first open; later opens without a pool use it,
// and a configuration naming another pool is refused with the way out in the message.
func TestPoolRecordedAtFirstOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, err := openWith(t, dir, sockets.Config{CIDR: "127.79.0.0/16", PortBase: 20000})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()

	// An admin command with no --config (the README's examples) allocates from it.
	r2, err := openWith(t, dir, sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := r2.AddDevice(ctx, "a1", "default", newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix("127.79.0.0/16").Contains(d.Address) {
		t.Fatalf("device got %v outside the recorded pool", d.Address)
	}
	r2.Close()

	for _, want := range []sockets.Config{{CIDR: "127.80.0.0/16"}, {PortBase: 30000}} {
		_, err := openWith(t, dir, want)
		if !errors.Is(err, ErrPoolMismatch) || !strings.Contains(err.Error(), "iotsafe pool move") {
			t.Fatalf("config %+v: got %v, want ErrPoolMismatch naming 'iotsafe pool move'", want, err)
		}
	}
	// The same pool written differently is the same pool.
	if _, err := openWith(t, dir, sockets.Config{CIDR: "127.79.3.4/16", PortBase: 20000}); err != nil {
		t.Fatal(err)
	}
}

func TestMovePool(t *testing.T) {
	ctx := context.Background()
	r, err := openWith(t, t.TempDir(), sockets.Config{CIDR: "127.79.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PutProfile(ctx, &profile.Profile{Name: "cam", Reverse: map[string]int{"http": 80, "rtsp": 554}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"d1", "d2"} {
		if _, err := r.AddDevice(ctx, n, "cam", newKey(t)); err != nil {
			t.Fatal(err)
		}
	}
	// A larger pool that holds the old one: nothing moves.
	moves, err := r.MovePool(ctx, sockets.Config{CIDR: "127.79.0.0/16"})
	if err != nil || len(moves) != 0 {
		t.Fatalf("growing the pool moved %v (%v)", moves, err)
	}
	// Another range and port base: every device and socket moves, in the new pool.
	moves, err = r.MovePool(ctx, sockets.Config{CIDR: "127.81.0.0/16", PortBase: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 2 {
		t.Fatalf("moves %+v, want both devices", moves)
	}
	for _, n := range []string{"d1", "d2"} {
		d, err := r.Device(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range d.Sockets {
			if !r.Pool().Contains(s.Addr.Addr()) || s.Addr.Addr() != d.Address || s.Addr.Port() < 30000 {
				t.Fatalf("%s socket %+v after the move (device at %v)", n, s, d.Address)
			}
		}
	}
	if evs, _ := r.Events(ctx, EventFilter{Kind: EventPoolMoved}); len(evs) != 2 {
		t.Fatalf("no pool_moved event: %+v", evs)
	}
	if _, err := r.MovePool(ctx, sockets.Config{CIDR: "10.0.0.0/16"}); err == nil {
		t.Fatal("a pool outside loopback was accepted")
	}
}

// A registry written before the pool was recorded may hold allocations outside it: they
// are never served, and MovePool with no change re-homes them (the hub does it at start).
func TestAllocationOutsidePoolIsNotServed(t *testing.T) {
	ctx := context.Background()
	r, err := openWith(t, t.TempDir(), sockets.Config{CIDR: "127.79.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.PutProfile(ctx, &profile.Profile{Name: "cam", Reverse: map[string]int{"http": 80}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddDevice(ctx, "old", "cam", newKey(t)); err != nil {
		t.Fatal(err)
	}
	// As an older binary with another pool would have written it.
	if _, err := r.db.ExecContext(ctx, `UPDATE devices SET address='127.77.0.9' WHERE name='old'`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE sockets SET address='127.77.0.9' WHERE device='old'`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.EnsureSocket(ctx, "old", "http"); !errors.Is(err, ErrOutsidePool) {
		t.Fatalf("socket outside the pool: got %v, want ErrOutsidePool", err)
	}
	moves, err := r.MovePool(ctx, sockets.Config{})
	if err != nil || len(moves) != 1 || moves[0].From != netip.MustParseAddr("127.77.0.9") {
		t.Fatalf("re-homing: %+v %v", moves, err)
	}
	s, _, err := r.EnsureSocket(ctx, "old", "http")
	if err != nil || !r.Pool().Contains(s.Addr.Addr()) {
		t.Fatalf("after re-homing: %+v %v", s, err)
	}
}

// A registry file others can read is refused, with the fix in the message.
func TestRegistryReadableByOthersRefused(t *testing.T) {
	sqliteOnly(t)
	dir := t.TempDir()
	r, err := openWith(t, dir, sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	os.Chmod(filepath.Join(dir, FileName), 0o644)
	if _, err := openWith(t, dir, sockets.Config{}); !errors.Is(err, ErrUnsafeMode) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable registry: %v", err)
	}
}

// Enrolling a device whose profile has many aliases allocates its ports in one pass (60,000
// took a minute when every port search started from the base); 3,000 keep the test short
// under the race detector.
func TestManyAliasesAllocateInOrder(t *testing.T) {
	ctx := context.Background()
	r, err := openWith(t, t.TempDir(), sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &profile.Profile{Name: "gw", Reverse: map[string]int{}}
	const n = 3000
	for i := 0; i < n; i++ {
		p.Reverse[fmt.Sprintf("a%d", i)] = 0
	}
	if err := r.PutProfile(ctx, p); err != nil {
		t.Fatal(err)
	}
	d, err := r.AddDevice(ctx, "gw1", "gw", newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]bool{}
	for _, s := range d.Sockets {
		if seen[s.Addr.Port()] || int(s.Addr.Port()) < sockets.DefaultPortBase {
			t.Fatalf("port %d given twice or below the base", s.Addr.Port())
		}
		seen[s.Addr.Port()] = true
	}
	if len(seen) != n {
		t.Fatalf("%d sockets, want %d", len(seen), n)
	}
}

// The change feed returns, once and in order, the events a hub must apply, and skips the
// others.
func TestChangeFeed(t *testing.T) {
	ctx := context.Background()
	r, err := openWith(t, t.TempDir(), sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddDevice(ctx, "d1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	from, err := r.LastChangeID(ctx)
	if err != nil || from == 0 {
		t.Fatalf("last event id %d %v", from, err)
	}
	r.AddViolation(ctx, "d1", "not a change", "", true)
	r.RevokeDevice(ctx, "d1", "stolen")
	evs, next, err := r.Changes(ctx, from)
	if err != nil || len(evs) != 1 || evs[0].Kind != EventRevoked || evs[0].Device != "d1" {
		t.Fatalf("changes: %+v %v", evs, err)
	}
	if evs, _, _ := r.Changes(ctx, next); len(evs) != 0 {
		t.Fatalf("the same change delivered twice: %+v", evs)
	}
}

func TestRecordStartClosesWhatACrashLeftOpen(t *testing.T) {
	ctx := context.Background()
	r, err := openWith(t, t.TempDir(), sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddDevice(ctx, "d1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if _, crashed, _ := r.RecordStart(ctx, "first"); crashed {
		t.Fatal("a first start reported a crash")
	}
	r.AddEvent(ctx, Event{Device: "d1", Kind: EventSessionOpen})
	// No hub_stopped, no session_close: the run was killed.
	open, crashed, err := r.RecordStart(ctx, "second")
	if err != nil || !crashed || len(open) != 1 || open[0] != "d1" {
		t.Fatalf("after a kill: open %v crashed %v err %v", open, crashed, err)
	}
	evs, _ := r.Events(ctx, EventFilter{Device: "d1", Kind: EventSessionClose})
	if len(evs) != 1 || !strings.Contains(evs[0].Detail, "hub restarted") {
		t.Fatalf("session_close events: %+v", evs)
	}
	r.AddEvent(ctx, Event{Kind: EventHubStopped})
	if open, crashed, _ := r.RecordStart(ctx, "third"); crashed || len(open) != 0 {
		t.Fatalf("after a clean stop: open %v crashed %v", open, crashed)
	}
}

// withTestEvents is a new registry holding n events of kind "test", details "0", "1", ...
func withTestEvents(t *testing.T, n int) *Registry {
	t.Helper()
	r, err := openWith(t, t.TempDir(), sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := r.AddEvent(context.Background(), Event{Kind: "test", Detail: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestPruneEvents(t *testing.T) {
	ctx := context.Background()
	r := withTestEvents(t, 50)
	n, err := r.PruneEvents(ctx, 10, time.Now().Add(-time.Hour))
	if err != nil || n != 40 {
		t.Fatalf("pruned %d, %v; want 40", n, err)
	}
	evs, _ := r.Events(ctx, EventFilter{Kind: "test"})
	if len(evs) != 10 || evs[9].Detail != "49" {
		t.Fatalf("kept %d events, newest %q", len(evs), evs[len(evs)-1].Detail)
	}
	if n, _ := r.PruneEvents(ctx, 0, time.Now().Add(time.Hour)); n != 10 {
		t.Fatalf("by age: pruned %d, want 10", n)
	}
}

// Pruning commits chunk by chunk, so registry writes get in between; what is recorded
// while it runs is kept, by age and by count.
func TestPruneEventsDeletesInChunks(t *testing.T) {
	ctx := context.Background()
	r := withTestEvents(t, 50)
	r.eventChunk = 10
	var left []int
	addAfter := 1 // after the first chunk
	r.eventChunkDone = func() {
		evs, err := r.Events(ctx, EventFilter{Kind: "test"})
		if err != nil {
			t.Error(err)
		}
		left = append(left, len(evs))
		if len(left) == addAfter {
			// A write between two chunks: it needs the transaction the prune does not hold.
			if err := r.AddEvent(ctx, Event{Kind: "test", Detail: "during"}); err != nil {
				t.Error(err)
			}
		}
	}
	// By count: the newest 10 at the start (ids 41-50) and the one recorded during.
	n, err := r.PruneEvents(ctx, 10, time.Now().Add(-time.Hour))
	if err != nil || n != 40 {
		t.Fatalf("pruned %d, %v; want 40", n, err)
	}
	if want := []int{40, 31, 21, 11, 11}; !slices.Equal(left, want) {
		t.Errorf("events left after each transaction: %v, want %v (one chunk per transaction)", left, want)
	}
	evs, _ := r.Events(ctx, EventFilter{Kind: "test"})
	if len(evs) != 11 || evs[0].Detail != "40" || evs[10].Detail != "during" {
		t.Fatalf("kept %d events: %+v", len(evs), evs)
	}
	// By age: everything recorded before now goes; one recorded during the pass stays.
	left, addAfter = nil, 1
	n, err = r.PruneEvents(ctx, 0, time.Now())
	if err != nil || n != 11 {
		t.Fatalf("by age: pruned %d, %v; want 11", n, err)
	}
	if evs, _ := r.Events(ctx, EventFilter{Kind: "test"}); len(evs) != 1 || evs[0].Detail != "during" {
		t.Fatalf("by age: kept %+v, want the event recorded during the pass", evs)
	}
}

// Many admin commands at once, each with its own connection to the registry, all
// succeed: writers wait their turn instead of failing with "database is locked".
func TestConcurrentWritersFromSeparateConnections(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := openWith(t, dir, sockets.Config{}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	keys := make([]ssh.PublicKey, n)
	for i := range keys {
		keys[i] = newKey(t)
	}
	errs := make(chan error, n)
	where := location(t, dir)
	for i := 0; i < n; i++ {
		go func() {
			r, err := Open(ctx, where, sockets.Config{})
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			_, err = r.AddDevice(ctx, fmt.Sprintf("c%d", i), "default", keys[i])
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
