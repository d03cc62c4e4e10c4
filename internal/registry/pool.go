package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Pool errors callers branch on.
var (
	// ErrPoolMismatch means a configuration names another pool than the registry's.
	ErrPoolMismatch = errors.New("registry: the configured pool differs from the registry's")
	// ErrOutsidePool means an allocation lies outside the pool (see MovePool).
	ErrOutsidePool = errors.New("registry: allocation outside the pool")
)

// Move is one device given a new address (and its sockets new ports) by a pool change.
type Move struct {
	Device  string          `json:"device"`
	From    netip.Addr      `json:"from"`
	To      netip.Addr      `json:"to"`
	Sockets map[string]Port `json:"sockets,omitempty"` // alias -> its port before and after
}

// Port is a socket's port before and after a move.
type Port struct {
	From int `json:"from"`
	To   int `json:"to"`
}

const (
	keyPoolCIDR     = "pool.cidr"
	keyPoolPortBase = "pool.port_base"
)

// loadPool reads the recorded pool, recording want's if there is none yet.
func (r *Registry) loadPool(ctx context.Context, want sockets.Config) error {
	var cidr, base string
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		e1 := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key=?`, keyPoolCIDR).Scan(&cidr)
		e2 := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key=?`, keyPoolPortBase).Scan(&base)
		if e1 == nil && e2 == nil {
			return nil
		}
		if !errors.Is(e1, sql.ErrNoRows) && e1 != nil || !errors.Is(e2, sql.ErrNoRows) && e2 != nil {
			return fmt.Errorf("registry: reading the pool: %v %v", e1, e2)
		}
		p, err := sockets.NewPool(want)
		if err != nil {
			return err
		}
		c := p.Config()
		cidr, base = c.CIDR, strconv.Itoa(c.PortBase)
		return writePool(ctx, tx, c)
	})
	if err != nil {
		return err
	}
	portBase, _ := strconv.Atoi(base)
	recorded := sockets.Config{CIDR: cidr, PortBase: portBase}
	p, err := sockets.NewPool(recorded)
	if err != nil {
		return fmt.Errorf("registry: the recorded pool %s is no longer valid: %w; move it with 'iotsafe pool move'", cidr, err)
	}
	if err := poolMatches(p, want); err != nil {
		return err
	}
	r.pool.Store(p)
	return nil
}

// poolMatches checks the fields want sets against the recorded pool.
func poolMatches(p *sockets.Pool, want sockets.Config) error {
	have := p.Config()
	if want.CIDR != "" {
		w, err := netip.ParsePrefix(want.CIDR)
		if err != nil {
			return fmt.Errorf("registry: pool.cidr %q: %w", want.CIDR, err)
		}
		if w.Masked().String() != have.CIDR {
			return fmt.Errorf("%w: pool.cidr is %s in the configuration but %s in the registry (recorded at its first start); "+
				"to move every device into %s, stop the hub and run 'iotsafe pool move --cidr %s'; or remove pool.cidr from the configuration",
				ErrPoolMismatch, w.Masked(), have.CIDR, w.Masked(), w.Masked())
		}
	}
	if want.PortBase != 0 && want.PortBase != have.PortBase {
		return fmt.Errorf("%w: pool.port_base is %d in the configuration but %d in the registry; "+
			"stop the hub and run 'iotsafe pool move --port-base %d', or remove pool.port_base from the configuration",
			ErrPoolMismatch, want.PortBase, have.PortBase, want.PortBase)
	}
	return nil
}

