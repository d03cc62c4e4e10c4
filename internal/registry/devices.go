package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/sshext"
)

// Device is one enrolled device with its keys and protected sockets.
type Device struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Via     string `json:"via,omitempty"` // the gateway it is behind; "" when direct
	// Hub is the hub that recorded the device's session and has not recorded its end
	// (on a shared registry: which hub holds it; a dead hub's lease says it is gone).
	Hub        string      `json:"hub,omitempty"`
	Address    netip.Addr  `json:"address"` // its own address in the pool: source of its direct forwards
	CreatedAt  time.Time   `json:"created_at"`
	RevokedAt  *time.Time  `json:"revoked_at,omitempty"`
	RevokeWhy  string      `json:"revoke_reason,omitempty"`
	Violations int         `json:"violations"`
	LastSeen   *time.Time  `json:"last_seen,omitempty"`
	LastRemote string      `json:"last_remote,omitempty"`
	LastAlgos  *Algorithms `json:"last_algorithms,omitempty"`
	Groups     []string    `json:"groups"`
	Keys       []Key       `json:"keys"`
	Sockets    []Socket    `json:"sockets"`
}

// Revoked reports whether the device's keys are refused.
func (d *Device) Revoked() bool { return d.RevokedAt != nil }

// Key is a device public key.
type Key struct {
	Fingerprint string     `json:"fingerprint"`
	Type        string     `json:"type"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
}

// Socket is a protected socket: the hub-side address of one reverse alias of a device.
type Socket struct {
	Alias string         `json:"alias"`
	Addr  netip.AddrPort `json:"address"`
}

// Algorithms is what a device negotiated at its last handshake.
type Algorithms struct {
	KeyExchange string `json:"kex"`
	HostKey     string `json:"host_key"`
	Cipher      string `json:"cipher"`
	MAC         string `json:"mac,omitempty"`
	KeyType     string `json:"device_key"`
	Key         string `json:"device_key_fingerprint,omitempty"` // which of the device's keys
	Client      string `json:"client_version"`
	// Multiplexed is the mode of the session's multiplexed channel ("none": uncompressed,
	// "deflate"); empty if the device opened one SSH channel per connection.
	Multiplexed string `json:"multiplexed,omitempty"`
	// Offer names what the client offered in its KEXINIT (RecordOffer's hash); "" when
	// it was not recorded.
	Offer string `json:"offer,omitempty"`
}

// AddDevice enrolls a device with one key (nil: none yet, for a device registered over
// the REST API, which logs in with tokens until 'iotsafe device key add' gives it one)
// and its device groups, allocates its pool address and a protected socket for every
// reverse alias of its profile, all in one transaction.
func (r *Registry) AddDevice(ctx context.Context, name, profileName string, key ssh.PublicKey, groups ...string) (*Device, error) {
	if err := checkNewDevice(name, groups); err != nil {
		return nil, err
	}
	prof, err := r.Profile(ctx, profileName)
	if err != nil {
		return nil, err
	}
	if err := r.withTx(ctx, func(tx *sqldb.Tx) error { return r.addDeviceTx(ctx, tx, name, prof, key, groups) }); err != nil {
		return nil, err
	}
	return r.Device(ctx, name)
}

// checkNewDevice checks a new device's name and groups.
func checkNewDevice(name string, groups []string) error {
	if !profile.ValidName(name) {
		return fmt.Errorf("registry: device name %q: use lower-case letters, digits and '-' (max 63)", name)
	}
	if name == sshext.JoinUser {
		return fmt.Errorf("registry: device name %q is the SSH user devices join as: choose another", name)
	}
	return checkGroups(groups)
}

// addDeviceTx is AddDevice's work inside tx.
func (r *Registry) addDeviceTx(ctx context.Context, tx *sqldb.Tx, name string, prof *profile.Profile, key ssh.PublicKey, groups []string) error {
	fp, keyNote := "", "no SSH key yet"
	if key != nil {
		fp = ssh.FingerprintSHA256(key)
		keyNote = "key " + fp
	}
	var n int
	tx.QueryRowContext(ctx, `SELECT count(*) FROM devices WHERE name=?`, name).Scan(&n)
	if n > 0 {
		return fmt.Errorf("%w: device %q", ErrExists, name)
	}
	var owner string
	if key != nil && tx.QueryRowContext(ctx, `SELECT device FROM keys WHERE fingerprint=?`, fp).Scan(&owner) == nil {
		return fmt.Errorf("%w: key %s belongs to device %q", ErrExists, fp, owner)
	}
	addr, err := r.freeAddress(ctx, tx)
	if err != nil {
		return err
	}
	t := now()
	if _, err := tx.ExecContext(ctx, `INSERT INTO devices(name, profile, address, created_at) VALUES(?,?,?,?)`,
		name, prof.Name, addr.String(), t); err != nil {
		return fmt.Errorf("registry: add device %s: %w", name, err)
	}
	if key != nil {
		if _, err := tx.ExecContext(ctx, `INSERT INTO keys(fingerprint, device, pubkey, created_at) VALUES(?,?,?,?)`,
			fp, name, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))), t); err != nil {
			return fmt.Errorf("registry: add key: %w", err)
		}
	}
	ports := &portSet{taken: map[int]bool{}} // a fresh address: no port taken yet
	for _, alias := range prof.ReverseAliases() {
		if _, err := r.ensureSocket(ctx, tx, name, alias, ports); err != nil {
			return err
		}
	}
	for _, g := range groups {
		if _, err := tx.ExecContext(ctx, `INSERT INTO device_groups(device, grp) VALUES(?,?) ON CONFLICT DO NOTHING`, name, g); err != nil {
			return fmt.Errorf("registry: device group %s: %w", g, err)
		}
		if _, err := r.ensureGroupInfo(ctx, tx, g, ""); err != nil {
			return err
		}
	}
	return r.addEvent(ctx, tx, Event{Device: name, Kind: EventDeviceAdded, Detail: "profile " + prof.Name + ", " + keyNote})
}

// freeAddress picks a free pool address for a new device: the one after the newest
// device's, or the next free one after it, each checked with one indexed query (reading
// every taken address would make enrolling N devices cost N*N/2 rows).
func (r *Registry) freeAddress(ctx context.Context, tx *sqldb.Tx) (netip.Addr, error) {
	var last string
	var hint netip.Addr
	if tx.QueryRowContext(ctx, `SELECT address FROM devices ORDER BY created_at DESC LIMIT 1`).Scan(&last) == nil {
		if a, err := netip.ParseAddr(last); err == nil {
			hint = a.Next()
		}
	}
	var qerr error
	a, err := r.Pool().NextAddressFrom(hint, func(a netip.Addr) bool {
		var one int
		switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE address=?`, a.String()).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return false
		case err != nil:
			qerr = err
		}
		return true
	})
	if qerr != nil {
		return netip.Addr{}, fmt.Errorf("registry: addresses: %w", qerr)
	}
	return a, err
}

