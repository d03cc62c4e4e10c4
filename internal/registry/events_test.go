package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// openWithDevices is a new registry with these devices enrolled.
func openWithDevices(t *testing.T, names ...string) *Registry {
	t.Helper()
	r := open(t, t.TempDir())
	for _, d := range names {
		if _, err := r.AddDevice(context.Background(), d, "default", newKey(t)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// Sessions' starts and ends are audit events, not changes: the change feed and its
// starting point (LastChangeID) pass over them.
func TestChangeFeedSkipsSessionEvents(t *testing.T) {
	ctx := context.Background()
	r := openWithDevices(t, "d1", "d2")
	from, err := r.LastChangeID(ctx)
	if err != nil || from == 0 {
		t.Fatalf("last change %d %v", from, err)
	}
	if err := r.OpenSession(ctx, "d1", "10.0.0.1:1", Algorithms{Cipher: "aes128-gcm@openssh.com"}, "test"); err != nil {
		t.Fatal(err)
	}
	if err := r.CloseSession(ctx, "d1", "10.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if last, err := r.LastChangeID(ctx); err != nil || last != from {
		t.Fatalf("last change after a session: %d %v, want %d", last, err, from)
	}
	if evs, next, err := r.Changes(ctx, from); err != nil || len(evs) != 0 || next != from {
		t.Fatalf("changes after a session: %+v next %d %v", evs, next, err)
	}
	if evs, err := r.Events(ctx, EventFilter{Device: "d1"}); err != nil || len(evs) != 3 || evs[1].Kind != EventSessionOpen || evs[2].Kind != EventSessionClose {
		t.Fatalf("d1's audit log: %+v %v", evs, err)
	}
	d, err := r.Device(ctx, "d1")
	if err != nil || d.LastSeen == nil || d.LastAlgos == nil || d.LastAlgos.Cipher != "aes128-gcm@openssh.com" || d.LastRemote != "10.0.0.1:1" {
		t.Fatalf("d1 after its session: %+v %v", d, err)
	}
	if err := r.RevokeDevice(ctx, "d2", "test"); err != nil {
		t.Fatal(err)
	}
	evs, next, err := r.Changes(ctx, from)
	if err != nil || len(evs) != 1 || evs[0].Kind != EventRevoked || next != evs[0].ID {
		t.Fatalf("changes after a revocation: %+v next %d %v", evs, next, err)
	}
	if last, err := r.LastChangeID(ctx); err != nil || last != next {
		t.Fatalf("last change after a revocation: %d %v, want %d", last, err, next)
	}
}

// On a shared PostgreSQL registry a session's start commits beside the writer lock, so
// it may commit before a change that took a smaller id and is still being written. The
// change feed must not move past that change: it reads it once it commits. And a change
// event is refused outside the lock.
func TestChangeFeedWaitsForChangesBehindSessions(t *testing.T) {
	if !pgscratch.OnPostgres() {
		t.Skip("on SQLite every writer takes its turn: a session cannot start while a change is being written")
	}
	ctx := context.Background()
	r := openWithDevices(t, "d1", "d2")
	from, err := r.LastChangeID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	written, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.withTx(ctx, func(tx *sqldb.Tx) error {
			if err := r.addEvent(ctx, tx, Event{Device: "d1", Kind: EventRevoked, Detail: "test"}); err != nil {
				return err
			}
			close(written)
			<-release
			return nil
		})
	}()
	<-written
	// The bound only keeps a regression from hanging the test: a start that waits for
	// the lock would wait for ever.
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	err = r.OpenSession(octx, "d2", "10.0.0.2:1", Algorithms{}, "")
	cancel()
	if err != nil {
		close(release)
		t.Fatalf("a session's start waited for the writer lock: %v", err)
	}
	evs, next, err := r.Changes(ctx, from)
	if err != nil || len(evs) != 0 || next != from {
		close(release)
		t.Fatalf("changes while one is being written: %+v next %d (from %d) %v", evs, next, from, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	evs, _, err = r.Changes(ctx, next)
	if err != nil || len(evs) != 1 || evs[0].Kind != EventRevoked || evs[0].Device != "d1" {
		t.Fatalf("changes once it committed: %+v %v", evs, err)
	}
	opens, err := r.Events(ctx, EventFilter{Device: "d2", Kind: EventSessionOpen})
	if err != nil || len(opens) != 1 || opens[0].ID <= evs[0].ID {
		t.Fatalf("d2's session start (after change %d): %+v %v", evs[0].ID, opens, err)
	}

	err = r.withUnorderedTx(ctx, func(tx *sqldb.Tx) error {
		return r.addEvent(ctx, tx, Event{Device: "d2", Kind: EventRevoked})
	})
	if err == nil || !strings.Contains(err.Error(), "outside the writer lock") {
		t.Fatalf("a change event beside the lock: %v", err)
	}
}

// EventsAfter pages through one kind of change from a cursor; a kind outside the
// change feed has no such order and is refused.
func TestEventsAfter(t *testing.T) {
	ctx := context.Background()
	r := openWithDevices(t, "d1", "d2", "d3")
	for _, d := range []string{"d1", "d3"} {
		if err := r.RemoveDevice(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	first, err := r.EventsAfter(ctx, EventDeviceRemoved, 0, 1)
	if err != nil || len(first) != 1 || first[0].Device != "d1" || first[0].At.IsZero() {
		t.Fatalf("first page %+v %v", first, err)
	}
	rest, err := r.EventsAfter(ctx, EventDeviceRemoved, first[0].ID, 10)
	if err != nil || len(rest) != 1 || rest[0].Device != "d3" {
		t.Fatalf("second page %+v %v", rest, err)
	}
	if none, err := r.EventsAfter(ctx, EventDeviceRemoved, rest[0].ID, 10); err != nil || len(none) != 0 {
		t.Fatalf("past the last: %+v %v", none, err)
	}
	if _, err := r.EventsAfter(ctx, EventSessionOpen, 0, 10); err == nil {
		t.Fatal("a cursor over session events was allowed")
	}
}

// On a registry several hubs share, a hub's last backup is its own: another hub's says
// nothing of its keys and configuration. On SQLite (one data folder) every backup counts,
// also one recorded before backups named their hub.
func TestLastBackup(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if e, err := r.LastBackup(ctx, "hub-a"); e != nil || err != nil {
		t.Fatalf("no backup yet: %v %v", e, err)
	}
	for _, e := range []Event{
		{Kind: EventBackup, Detail: "an old one, unnamed"},
		{Kind: EventBackup, Hub: "hub-a", Detail: "of a"},
		{Kind: EventBackup, Hub: "hub-b", Detail: "of b"},
		{Kind: EventDeviceRemoved, Hub: "hub-a", Detail: "not a backup"},
	} {
		if err := r.AddEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"hub-a": "of b", "hub-c": "of b"} // SQLite: the newest of any
	if pgscratch.OnPostgres() {
		want = map[string]string{"hub-a": "of a", "hub-b": "of b", "hub-c": ""}
	}
	for hub, detail := range want {
		e, err := r.LastBackup(ctx, hub)
		switch {
		case err != nil:
			t.Fatal(err)
		case detail == "" && e != nil:
			t.Errorf("%s: %+v, want none", hub, e)
		case detail != "" && (e == nil || e.Detail != detail):
			t.Errorf("%s: %+v, want %q", hub, e, detail)
		}
	}
}
