package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Events of the telemetry credentials.
const (
	EventSecretSet   = "secret_set"
	EventSOAPKeySet  = "soap_key_set"
	EventTokenIssued = "token_issued"
	EventCertIssued  = "cert_issued"
)

// DeviceState is what a telemetry path checks on every request: whether the device
// exists in this incarnation and may still send.
type DeviceState struct {
	Name      string
	Address   netip.Addr
	CreatedAt time.Time
	Revoked   bool
}

// Gen identifies this incarnation of the device: tokens carry it, so a removed and
// re-added device of the same name does not inherit the old one's tokens.
func (d DeviceState) Gen() int64 { return d.CreatedAt.UnixMicro() }

// DeviceStates lists every device's state (one query, no keys or sockets).
func (r *Registry) DeviceStates(ctx context.Context) ([]DeviceState, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT name, address, created_at, revoked_at FROM devices`)
	if err != nil {
		return nil, fmt.Errorf("registry: device states: %w", err)
	}
	defer rows.Close()
	var out []DeviceState
	for rows.Next() {
		var d DeviceState
		var addr string
		var created string
		var revoked sql.NullString
		if err := rows.Scan(&d.Name, &addr, &created, &revoked); err != nil {
			return nil, fmt.Errorf("registry: device states: %w", err)
		}
		d.Address, _ = netip.ParseAddr(addr)
		if t := parseTime(sql.NullString{String: created, Valid: true}); t != nil {
			d.CreatedAt = *t
		}
		d.Revoked = revoked.Valid
		out = append(out, d)
	}
	return out, rows.Err()
}

// SetDeviceSecret stores the hash of a device's telemetry secret, replacing any earlier.
func (r *Registry) SetDeviceSecret(ctx context.Context, device, hash string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE name=?`, device).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: device %q", ErrNotFound, device)
			}
			return fmt.Errorf("registry: secret of %s: %w", device, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO device_secrets(device, hash, created_at) VALUES(?,?,?)
			ON CONFLICT(device) DO UPDATE SET hash=excluded.hash, created_at=excluded.created_at`, device, hash, now()); err != nil {
			return fmt.Errorf("registry: secret of %s: %w", device, err)
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventSecretSet, Detail: "telemetry secret set"})
	})
}

// DeviceSecretHashes maps each device with a telemetry secret to the secret's hash.
func (r *Registry) DeviceSecretHashes(ctx context.Context) (map[string]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT device, hash FROM device_secrets`)
	if err != nil {
		return nil, fmt.Errorf("registry: device secrets: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var d, h string
		if err := rows.Scan(&d, &h); err != nil {
			return nil, err
		}
		out[d] = h
	}
	return out, rows.Err()
}

// SetDeviceCert records the client certificate a device now logs in with (its serial
// number, decimal): the one before it, of the same enrolment, stops working.
func (r *Registry) SetDeviceCert(ctx context.Context, device, serial string, notAfter time.Time) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE name=?`, device).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: device %q", ErrNotFound, device)
			}
			return fmt.Errorf("registry: certificate of %s: %w", device, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO device_certs(device, serial, not_after, created_at) VALUES(?,?,?,?)
			ON CONFLICT(device) DO UPDATE SET serial=excluded.serial, not_after=excluded.not_after, created_at=excluded.created_at`,
			device, serial, notAfter.UTC().Format(timeLayout), now()); err != nil {
			return fmt.Errorf("registry: certificate of %s: %w", device, err)
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventCertIssued, Detail: "client certificate " + serial + " issued; earlier ones retired"})
	})
}

// DeviceCertSerials maps each device with a client certificate to its serial number.
func (r *Registry) DeviceCertSerials(ctx context.Context) (map[string]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT device, serial FROM device_certs`)
	if err != nil {
		return nil, fmt.Errorf("registry: device certificates: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var d, s string
		if err := rows.Scan(&d, &s); err != nil {
			return nil, err
		}
		out[d] = s
	}
	return out, rows.Err()
}

// SOAPKey is a device's pre-shared key for SOAP message security.
type SOAPKey struct {
	Device, KeyID string
	Secret        []byte
}

// SetSOAPKey stores a device's SOAP key, replacing any earlier one at once.
func (r *Registry) SetSOAPKey(ctx context.Context, k SOAPKey) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE name=?`, k.Device).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: device %q", ErrNotFound, k.Device)
			}
			return fmt.Errorf("registry: SOAP key of %s: %w", k.Device, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO soap_keys(device, key_id, secret, created_at) VALUES(?,?,?,?)
			ON CONFLICT(device) DO UPDATE SET key_id=excluded.key_id, secret=excluded.secret, created_at=excluded.created_at`,
			k.Device, k.KeyID, k.Secret, now()); err != nil {
			return fmt.Errorf("registry: SOAP key of %s: %w", k.Device, err)
		}
		return r.addEvent(ctx, tx, Event{Device: k.Device, Kind: EventSOAPKeySet, Detail: "SOAP key " + k.KeyID + " set; the earlier one retired"})
	})
}

// SOAPKeys are every device's SOAP key, by key id.
func (r *Registry) SOAPKeys(ctx context.Context) (map[string]SOAPKey, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT device, key_id, secret FROM soap_keys`)
	if err != nil {
		return nil, fmt.Errorf("registry: SOAP keys: %w", err)
	}
	defer rows.Close()
	out := map[string]SOAPKey{}
	for rows.Next() {
		var k SOAPKey
		if err := rows.Scan(&k.Device, &k.KeyID, &k.Secret); err != nil {
			return nil, err
		}
		out[k.KeyID] = k
	}
	return out, rows.Err()
}

// MaxDeviceData bounds a device's data document.
const MaxDeviceData = 64 << 10

// SetDeviceData stores a device's free-form JSON data (nil clears it).
func (r *Registry) SetDeviceData(ctx context.Context, device string, data json.RawMessage) error {
	if len(data) > MaxDeviceData {
		return fmt.Errorf("registry: device data larger than %d bytes", MaxDeviceData)
	}
	if data != nil && !json.Valid(data) {
		return errors.New("registry: device data is not valid JSON")
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE name=?`, device).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: device %q", ErrNotFound, device)
			}
			return err
		}
		var err error
		if data == nil || string(data) == "null" {
			_, err = tx.ExecContext(ctx, `DELETE FROM device_data WHERE device=?`, device)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO device_data(device, data) VALUES(?,?) ON CONFLICT(device) DO UPDATE SET data=excluded.data`, device, string(data))
		}
		if err != nil {
			return fmt.Errorf("registry: data of %s: %w", device, err)
		}
		return nil
	})
}

// DeviceData returns a device's data, or nil if it has none.
func (r *Registry) DeviceData(ctx context.Context, device string) (json.RawMessage, error) {
	var s string
	err := r.db.QueryRowContext(ctx, `SELECT data FROM device_data WHERE device=?`, device).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: data of %s: %w", device, err)
	}
	return json.RawMessage(s), nil
}
