package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/sshtest"
)

func newKey(t *testing.T) ssh.PublicKey {
	return sshtest.Signer(t).PublicKey()
}

// TestMain runs every test on SQLite files, then again on a real PostgreSQL server
// (pgscratch.Twice), so both keep one behaviour.
func TestMain(m *testing.M) { pgscratch.Twice(m) }

// location is where a test's registry lives (pgscratch.Location).
func location(t *testing.T, dir string) string { return pgscratch.Location(t, dir) }

// sqliteOnly skips what only an SQLite file has (its file mode, registries from
// before versions were kept) in the PostgreSQL pass.
func sqliteOnly(t *testing.T) {
	t.Helper()
	if pgscratch.OnPostgres() {
		t.Skip("a property of the SQLite file; not applicable to PostgreSQL")
	}
}

// rawExec runs SQL on a test's registry database behind the registry's back.
func rawExec(t *testing.T, dir, stmt string) {
	t.Helper()
	var db *sqldb.DB
	var err error
	if !pgscratch.OnPostgres() {
		db, err = sqldb.OpenSQLite(filepath.Join(dir, FileName))
	} else {
		db, err = sqldb.OpenPostgres(context.Background(), location(t, dir), sqldb.PostgresOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), stmt); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir string) *Registry {
	t.Helper()
	r, err := Open(context.Background(), location(t, dir), sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestSocketsStableAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := open(t, dir)
	p := &profile.Profile{Name: "cam", Reverse: map[string]int{"http": 80, "rtsp": 554}}
	if err := r.PutProfile(ctx, p); err != nil {
		t.Fatal(err)
	}
	d1, err := r.AddDevice(ctx, "dev1", "default", newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := r.AddDevice(ctx, "dev2", "cam", newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if d1.Address == d2.Address {
		t.Fatalf("two devices share %v", d1.Address)
	}
	if len(d2.Sockets) != 2 || d2.Sockets[0].Addr.Addr() != d2.Address || d2.Sockets[0].Addr == d2.Sockets[1].Addr {
		t.Fatalf("bad sockets %+v", d2.Sockets)
	}
	r.Close()
	if fi, err := os.Stat(filepath.Join(dir, FileName)); !pgscratch.OnPostgres() && (err != nil || fi.Mode().Perm() != 0o600) {
		t.Fatalf("registry file mode: %v %v", fi.Mode(), err)
	}
	r2 := open(t, dir)
	again, err := r2.Device(ctx, "dev2")
	if err != nil {
		t.Fatal(err)
	}
	if again.Sockets[0] != d2.Sockets[0] || again.Sockets[1] != d2.Sockets[1] {
		t.Fatalf("sockets moved after reopen: %+v vs %+v", again.Sockets, d2.Sockets)
	}
}

func TestDuplicateAndRevoke(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	k := newKey(t)
	if _, err := r.AddDevice(ctx, "dev1", "", k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty profile name: want ErrNotFound, got %v", err)
	}
	if _, err := r.AddDevice(ctx, "dev1", "default", k); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t)); !errors.Is(err, ErrExists) {
		t.Fatalf("want ErrExists for name, got %v", err)
	}
	if _, err := r.AddDevice(ctx, "dev2", "default", k); !errors.Is(err, ErrExists) {
		t.Fatalf("want ErrExists for reused key, got %v", err)
	}
	if _, err := r.AddDevice(ctx, "Bad_Name", "default", newKey(t)); err == nil {
		t.Fatal("want error for invalid name")
	}
	d, revoked, err := r.DeviceByKey(ctx, k)
	if err != nil || revoked || d.Name != "dev1" {
		t.Fatalf("lookup: %v %v %v", d, revoked, err)
	}
	if err := r.RevokeDevice(ctx, "dev1", "stolen"); err != nil {
		t.Fatal(err)
	}
	if _, revoked, _ := r.DeviceByKey(ctx, k); !revoked {
		t.Fatal("key still accepted after revoke")
	}
	n, err := r.AddViolation(ctx, "dev1", "test", "", true)
	if err != nil || n != 1 {
		t.Fatalf("violation count %d %v", n, err)
	}
	ev, err := r.Events(ctx, EventFilter{Device: "dev1"})
	if err != nil || len(ev) != 3 || ev[1].Kind != EventRevoked || ev[2].Kind != EventViolation {
		t.Fatalf("events %+v %v", ev, err)
	}
	if err := r.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.DeviceByKey(ctx, k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key of removed device: %v", err)
	}
}

// What a hub held in memory while the registry could not write goes in with its own
// time and count: violations added in one step, an event at the time it happened.
func TestHeldViolationsAndEventTimes(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.AddViolation(ctx, "dev1", "x", "", false); err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
	if n, err := r.AddViolations(ctx, "dev1", 41); err != nil || n != 42 {
		t.Fatalf("held violations: %d %v", n, err)
	}
	if _, err := r.AddViolations(ctx, "nodev", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown device: %v", err)
	}
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	if err := r.AddEvent(ctx, Event{At: at, Device: "dev1", Kind: EventAuthRefused, Detail: "held"}); err != nil {
		t.Fatal(err)
	}
	ev, err := r.Events(ctx, EventFilter{Device: "dev1", Kind: EventAuthRefused})
	if err != nil || len(ev) != 1 || !ev[0].At.Equal(at) {
		t.Fatalf("event: %+v %v", ev, err)
	}
}