// EnsureSocket returns the protected socket of device/alias, allocating it if the
// profile gained the alias after enrolment (created is then true). Allocations never
// move once made.
func (r *Registry) EnsureSocket(ctx context.Context, device, alias string) (s Socket, created bool, err error) {
	// Nearly always the socket exists: a read alone, which on PostgreSQL waits for no
	// writer lock and on SQLite for no writer's turn.
	var addrS string
	var port int
	switch err := r.db.QueryRowContext(ctx, `SELECT address, port FROM sockets WHERE device=? AND alias=?`, device, alias).Scan(&addrS, &port); {
	case err == nil:
		s, err := r.checkedSocket(device, alias, addrS, port)
		return s, false, err
	case !errors.Is(err, sql.ErrNoRows):
		return Socket{}, false, fmt.Errorf("registry: socket %s/%s: %w", device, alias, err)
	}
	err = r.withTx(ctx, func(tx *sqldb.Tx) error {
		var n int
		tx.QueryRowContext(ctx, `SELECT count(*) FROM sockets WHERE device=? AND alias=?`, device, alias).Scan(&n)
		created = n == 0
		var err error
		s, err = r.ensureSocket(ctx, tx, device, alias, nil)
		return err
	})
	return s, created, err
}

// checkedSocket is a stored socket, refused outside the pool: one written before the
// registry recorded its pool, or by an older binary, is never served (the kernel layer
// protects the pool only). The hub re-homes such devices at start.
func (r *Registry) checkedSocket(device, alias, addr string, port int) (Socket, error) {
	s, err := socketFrom(alias, addr, port)
	if err == nil && !r.Pool().Contains(s.Addr.Addr()) {
		return Socket{}, fmt.Errorf("%w: socket %s/%s at %s is outside the pool %s", ErrOutsidePool, device, alias, s.Addr, r.Pool().Prefix())
	}
	return s, err
}

