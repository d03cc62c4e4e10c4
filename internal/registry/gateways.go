package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// ErrClaimed means a gateway announced a device that is not its own: a direct device
// of this hub, or one bound to another gateway.
var ErrClaimed = errors.New("registry: device claimed elsewhere")

// ErrGatewayFull means a gateway announced a new device beyond its profile's
// gateway.max_devices.
var ErrGatewayFull = errors.New("registry: gateway at its device limit")

// Claim is one device a gateway announces, with what the gateway knows of its session.
type Claim struct {
	Name    string
	Aliases []string // the aliases it serves; a socket is allocated for any its profile allows and it lacks
	Remote  string   // recorded as its last remote address
	Algos   Algorithms
	// Relayed: the gateway relays the device's notifications, which says nothing of a
	// session (it may have none): the device is recorded as for an announcement, its
	// session is not.
	Relayed bool
}

// Claimed answers one Claim: the device (name, profile, address, revocation and
// sockets; no keys or groups) or why it was refused. Created says this claim recorded
// the device (its first announcement or relayed notification).
type Claimed struct {
	Device  *Device
	Err     error
	Created bool
}

// ClaimDevices records a batch of devices a gateway announces, in one transaction: a
// device is created at its first announcement, bound to the gateway, with profile
// devProfile, a pool address and a protected socket per reverse alias, and no key of
// its own (it logs in at the gateway, never here). A device bound to another gateway or
// enrolled here directly gets ErrClaimed; a new one beyond maxDevices bound to the
// gateway ErrGatewayFull. Each device that is not revoked has its session recorded
// (last seen, remote, algorithms and a session_open event naming the gateway). A
// revoked device is returned as it is: the caller refuses it.
func (r *Registry) ClaimDevices(ctx context.Context, gateway, devProfile string, maxDevices int, claims []Claim) ([]Claimed, error) {
	out := make([]Claimed, len(claims))
	profiles := map[string]*profile.Profile{}
	profileOf := func(name string) (*profile.Profile, error) {
		if p, ok := profiles[name]; ok {
			return p, nil
		}
		p, err := r.Profile(ctx, name)
		if err == nil {
			profiles[name] = p
		}
		return p, err
	}
	if _, err := profileOf(devProfile); err != nil {
		return nil, fmt.Errorf("gateway %s: its devices' profile: %w", gateway, err)
	}
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var bound int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM devices WHERE via=?`, gateway).Scan(&bound); err != nil {
			return fmt.Errorf("registry: devices of gateway %s: %w", gateway, err)
		}
		t := now()
		st, err := prepareClaims(ctx, tx)
		if err != nil {
			return err
		}
		defer st.close()
		for i, c := range claims {
			before := bound
			d, err := r.claimOne(ctx, tx, st, gateway, devProfile, maxDevices, &bound, c, profileOf, t)
			out[i] = Claimed{Device: d, Err: err, Created: bound > before}
			var fatal *fatalErr
			if errors.As(err, &fatal) {
				return fatal.err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fatalErr is a database failure that ends the whole batch (a refusal ends one claim).
type fatalErr struct{ err error }

func (f *fatalErr) Error() string { return f.err.Error() }

// claimStmts are the statements every claim of a batch runs, prepared once per batch:
// parsing SQL was a third of the centre's cost per announced device.
type claimStmts struct {
	device, sockets, session, event *sql.Stmt
}

func prepareClaims(ctx context.Context, tx *sqldb.Tx) (*claimStmts, error) {
	var st claimStmts
	for _, p := range []struct {
		to  **sql.Stmt
		sql string
	}{
		{&st.device, `SELECT profile, address, revoked_at, revoke_why, via FROM devices WHERE name=?`},
		{&st.sockets, `SELECT alias, address, port FROM sockets WHERE device=?`},
		{&st.session, `UPDATE devices SET last_seen=?, last_remote=?, last_algos=?, hub=? WHERE name=?`},
		{&st.event, `INSERT INTO events(at, device, kind, detail, remote, hub) VALUES(?,?,?,?,?,?)`},
	} {
		s, err := tx.PrepareContext(ctx, p.sql)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("registry: prepare: %w", err)
		}
		*p.to = s
	}
	return &st, nil
}

func (st *claimStmts) close() {
	for _, s := range []*sql.Stmt{st.device, st.sockets, st.session, st.event} {
		if s != nil {
			s.Close()
		}
	}
}

func (r *Registry) claimOne(ctx context.Context, tx *sqldb.Tx, st *claimStmts, gateway, devProfile string, maxDevices int, bound *int, c Claim,
	profileOf func(string) (*profile.Profile, error), t string) (*Device, error) {
	if !profile.ValidName(c.Name) {
		return nil, fmt.Errorf("device name %q: use lower-case letters, digits and '-' (max 63)", c.Name)
	}
	d, err := r.claimRow(ctx, tx, st, gateway, devProfile, maxDevices, bound, c.Name, t)
	if err != nil {
		return nil, err
	}
	if err := claimedBy(d, gateway); err != nil {
		return nil, err
	}
	prof, err := profileOf(d.Profile)
	if err != nil {
		return nil, fmt.Errorf("device %q has no usable profile %q here", c.Name, d.Profile)
	}
	if err := r.claimSockets(ctx, tx, st, d, prof, c.Aliases); err != nil {
		return nil, err
	}
	if d.Revoked() || c.Relayed {
		return d, nil
	}
	algos, _ := json.Marshal(c.Algos)
	if _, err := st.session.ExecContext(ctx, t, c.Remote, string(algos), r.hub, c.Name); err != nil {
		return nil, &fatalErr{fmt.Errorf("registry: record session %s: %w", c.Name, err)}
	}
	detail := fmt.Sprintf("via gateway %s: %s, %s, key %s", gateway, c.Algos.Client, c.Algos.Cipher, c.Algos.Key)
	if _, err := st.event.ExecContext(ctx, t, c.Name, EventSessionOpen, detail, c.Remote, r.hub); err != nil {
		return nil, &fatalErr{fmt.Errorf("registry: add event: %w", err)}
	}
	return d, nil
}

// claimRow reads device name's row, or adds it for gateway (within maxDevices, bound
// counting the gateway's devices so far).
func (r *Registry) claimRow(ctx context.Context, tx *sqldb.Tx, st *claimStmts, gateway, devProfile string, maxDevices int, bound *int, name, t string) (*Device, error) {
	d := &Device{Name: name}
	var addr, via string
	var revoked sql.NullString
	err := st.device.QueryRowContext(ctx, name).Scan(&d.Profile, &addr, &revoked, &d.RevokeWhy, &via)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if *bound >= maxDevices {
			return nil, fmt.Errorf("%w: gateway %q has %d devices, its profile allows %d (gateway.max_devices; remove old ones with 'iotsafe device remove')",
				ErrGatewayFull, gateway, *bound, maxDevices)
		}
		a, err := r.freeAddress(ctx, tx)
		if err != nil {
			return nil, &fatalErr{err}
		}
		d.Profile, addr, via = devProfile, a.String(), gateway
		if _, err := tx.ExecContext(ctx, `INSERT INTO devices(name, profile, address, created_at, via) VALUES(?,?,?,?,?)`,
			name, devProfile, addr, t, gateway); err != nil {
			return nil, &fatalErr{fmt.Errorf("registry: add device %s: %w", name, err)}
		}
		*bound++
		if err := r.addEvent(ctx, tx, Event{Device: name, Kind: EventDeviceAdded, Detail: "profile " + devProfile + ", announced by gateway " + gateway}); err != nil {
			return nil, &fatalErr{err}
		}
	case err != nil:
		return nil, &fatalErr{fmt.Errorf("registry: device %s: %w", name, err)}
	}
	d.Via = via
	d.Address, _ = netip.ParseAddr(addr)
	d.RevokedAt = parseTime(revoked)
	return d, nil
}

// claimSockets gives d its sockets: those it has, and one for every alias it serves
// that its profile allows (a profile may have gained aliases since).
func (r *Registry) claimSockets(ctx context.Context, tx *sqldb.Tx, st *claimStmts, d *Device, prof *profile.Profile, served []string) error {
	rows, err := st.sockets.QueryContext(ctx, d.Name)
	if err != nil {
		return &fatalErr{fmt.Errorf("registry: sockets of %s: %w", d.Name, err)}
	}
	have := map[string]bool{}
	ports := &portSet{taken: map[int]bool{}}
	for rows.Next() {
		var alias, a string
		var port int
		if err := rows.Scan(&alias, &a, &port); err != nil {
			rows.Close()
			return &fatalErr{err}
		}
		if s, err := socketFrom(alias, a, port); err == nil {
			d.Sockets = append(d.Sockets, s)
		}
		have[alias], ports.taken[port] = true, true
	}
	rows.Close()
	for _, alias := range append(prof.ReverseAliases(), served...) {
		if _, ok := prof.Reverse[alias]; !ok || have[alias] {
			continue
		}
		s, err := r.ensureSocket(ctx, tx, d.Name, alias, ports)
		if err != nil {
			return &fatalErr{err}
		}
		d.Sockets, have[alias] = append(d.Sockets, s), true
	}
	return nil
}

func claimedBy(d *Device, gateway string) error {
	switch d.Via {
	case gateway:
		return nil
	case "":
		return fmt.Errorf("%w: %q is enrolled at this hub as a direct device, not behind gateway %q", ErrClaimed, d.Name, gateway)
	default:
		return fmt.Errorf("%w: %q is behind gateway %q, not %q", ErrClaimed, d.Name, d.Via, gateway)
	}
}

// EndSessions records, in one transaction, that the sessions of these devices behind a
// gateway ended (last seen, and a session_close event each): a gateway that goes away
// ends a thousand at once.
func (r *Registry) EndSessions(ctx context.Context, devices []string, remote string) error {
	if len(devices) == 0 {
		return nil
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		t := now()
		for _, name := range devices {
			if _, err := tx.ExecContext(ctx, `UPDATE devices SET last_seen=?, hub=CASE WHEN hub=? THEN '' ELSE hub END WHERE name=?`, t, r.hub, name); err != nil {
				return fmt.Errorf("registry: end session %s: %w", name, err)
			}
			if err := r.addEvent(ctx, tx, Event{Device: name, Kind: EventSessionClose, Remote: remote}); err != nil {
				return err
			}
		}
		return nil
	})
}

// GatewayDevices lists the names of the devices bound to a gateway.
func (r *Registry) GatewayDevices(ctx context.Context, gateway string) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT name FROM devices WHERE via=? ORDER BY name`, gateway)
	if err != nil {
		return nil, fmt.Errorf("registry: devices of gateway %s: %w", gateway, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
