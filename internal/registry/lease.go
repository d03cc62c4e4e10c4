package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// ErrInUse means the lease is held by another: a hub of the same name, or an admin
// command that needs every hub stopped (or, for that command, a serving hub).
var ErrInUse = errors.New("registry in use")

// ErrLeaseLost means a hub's lease was taken by another after it expired (the hub could
// not renew it for longer than its time to live).
var ErrLeaseLost = errors.New("registry: the lease was taken by another")

// LeaseTTL is how long a lease lasts without renewal; the holder renews it every third.
const LeaseTTL = 30 * time.Second

const (
	hubLeasePrefix   = "hub:"
	maintenanceLease = "maintenance"
)

// Lease is a hold kept in a PostgreSQL registry itself, so it outlives connections and
// a PostgreSQL restart: each hub sharing the registry holds one under its name, and an
// admin command that must run with no hub serving (pool move, registry migrate) holds
// the maintenance lease.
type Lease struct {
	r      *Registry
	name   string
	holder string
	ttl    time.Duration
	lost   chan error
	stop   chan struct{}
	done   chan struct{}
}

// LockServing takes the lease of the hub named by SetHub for holder (its host and data
// folder) and renews it until Release. A hub of the same name held by another holder is
// refused with ErrInUse naming it, until its lease expires (LeaseTTL after its last
// renewal: a hub that died); the same holder started again takes it over at once. So
// is a start while an admin command holds the maintenance lease. Hubs of other names
// share the registry. On SQLite the data folder's lock file does this job and
// LockServing holds nothing.
func (r *Registry) LockServing(ctx context.Context, holder string, peer Peer) (*Lease, error) {
	return r.lock(ctx, hubLeasePrefix+r.hub, holder, peer, LeaseTTL)
}

// Peer is how the other hubs of a registry reach a hub: its address for them ("" when
// it takes no peers) and its SSH host key in authorized_keys form.
type Peer struct {
	Addr    string `json:"peer_address,omitempty"`
	HostKey string `json:"host_key,omitempty"`
}

// HubInfo is a live hub of the registry.
type HubInfo struct {
	Name   string `json:"name"`
	Holder string `json:"holder"` // host and data folder
	Peer
}

// LockMaintenance takes the maintenance lease for an admin command that must run with
// no hub serving: refused with ErrInUse naming a hub whose lease is valid. Hubs starting
// meanwhile are refused. On SQLite it holds nothing (the command takes the data
// folder's lock).
func (r *Registry) LockMaintenance(ctx context.Context, holder string) (*Lease, error) {
	return r.lock(ctx, maintenanceLease, holder, Peer{}, LeaseTTL)
}

// lockServing is LockServing with another time to live (tests).
func (r *Registry) lockServing(ctx context.Context, holder string, ttl time.Duration) (*Lease, error) {
	return r.lock(ctx, hubLeasePrefix+r.hub, holder, Peer{}, ttl)
}

type leaseRow struct {
	name, holder string
	renewed      time.Time
	ttl          time.Duration
	peer         Peer
}

func (l leaseRow) left() time.Duration { return time.Until(l.renewed.Add(l.ttl)) }

func (r *Registry) lock(ctx context.Context, name, holder string, peer Peer, ttl time.Duration) (*Lease, error) {
	l := &Lease{r: r, name: name, holder: holder, ttl: ttl, lost: make(chan error, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if r.db.Dialect() != sqldb.Postgres {
		close(l.done)
		return l, nil
	}
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		held, err := readLeases(ctx, tx)
		if err != nil {
			return err
		}
		for _, o := range held {
			conflict := o.name == name && o.holder != holder || // the same hub elsewhere
				o.name == maintenanceLease && name != maintenanceLease || // a command that needs no hub
				name == maintenanceLease && strings.HasPrefix(o.name, hubLeasePrefix) // a hub, for that command
			if !conflict || o.left() <= 0 {
				continue
			}
			var what, fix string
			switch {
			case o.name == maintenanceLease:
				what, fix = "an admin command that needs every hub stopped runs on", "wait for it to end"
			case o.name == name:
				what, fix = "another hub named "+r.hub+" serves from", "give this hub its own registry.hub_name, or stop that one"
			default:
				what, fix = "hub "+strings.TrimPrefix(o.name, hubLeasePrefix)+" serves from", "stop every hub of this registry first"
			}
			return fmt.Errorf("%w: %s %s (%s, lease renewed %s ago); %s; if it died, its lease expires in %s",
				ErrInUse, what, r.where, o.holder, time.Since(o.renewed).Round(time.Second), fix, o.left().Round(time.Second))
		}
		t := now()
		_, err = tx.ExecContext(ctx, `INSERT INTO leases(name, holder, started_at, renewed_at, ttl_ms, peer_addr, host_key) VALUES(?,?,?,?,?,?,?)
			ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, started_at=excluded.started_at, renewed_at=excluded.renewed_at,
				ttl_ms=excluded.ttl_ms, peer_addr=excluded.peer_addr, host_key=excluded.host_key`,
			name, holder, t, t, ttl.Milliseconds(), peer.Addr, peer.HostKey)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrInUse) {
			return nil, err
		}
		return nil, fmt.Errorf("registry: lease: %w", err)
	}
	go l.renew()
	return l, nil
}