// portSet is the ports taken on one device address while many aliases are allocated in
// a row; every port below from is taken.
type portSet struct {
	taken map[int]bool
	from  int
}

// ensureSocket allocates device/alias if needed. ports, if not nil, is the set of ports
// already used on the device's address, kept up to date (callers allocating many aliases
// at once pass it to avoid one query per alias); nil means ask the database.
func (r *Registry) ensureSocket(ctx context.Context, tx *sqldb.Tx, device, alias string, ports *portSet) (Socket, error) {
	var addrS string
	var port int
	err := tx.QueryRowContext(ctx, `SELECT address, port FROM sockets WHERE device=? AND alias=?`, device, alias).Scan(&addrS, &port)
	if err == nil {
		return r.checkedSocket(device, alias, addrS, port)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Socket{}, fmt.Errorf("registry: socket %s/%s: %w", device, alias, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT address FROM devices WHERE name=?`, device).Scan(&addrS); err != nil {
		return Socket{}, fmt.Errorf("%w: device %q", ErrNotFound, device)
	}
	addr, err := netip.ParseAddr(addrS)
	if err != nil {
		return Socket{}, fmt.Errorf("registry: device %s address %q: %w", device, addrS, err)
	}
	if ports == nil {
		rows, err := tx.QueryContext(ctx, `SELECT port FROM sockets WHERE address=?`, addrS)
		if err != nil {
			return Socket{}, fmt.Errorf("registry: ports: %w", err)
		}
		ports = &portSet{taken: map[int]bool{}}
		for rows.Next() {
			var p int
			rows.Scan(&p)
			ports.taken[p] = true
		}
		rows.Close()
	}
	port, err = r.Pool().NextPortFrom(ports.from, func(p int) bool { return ports.taken[p] })
	if err != nil {
		return Socket{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sockets(device, alias, address, port) VALUES(?,?,?,?)`, device, alias, addrS, port); err != nil {
		return Socket{}, fmt.Errorf("registry: add socket %s/%s: %w", device, alias, err)
	}
	ports.taken[port], ports.from = true, port+1
	return Socket{Alias: alias, Addr: netip.AddrPortFrom(addr, uint16(port))}, nil
}

func socketFrom(alias, addr string, port int) (Socket, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return Socket{}, fmt.Errorf("registry: socket %s: %w", alias, err)
	}
	return Socket{Alias: alias, Addr: netip.AddrPortFrom(a, uint16(port))}, nil
}

const deviceCols = `name, profile, address, created_at, revoked_at, revoke_why, violations, last_seen, last_remote, last_algos, via, hub`

// deviceColsOfD are deviceCols in a query that names the devices table d.
var deviceColsOfD = "d." + strings.ReplaceAll(deviceCols, ", ", ", d.")

