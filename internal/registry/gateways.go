package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/iotsafe/iotsafe/internal/profile"
)

// ErrClaimed means a gateway announced a device that is not its own: a direct device
// of this hub, or one bound to another gateway.
var ErrClaimed = errors.New("registry: device claimed elsewhere")

// ErrGatewayFull means a gateway announced a new device beyond its profile's
// gateway.max_devices.
var ErrGatewayFull = errors.New("registry: gateway at its device limit")

// ClaimDevice returns the device a gateway announces, creating it at its first
// announcement: bound to the gateway, with profile devProfile, a pool address and a
// protected socket per reverse alias, and no key of its own (it logs in at the
// gateway, never here). A device bound to another gateway, or enrolled here directly,
// is refused with ErrClaimed; a new one beyond maxDevices bound to the gateway with
// ErrGatewayFull. A revoked device is returned as it is: the caller refuses it.
func (r *Registry) ClaimDevice(ctx context.Context, name, gateway, devProfile string, maxDevices int) (*Device, error) {
	if !profile.ValidName(name) {
		return nil, fmt.Errorf("registry: device name %q: use lower-case letters, digits and '-' (max 63)", name)
	}
	if d, err := r.Device(ctx, name); err == nil {
		return d, claimedBy(d, gateway)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	prof, err := r.Profile(ctx, devProfile)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: its devices' profile: %w", gateway, err)
	}
	err = r.withTx(ctx, func(tx *sql.Tx) error {
		var via string
		switch err := tx.QueryRowContext(ctx, `SELECT via FROM devices WHERE name=?`, name).Scan(&via); {
		case err == nil: // announced meanwhile (by another hub on this registry, say)
			return claimedBy(&Device{Name: name, Via: via}, gateway)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("registry: device %s: %w", name, err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM devices WHERE via=?`, gateway).Scan(&n); err != nil {
			return fmt.Errorf("registry: devices of gateway %s: %w", gateway, err)
		}
		if n >= maxDevices {
			return fmt.Errorf("%w: gateway %q has %d devices, its profile allows %d (gateway.max_devices; remove old ones with 'iotsafe device remove')",
				ErrGatewayFull, gateway, n, maxDevices)
		}
		addr, err := r.freeAddress(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO devices(name, profile, address, created_at, via) VALUES(?,?,?,?,?)`,
			name, prof.Name, addr.String(), now(), gateway); err != nil {
			return fmt.Errorf("registry: add device %s: %w", name, err)
		}
		ports := &portSet{taken: map[int]bool{}}
		for _, alias := range prof.ReverseAliases() {
			if _, err := r.ensureSocket(ctx, tx, name, alias, ports); err != nil {
				return err
			}
		}
		return addEvent(ctx, tx, Event{Device: name, Kind: EventDeviceAdded, Detail: "profile " + prof.Name + ", announced by gateway " + gateway})
	})
	if err != nil {
		return nil, err
	}
	return r.Device(ctx, name)
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
