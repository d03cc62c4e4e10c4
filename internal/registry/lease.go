package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// ErrInUse means another hub serves from this registry.
var ErrInUse = errors.New("registry: another hub serves from this registry")

// ErrLeaseLost means a hub's lease was taken by another after it expired (the hub could
// not renew it for longer than its time to live).
var ErrLeaseLost = errors.New("registry: the serving lease was taken by another hub")

// LeaseTTL is how long a lease lasts without renewal; the holder renews it every third.
const LeaseTTL = 30 * time.Second

const servingLease = "serving"

// Lease is the hold of the one hub that serves from a PostgreSQL registry, kept in the
// registry itself so it outlives connections and a PostgreSQL restart.
type Lease struct {
	r      *Registry
	holder string
	ttl    time.Duration
	lost   chan error
	stop   chan struct{}
	done   chan struct{}
}

// LockServing takes the serving lease for holder (say who: a hub's host and data
// folder; a command's name and pid) and renews it until Release. On PostgreSQL a
// second holder is refused with ErrInUse naming the first, until the first's lease
// expires (LeaseTTL after its last renewal: a hub that died) — except that the same
// holder, started again, takes it over at once. On SQLite the data folder's lock file
// does this job and LockServing holds nothing.
//
// Several hubs on one PostgreSQL registry need sessions located per hub, which this
// build does not have yet: until then one hub serves, and admin commands share the
// registry with it freely.
func (r *Registry) LockServing(ctx context.Context, holder string) (*Lease, error) {
	return r.lockServing(ctx, holder, LeaseTTL)
}

func (r *Registry) lockServing(ctx context.Context, holder string, ttl time.Duration) (*Lease, error) {
	l := &Lease{r: r, holder: holder, ttl: ttl, lost: make(chan error, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if r.db.Dialect() != sqldb.Postgres {
		close(l.done)
		return l, nil
	}
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var other, renewed string
		var ttlMS int64
		err := tx.QueryRowContext(ctx, `SELECT holder, renewed_at, ttl_ms FROM leases WHERE name=?`, servingLease).Scan(&other, &renewed, &ttlMS)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err == nil && other != holder {
			at, _ := time.Parse(timeLayout, renewed)
			if left := time.Until(at.Add(time.Duration(ttlMS) * time.Millisecond)); left > 0 {
				return fmt.Errorf("%w (%s): it is held by %s, renewed %s ago; stop that hub first, or if it died, wait %s for its lease to expire",
					ErrInUse, r.where, other, time.Since(at).Round(time.Second), left.Round(time.Second))
			}
		}
		t := now()
		_, err = tx.ExecContext(ctx, `INSERT INTO leases(name, holder, started_at, renewed_at, ttl_ms) VALUES(?,?,?,?,?)
			ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, started_at=excluded.started_at, renewed_at=excluded.renewed_at, ttl_ms=excluded.ttl_ms`,
			servingLease, holder, t, t, ttl.Milliseconds())
		return err
	})
	if err != nil {
		if errors.Is(err, ErrInUse) {
			return nil, err
		}
		return nil, fmt.Errorf("registry: serving lease: %w", err)
	}
	go l.renew()
	return l, nil
}

// renew keeps the lease until Release; when another holder has taken it, it says so on
// Lost and stops. Renewals that fail (PostgreSQL unreachable) are retried at the next
// tick: the lease is only lost if another hub takes it meanwhile.
func (l *Lease) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
		err := l.renewOnce(ctx)
		cancel()
		if errors.Is(err, ErrLeaseLost) {
			l.lost <- err
			return
		}
	}
}

// renewOnce renews the lease, or says it was lost (ErrLeaseLost, naming the holder).
func (l *Lease) renewOnce(ctx context.Context) error {
	res, err := l.r.db.ExecContext(ctx, `UPDATE leases SET renewed_at=? WHERE name=? AND holder=?`, now(), servingLease, l.holder)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var other string
	_ = l.r.db.QueryRowContext(ctx, `SELECT holder FROM leases WHERE name=?`, servingLease).Scan(&other)
	return fmt.Errorf("%w (%s): now held by %q", ErrLeaseLost, l.r.where, other)
}

// Lost delivers an error if the lease was taken by another holder; the hub then stops
// serving. It never delivers on SQLite.
func (l *Lease) Lost() <-chan error { return l.lost }

// Release ends the lease at once (another hub may start without waiting).
func (l *Lease) Release() {
	select {
	case <-l.done:
	default:
		close(l.stop)
		<-l.done
	}
	if l.r.db.Dialect() != sqldb.Postgres {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.r.db.ExecContext(ctx, `DELETE FROM leases WHERE name=? AND holder=?`, servingLease, l.holder)
}