// scanDevice reads the deviceCols of a row, then the columns after them into extra.
func scanDevice(sc interface{ Scan(...any) error }, extra ...any) (*Device, error) {
	var d Device
	var addr, created, algos string
	var revoked, seen sql.NullString
	dest := append([]any{&d.Name, &d.Profile, &addr, &created, &revoked, &d.RevokeWhy, &d.Violations, &seen, &d.LastRemote, &algos, &d.Via, &d.Hub}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	d.Address, _ = netip.ParseAddr(addr)
	if t := parseTime(sql.NullString{String: created, Valid: true}); t != nil {
		d.CreatedAt = *t
	}
	d.RevokedAt, d.LastSeen = parseTime(revoked), parseTime(seen)
	if algos != "" {
		d.LastAlgos = new(Algorithms)
		_ = json.Unmarshal([]byte(algos), d.LastAlgos)
	}
	return &d, nil
}

// Device returns one device with its keys and sockets.
func (r *Registry) Device(ctx context.Context, name string) (*Device, error) {
	d, err := scanDevice(r.db.QueryRowContext(ctx, `SELECT `+deviceCols+` FROM devices WHERE name=?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: device %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: device %s: %w", name, err)
	}
	return d, r.fillDevice(ctx, d)
}

func (r *Registry) fillDevice(ctx context.Context, d *Device) error {
	d.Keys, d.Sockets, d.Groups = []Key{}, []Socket{}, []string{}
	grows, err := r.db.QueryContext(ctx, `SELECT grp FROM device_groups WHERE device=? ORDER BY grp`, d.Name)
	if err != nil {
		return fmt.Errorf("registry: groups of %s: %w", d.Name, err)
	}
	for grows.Next() {
		var g string
		grows.Scan(&g)
		d.Groups = append(d.Groups, g)
	}
	grows.Close()
	rows, err := r.db.QueryContext(ctx, `SELECT fingerprint, pubkey, created_at, revoked_at FROM keys WHERE device=? ORDER BY created_at`, d.Name)
	if err != nil {
		return fmt.Errorf("registry: keys of %s: %w", d.Name, err)
	}
	for rows.Next() {
		var k Key
		var pub, created string
		var revoked sql.NullString
		if err := rows.Scan(&k.Fingerprint, &pub, &created, &revoked); err != nil {
			rows.Close()
			return err
		}
		k.Type, _, _ = strings.Cut(pub, " ")
		k.CreatedAt = *parseTime(sql.NullString{String: created, Valid: true})
		k.RevokedAt = parseTime(revoked)
		d.Keys = append(d.Keys, k)
	}
	rows.Close()
	rows, err = r.db.QueryContext(ctx, `SELECT alias, address, port FROM sockets WHERE device=? ORDER BY alias`, d.Name)
	if err != nil {
		return fmt.Errorf("registry: sockets of %s: %w", d.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var alias, addr string
		var port int
		if err := rows.Scan(&alias, &addr, &port); err != nil {
			return err
		}
		s, err := socketFrom(alias, addr, port)
		if err != nil {
			return err
		}
		d.Sockets = append(d.Sockets, s)
	}
	return rows.Err()
}

// Devices lists all devices, by name.
func (r *Registry) Devices(ctx context.Context) ([]*Device, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT `+deviceCols+` FROM devices ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("registry: devices: %w", err)
	}
	var out []*Device
	for rows.Next() {
		d, err := scanDevice(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("registry: devices: %w", err)
		}
		out = append(out, d)
	}
	rows.Close()
	for _, d := range out {
		if err := r.fillDevice(ctx, d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeviceByKey returns the device that enrolled key (its own row: no keys, sockets or
// groups, which Device adds) and whether the key or the device is revoked. It is one
// query: the hub asks it twice in every SSH handshake.
func (r *Registry) DeviceByKey(ctx context.Context, key ssh.PublicKey) (d *Device, revoked bool, err error) {
	fp := ssh.FingerprintSHA256(key)
	var keyRevoked sql.NullString
	d, err = scanDevice(r.db.QueryRowContext(ctx, `SELECT `+deviceColsOfD+`, k.revoked_at FROM keys k JOIN devices d ON d.name=k.device WHERE k.fingerprint=?`, fp), &keyRevoked)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("%w: key %s", ErrNotFound, fp)
	}
	if err != nil {
		return nil, false, fmt.Errorf("registry: key lookup: %w", err)
	}
	return d, keyRevoked.Valid || d.Revoked(), nil
}

// RemoveDevice deletes a device, its keys and its sockets (their addresses become free).
func (r *Registry) RemoveDevice(ctx context.Context, name string) error {
	_, err := r.RemoveDeviceAndGrants(ctx, name)
	return err
}

// RemoveDeviceAndGrants is RemoveDevice, returning how many grants went with the device
// (so the operator is told).
func (r *Registry) RemoveDeviceAndGrants(ctx context.Context, name string) (grants int64, err error) {
	return grants, r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM devices WHERE name=?`, name)
		if err != nil {
			return fmt.Errorf("registry: remove %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: device %q", ErrNotFound, name)
		}
		// Grants name the device, not its enrolment: they go with it, so a device enrolled
		// (or announced by a gateway) later under the same name starts with none.
		res, err = tx.ExecContext(ctx, `DELETE FROM grants WHERE target=?`, name)
		if err != nil {
			return fmt.Errorf("registry: remove %s's grants: %w", name, err)
		}
		detail := ""
		if grants, _ = res.RowsAffected(); grants > 0 {
			detail = fmt.Sprintf("%d grant(s) of the device removed with it", grants)
		}
		// The SSH certificates the hub signed for it vouch for this enrolment, not the
		// name: a device enrolled later under it must not log in with them.
		res, err = tx.ExecContext(ctx, `UPDATE ssh_certs SET revoked_at=?, revoke_why='device removed' WHERE device=? AND revoked_at IS NULL`, now(), name)
		if err != nil {
			return fmt.Errorf("registry: remove %s's certificates: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			detail = strings.TrimPrefix(detail+fmt.Sprintf("; %d SSH certificate(s) the hub signed for it revoked", n), "; ")
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventDeviceRemoved, Detail: detail})
	})
}

