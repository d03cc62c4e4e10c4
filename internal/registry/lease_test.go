package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

// Hubs share a PostgreSQL registry under their own names: a second hub of the same
// name is refused with the first named, the same hub started again takes over at once,
// a released or expired lease can be taken, a holder whose lease was taken learns it,
// and the maintenance lease excludes every hub and the other way round.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := open(t, dir)
	if !pgscratch.OnPostgres() {
		// On SQLite the data folder's lock does this; a lease holds nothing there.
		l, err := a.LockServing(ctx, "a", Peer{})
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		return
	}
	reopen := func(hub string) *Registry {
		r, err := Open(ctx, location(t, dir), sockets.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		r.SetHub(hub)
		return r
	}
	a.SetHub("edge-a")
	a2, b := reopen("edge-a"), reopen("edge-b")
	la, err := a.lockServing(ctx, "host1:/data", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a2.LockServing(ctx, "host2:/data", Peer{}); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "another hub named edge-a serves from") || !strings.Contains(err.Error(), "(host1:/data, lease renewed") {
		t.Fatalf("a second edge-a: %v", err)
	}
	lb, err := b.LockServing(ctx, "host2:/data", Peer{Addr: "10.0.0.2:2222", HostKey: "ssh-ed25519 AAAA"})
	if err != nil {
		t.Fatalf("another hub beside edge-a: %v", err)
	}
	if live, err := a.LiveHubs(ctx); err != nil || len(live) != 2 || live["edge-b"].Holder != "host2:/data" || live["edge-b"].Addr != "10.0.0.2:2222" {
		t.Fatalf("live hubs: %v %v", live, err)
	}
	admin := reopen("")
	if _, err := admin.LockMaintenance(ctx, "pool move"); !errors.Is(err, ErrInUse) {
		t.Fatalf("maintenance with hubs serving: %v", err)
	}
	// The same hub, started again after a crash, does not wait for its old lease.
	again, err := a2.LockServing(ctx, "host1:/data", Peer{})
	if err != nil {
		t.Fatalf("same holder: %v", err)
	}
	again.Release()
	la.Release()
	lb.Release()
	lm, err := admin.LockMaintenance(ctx, "pool move")
	if err != nil {
		t.Fatalf("maintenance with no hub: %v", err)
	}
	if _, err := b.LockServing(ctx, "host2:/data", Peer{}); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "admin command") {
		t.Fatalf("a hub during maintenance: %v", err)
	}
	lm.Release()

	// edge-a's lease expires (it stopped renewing: as if PostgreSQL was out of reach for
	// longer than its time to live) and another edge-a takes it; the first learns it.
	// Its renewals are the test's to make: a time to live of an hour.
	la, err = a.lockServing(ctx, "host1:/data", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rawExec(t, dir, `UPDATE leases SET renewed_at='2020-01-01T00:00:00.000000Z'`)
	la2, err := a2.LockServing(ctx, "host2:/data", Peer{})
	if err != nil {
		t.Fatalf("expired lease: %v", err)
	}
	defer la2.Release()
	if err := la.renewOnce(ctx); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "host2:/data") {
		t.Fatalf("lost: %v", err)
	}
	la.Release() // after losing: must not remove the new holder's lease
	if live, _ := b.LiveHubs(ctx); live["edge-a"].Holder != "host2:/data" {
		t.Fatalf("live hubs after the takeover: %v", live)
	}
}

// On PostgreSQL a change committed by another process wakes a watcher at once (the
// first wake-up comes when it starts listening); on SQLite WatchChanges returns at once
// and the hub polls.
func TestWatchChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	a := open(t, dir)
	if _, err := a.AddDevice(ctx, "dev1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.WatchChanges(ctx, func() { wake <- struct{}{} }, func(err error) { t.Logf("listen: %v", err) })
	}()
	if !pgscratch.OnPostgres() {
		<-done
		return
	}
	<-wake // listening
	b := open(t, dir)
	if err := b.RevokeDevice(ctx, "dev1", "stolen"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("the revocation did not wake the watcher")
	}
	cancel()
	<-done
}

// Hubs sharing a registry record which of them holds each device's session: a device
// arriving at another hub is recorded there with a session_moved event for the old hub
// to act on; the old hub's session end does not clear the new one; a hub's restart
// closes only what it left open itself.
func TestSessionLocation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := open(t, dir), open(t, dir)
	a.SetHub("edge-a")
	b.SetHub("edge-b")
	for _, d := range []string{"dev1", "dev2"} {
		if _, err := a.AddDevice(ctx, d, "default", newKey(t)); err != nil {
			t.Fatal(err)
		}
	}
	hubOf := func(d string) string {
		t.Helper()
		dev, err := a.Device(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		return dev.Hub
	}
	open1 := func(r *Registry, d string) {
		t.Helper()
		if err := r.OpenSession(ctx, d, "10.0.0.1:1", Algorithms{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	open1(a, "dev1")
	open1(a, "dev2")
	if hubOf("dev1") != "edge-a" {
		t.Fatalf("dev1 at %q", hubOf("dev1"))
	}
	from, _ := a.LastChangeID(ctx)
	open1(b, "dev1") // dev1 reconnects to edge-b
	if hubOf("dev1") != "edge-b" {
		t.Fatalf("dev1 at %q after moving", hubOf("dev1"))
	}
	evs, _, err := a.Changes(ctx, from)
	if err != nil || len(evs) != 1 || evs[0].Kind != EventSessionMoved || evs[0].Hub != "edge-b" || evs[0].Detail != "from hub edge-a" {
		t.Fatalf("change feed after the move: %+v %v", evs, err)
	}
	// edge-a's old session ends: dev1 stays at edge-b.
	if err := a.CloseSession(ctx, "dev1", ""); err != nil || hubOf("dev1") != "edge-b" {
		t.Fatalf("after edge-a's session end: %q %v", hubOf("dev1"), err)
	}
	// edge-a crashes and starts again: dev2's session (its own) is closed in the log, not
	// dev1's (edge-b's).
	left, crashed, err := a.RecordStart(ctx, "test")
	if err != nil || len(left) != 1 || left[0] != "dev2" {
		t.Fatalf("left open: %v crashed %v %v", left, crashed, err)
	}
	if hubOf("dev2") != "" || hubOf("dev1") != "edge-b" {
		t.Fatalf("after edge-a's restart: dev1 %q dev2 %q", hubOf("dev1"), hubOf("dev2"))
	}
	if err := b.CloseSession(ctx, "dev1", ""); err != nil || hubOf("dev1") != "" {
		t.Fatalf("after edge-b's session end: %q %v", hubOf("dev1"), err)
	}
}