func writePool(ctx context.Context, tx *sqldb.Tx, c sockets.Config) error {
	for k, v := range map[string]string{keyPoolCIDR: c.CIDR, keyPoolPortBase: strconv.Itoa(c.PortBase)} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO settings(key, value) VALUES(?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value`, k, v); err != nil {
			return fmt.Errorf("registry: recording the pool: %w", err)
		}
	}
	return nil
}

// MovePool makes cfg (fields left zero keep their recorded value) the registry's pool
// and re-homes, in one transaction, every device whose address lies outside it and every
// socket whose port lies below its port base. Addresses and ports already inside stay.
// With cfg equal to the recorded pool it only re-homes what lies outside (registries
// written before the pool was recorded). The hub must not be running: it binds sockets.
func (r *Registry) MovePool(ctx context.Context, cfg sockets.Config) ([]Move, error) {
	cur := r.Pool().Config()
	if cfg.CIDR == "" {
		cfg.CIDR = cur.CIDR
	}
	if cfg.PortBase == 0 {
		cfg.PortBase = cur.PortBase
	}
	p, err := sockets.NewPool(cfg)
	if err != nil {
		return nil, err
	}
	var moves []Move
	err = r.withTx(ctx, func(tx *sqldb.Tx) error {
		var err error
		if moves, err = rehome(ctx, tx, p); err != nil {
			return err
		}
		if err := writePool(ctx, tx, p.Config()); err != nil {
			return err
		}
		if cur != p.Config() || len(moves) > 0 {
			detail := fmt.Sprintf("pool %s port_base %d -> %s port_base %d; %d devices moved", cur.CIDR, cur.PortBase, p.Config().CIDR, p.Config().PortBase, len(moves))
			return r.addEvent(ctx, tx, Event{Kind: EventPoolMoved, Detail: detail})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.pool.Store(p)
	return moves, nil
}

// rehome gives a new address to every device outside p and a new port to every socket
// below p's port base.
func rehome(ctx context.Context, tx *sqldb.Tx, p *sockets.Pool) ([]Move, error) {
	type dev struct {
		name string
		addr netip.Addr
	}
	rows, err := tx.QueryContext(ctx, `SELECT name, address FROM devices ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("registry: devices: %w", err)
	}
	var devs []dev
	taken := map[netip.Addr]bool{}
	for rows.Next() {
		var d dev
		var a string
		if err := rows.Scan(&d.name, &a); err != nil {
			rows.Close()
			return nil, fmt.Errorf("registry: devices: %w", err)
		}
		d.addr, _ = netip.ParseAddr(a)
		devs = append(devs, d)
		if p.Contains(d.addr) {
			taken[d.addr] = true
		}
	}
	rows.Close()
	var moves []Move
	for _, d := range devs {
		m := Move{Device: d.name, From: d.addr, To: d.addr, Sockets: map[string]Port{}}
		if !p.Contains(d.addr) {
			to, err := p.NextAddress(func(a netip.Addr) bool { return taken[a] })
			if err != nil {
				return nil, fmt.Errorf("registry: moving device %s: %w", d.name, err)
			}
			taken[to] = true
			m.To = to
			if _, err := tx.ExecContext(ctx, `UPDATE devices SET address=? WHERE name=?`, to.String(), d.name); err != nil {
				return nil, fmt.Errorf("registry: moving device %s: %w", d.name, err)
			}
		}
		if err := renumberSockets(ctx, tx, p, &m); err != nil {
			return nil, err
		}
		if m.To != m.From || len(m.Sockets) > 0 {
			moves = append(moves, m)
		}
	}
	return moves, nil
}

// renumberSockets puts m's device's sockets on its (new) address, giving new ports to
// those below the port base.
func renumberSockets(ctx context.Context, tx *sqldb.Tx, p *sockets.Pool, m *Move) error {
	rows, err := tx.QueryContext(ctx, `SELECT alias, port FROM sockets WHERE device=? ORDER BY port`, m.Device)
	if err != nil {
		return fmt.Errorf("registry: sockets of %s: %w", m.Device, err)
	}
	ports := map[string]int{}
	var order []string
	taken := map[int]bool{}
	base := p.Config().PortBase
	for rows.Next() {
		var alias string
		var port int
		rows.Scan(&alias, &port)
		ports[alias] = port
		order = append(order, alias)
		if port >= base {
			taken[port] = true
		}
	}
	rows.Close()
	for _, alias := range order {
		port := ports[alias]
		if port < base {
			np, err := p.NextPort(func(q int) bool { return taken[q] })
			if err != nil {
				return fmt.Errorf("registry: socket %s/%s: %w", m.Device, alias, err)
			}
			taken[np] = true
			m.Sockets[alias] = Port{From: port, To: np}
			port = np
		}
		if _, err := tx.ExecContext(ctx, `UPDATE sockets SET address=?, port=? WHERE device=? AND alias=?`, m.To.String(), port, m.Device, alias); err != nil {
			return fmt.Errorf("registry: socket %s/%s: %w", m.Device, alias, err)
		}
	}
	return nil
}