// RevokeDevice refuses the device's keys from now on. It is idempotent.
func (r *Registry) RevokeDevice(ctx context.Context, name, reason string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		t := now()
		res, err := tx.ExecContext(ctx, `UPDATE devices SET revoked_at=coalesce(revoked_at, ?), revoke_why=? WHERE name=?`, t, reason, name)
		if err != nil {
			return fmt.Errorf("registry: revoke %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: device %q", ErrNotFound, name)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at=coalesce(revoked_at, ?) WHERE device=?`, t, name); err != nil {
			return fmt.Errorf("registry: revoke keys of %s: %w", name, err)
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventRevoked, Detail: reason})
	})
}

// ReinstateDevice undoes RevokeDevice: the device logs in again with the keys revoked
// with it (a key revoked on its own before stays revoked), and its violation count
// starts again at 0, so the next violation does not revoke it at once. ErrNotRevoked if
// it is not revoked.
func (r *Registry) ReinstateDevice(ctx context.Context, name string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var revoked sql.NullString
		var violations int
		err := tx.QueryRowContext(ctx, `SELECT revoked_at, violations FROM devices WHERE name=?`, name).Scan(&revoked, &violations)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: device %q", ErrNotFound, name)
		case err != nil:
			return fmt.Errorf("registry: reinstate %s: %w", name, err)
		case !revoked.Valid:
			return fmt.Errorf("%w: device %q: nothing to undo", ErrNotRevoked, name)
		}
		res, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at=NULL WHERE device=? AND revoked_at=?`, name, revoked.String)
		if err != nil {
			return fmt.Errorf("registry: reinstate keys of %s: %w", name, err)
		}
		keys, _ := res.RowsAffected()
		if _, err := tx.ExecContext(ctx, `UPDATE devices SET revoked_at=NULL, revoke_why='', violations=0 WHERE name=?`, name); err != nil {
			return fmt.Errorf("registry: reinstate %s: %w", name, err)
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventReinstated,
			Detail: fmt.Sprintf("revoked since %s; %d key(s) revoked with it work again; %d violation(s) cleared", revoked.String, keys, violations)})
	})
}

// AddViolations adds n violations counted while the registry could not write to the
// device's count, and returns the new count.
func (r *Registry) AddViolations(ctx context.Context, device string, n int) (int, error) {
	var total int
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		err := tx.QueryRowContext(ctx, `UPDATE devices SET violations=violations+? WHERE name=? RETURNING violations`, n, device).Scan(&total)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: device %q", ErrNotFound, device)
		}
		return err
	})
	return total, err
}