func readLeases(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]leaseRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, holder, renewed_at, ttl_ms, peer_addr, host_key FROM leases`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leaseRow
	for rows.Next() {
		var l leaseRow
		var renewed string
		var ttlMS int64
		if err := rows.Scan(&l.name, &l.holder, &renewed, &ttlMS, &l.peer.Addr, &l.peer.HostKey); err != nil {
			return nil, err
		}
		l.renewed, _ = time.Parse(timeLayout, renewed)
		l.ttl = time.Duration(ttlMS) * time.Millisecond
		out = append(out, l)
	}
	return out, rows.Err()
}

// LiveHubs are the hubs whose lease is valid now, by name. On SQLite it is empty: one
// hub, and whether it runs is the data folder's lock.
func (r *Registry) LiveHubs(ctx context.Context) (map[string]HubInfo, error) {
	out := map[string]HubInfo{}
	if r.db.Dialect() != sqldb.Postgres {
		return out, nil
	}
	held, err := readLeases(ctx, r.db)
	if err != nil {
		return nil, fmt.Errorf("registry: leases: %w", err)
	}
	for _, l := range held {
		if strings.HasPrefix(l.name, hubLeasePrefix) && l.left() > 0 {
			name := strings.TrimPrefix(l.name, hubLeasePrefix)
			out[name] = HubInfo{Name: name, Holder: l.holder, Peer: l.peer}
		}
	}
	return out, nil
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
	res, err := l.r.db.ExecContext(ctx, `UPDATE leases SET renewed_at=? WHERE name=? AND holder=?`, now(), l.name, l.holder)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var other string
	_ = l.r.db.QueryRowContext(ctx, `SELECT holder FROM leases WHERE name=?`, l.name).Scan(&other)
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
	_, _ = l.r.db.ExecContext(ctx, `DELETE FROM leases WHERE name=? AND holder=?`, l.name, l.holder)
}

// SocketAt names the protected socket at a: its device and alias, and the hub that
// holds the device's session ("" when none does). ErrNotFound if no socket is there.
func (r *Registry) SocketAt(ctx context.Context, a netip.AddrPort) (device, alias, hub string, err error) {
	err = r.db.QueryRowContext(ctx, `SELECT s.device, s.alias, d.hub FROM sockets s JOIN devices d ON d.name = s.device
		WHERE s.address=? AND s.port=?`, a.Addr().Unmap().String(), int(a.Port())).Scan(&device, &alias, &hub)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", "", fmt.Errorf("%w: socket %s", ErrNotFound, a)
	}
	if err != nil {
		return "", "", "", fmt.Errorf("registry: socket %s: %w", a, err)
	}
	return device, alias, hub, nil
}

// SocketPorts are the distinct ports of every protected socket in the registry: a hub
// that relays to its peers listens on all of them.
func (r *Registry) SocketPorts(ctx context.Context) ([]uint16, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT DISTINCT port FROM sockets ORDER BY port`)
	if err != nil {
		return nil, fmt.Errorf("registry: socket ports: %w", err)
	}
	defer rows.Close()
	var out []uint16
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, uint16(p))
	}
	return out, rows.Err()
}

// SessionHub is the hub that holds device's session ("" when none does).
func (r *Registry) SessionHub(ctx context.Context, device string) (string, error) {
	var hub string
	err := r.db.QueryRowContext(ctx, `SELECT hub FROM devices WHERE name=?`, device).Scan(&hub)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%w: device %q", ErrNotFound, device)
	}
	return hub, err
}
