package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// One hub serves from a PostgreSQL registry: a second is refused with the first named,
// the same hub started again takes over at once, a released or expired lease can be
// taken, and a holder whose lease was taken learns it on Lost.
func TestServingLease(t *testing.T) {
	if backend != sqldb.Postgres {
		// On SQLite the data folder's lock does this; the lease holds nothing there.
		r := open(t, t.TempDir())
		l, err := r.LockServing(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		return
	}
	ctx := context.Background()
	dir := t.TempDir()
	a := open(t, dir)
	b, err := Open(ctx, location(t, dir), sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, err := a.lockServing(ctx, "hub one:/data", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LockServing(ctx, "hub two:/data"); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "hub one:/data") {
		t.Fatalf("second hub: %v", err)
	}
	// The same hub, started again after a crash, does not wait for its old lease.
	again, err := b.LockServing(ctx, "hub one:/data")
	if err != nil {
		t.Fatalf("same holder: %v", err)
	}
	again.Release()
	la.Release()
	lb, err := b.LockServing(ctx, "hub two:/data")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	lb.Release()

	// hub one's lease expires (it stopped renewing: as if PostgreSQL was out of reach for
	// longer than its time to live) and hub two takes it; hub one learns it lost it.
	// Its renewals are the test's to make: a time to live of an hour.
	la, err = a.lockServing(ctx, "hub one:/data", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rawExec(t, dir, `UPDATE leases SET renewed_at='2020-01-01T00:00:00.000000Z'`)
	if lb, err = b.LockServing(ctx, "hub two:/data"); err != nil {
		t.Fatalf("expired lease: %v", err)
	}
	defer lb.Release()
	if err := la.renewOnce(ctx); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "hub two:/data") {
		t.Fatalf("lost: %v", err)
	}
	la.Release() // after losing: must not remove hub two's lease
	if _, err := a.LockServing(ctx, "hub three:/data"); !errors.Is(err, ErrInUse) {
		t.Fatalf("hub two's lease after hub one's release: %v", err)
	}
}