// OpenSession records a session that began: when, from where, with which algorithms,
// which hub holds it, and a session_open event with detail, in one transaction. It is
// the hub's most frequent registry write (with CloseSession), so it is one commit and,
// in the usual case, runs beside the writer lock (withUnorderedTx). When another hub of
// a shared registry held the device's session it takes the lock: the session_moved event
// it then writes is a change that hub must read (the change feed).
func (r *Registry) OpenSession(ctx context.Context, device, remote string, algos Algorithms, detail string) error {
	b, _ := json.Marshal(algos)
	t := now()
	open := Event{Device: device, Kind: EventSessionOpen, Detail: detail, Remote: remote}
	// The usual case: no other hub had the device's session.
	err := r.withUnorderedTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE devices SET last_seen=?, last_remote=?, last_algos=?, hub=? WHERE name=? AND (hub='' OR hub=?)`,
			t, remote, string(b), r.hub, device, r.hub)
		if err != nil {
			return fmt.Errorf("registry: record session %s: %w", device, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errNotUsual
		}
		return r.addEvent(ctx, tx, open)
	})
	if !errors.Is(err, errNotUsual) {
		return err
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if err := r.takeSession(ctx, tx, device, remote, string(b), t); err != nil {
			return fmt.Errorf("registry: record session %s: %w", device, err)
		}
		return r.addEvent(ctx, tx, open)
	})
}

// errNotUsual ends OpenSession's transaction beside the lock: the device's session was
// on another hub, or the device is gone.
var errNotUsual = errors.New("registry: not the usual session start")

// takeSession notes the session on the device's row when another hub of a shared
// registry may hold it, and then a session_moved event naming that hub.
func (r *Registry) takeSession(ctx context.Context, tx *sqldb.Tx, device, remote, algos, t string) error {
	var before string
	if err := tx.QueryRowContext(ctx, `SELECT hub FROM devices WHERE name=?`, device).Scan(&before); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil // removed meanwhile: its row is gone, the session's event stays
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE devices SET last_seen=?, last_remote=?, last_algos=?, hub=? WHERE name=?`, t, remote, algos, r.hub, device); err != nil {
		return err
	}
	if before == "" || before == r.hub || r.hub == "" {
		return nil // no other hub by now (its session ended, or ours took it), or no hub names
	}
	// The device came to this hub while another holds (or held) its session: that hub
	// closes its old one when it reads this (the change feed).
	return r.addEvent(ctx, tx, Event{Device: device, Kind: EventSessionMoved, Detail: "from hub " + before, Remote: remote})
}

// RecordAlgorithms replaces the algorithms OpenSession recorded for the device's session
// on this hub (a multiplexed channel opened later), for 'iotsafe device show'.
func (r *Registry) RecordAlgorithms(ctx context.Context, device string, algos Algorithms) error {
	b, _ := json.Marshal(algos)
	if _, err := r.db.ExecContext(ctx, `UPDATE devices SET last_algos=? WHERE name=? AND hub=?`, string(b), device, r.hub); err != nil {
		return fmt.Errorf("registry: record session %s: %w", device, err)
	}
	return nil
}

// CloseSession records a session's end: last_seen, so "offline since" is exact, the
// device's session no longer on this hub (unless another hub has it by now), and a
// session_close event, in one transaction beside the writer lock (withUnorderedTx).
func (r *Registry) CloseSession(ctx context.Context, device, remote string) error {
	return r.withUnorderedTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE devices SET last_seen=?, hub=CASE WHEN hub=? THEN '' ELSE hub END WHERE name=?`, now(), r.hub, device); err != nil {
			return fmt.Errorf("registry: session end %s: %w", device, err)
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventSessionClose, Remote: remote})
	})
}

// AddViolation records a violation event and returns the device's new violation count.
//
// With record false only the count grows: callers aggregate repeated violations into
// one event per interval, so a device in a loop cannot fill the audit log.
func (r *Registry) AddViolation(ctx context.Context, device, detail, remote string, record bool) (int, error) {
	var n int
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		if err := tx.QueryRowContext(ctx, `UPDATE devices SET violations=violations+1 WHERE name=? RETURNING violations`, device).Scan(&n); err != nil {
			return fmt.Errorf("registry: violation %s: %w", device, err)
		}
		if !record {
			return nil
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventViolation, Detail: detail, Remote: remote})
	})
	return n, err
}
