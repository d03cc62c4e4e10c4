package registry

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// What a device was told of a hub host key (schemaV10).
const (
	// HostKeyAnnounced: the key was in the hub's announcement to the device.
	HostKeyAnnounced = "announced"
	// HostKeyProven: the device asked the hub to prove the key, as a client that adds
	// it to its known_hosts does.
	HostKeyProven = "proven"
	// HostKeyWithdrawn: the device was sent an announcement without this retired key.
	HostKeyWithdrawn = "withdrawn"
)

// HostKeyNote is what one device was last told of one host key, and when.
type HostKeyNote struct {
	Device      string    `json:"device"`
	Fingerprint string    `json:"fingerprint"`
	State       string    `json:"state"`
	At          time.Time `json:"at"`
}

// NoteHostKeys records that device was told state of each key. A proven key stays
// proven when it is announced again.
func (r *Registry) NoteHostKeys(ctx context.Context, device, state string, fingerprints []string) error {
	if len(fingerprints) == 0 {
		return nil
	}
	return r.withUnorderedTx(ctx, func(tx *sqldb.Tx) error {
		t := now()
		for _, fp := range fingerprints {
			if _, err := tx.ExecContext(ctx, `INSERT INTO hostkey_notes(device, fingerprint, state, at) VALUES(?,?,?,?)
				ON CONFLICT(device, fingerprint) DO UPDATE SET state=excluded.state, at=excluded.at
				WHERE hostkey_notes.state <> ? OR excluded.state = ?`, device, fp, state, t, HostKeyProven, HostKeyProven); err != nil {
				return fmt.Errorf("registry: host key note for %s: %w", device, err)
			}
		}
		return nil
	})
}

// DeviceHostKeyNotes is what device was told of each host key: fingerprint -> state.
func (r *Registry) DeviceHostKeyNotes(ctx context.Context, device string) (map[string]string, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT fingerprint, state FROM hostkey_notes WHERE device=?`, device)
	if err != nil {
		return nil, fmt.Errorf("registry: host key notes: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var fp, state string
		if err := rows.Scan(&fp, &state); err != nil {
			return nil, fmt.Errorf("registry: host key notes: %w", err)
		}
		out[fp] = state
	}
	return out, rows.Err()
}

// HostKeyNotes lists what every device was told of these keys, by device name.
func (r *Registry) HostKeyNotes(ctx context.Context, fingerprints []string) ([]HostKeyNote, error) {
	if len(fingerprints) == 0 {
		return nil, nil
	}
	args := make([]any, len(fingerprints))
	for i, fp := range fingerprints {
		args[i] = fp
	}
	rows, err := r.db.QueryContext(ctx, `SELECT device, fingerprint, state, at FROM hostkey_notes WHERE fingerprint IN (?`+
		strings.Repeat(",?", len(fingerprints)-1)+`) ORDER BY device, fingerprint`, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: host key notes: %w", err)
	}
	defer rows.Close()
	var out []HostKeyNote
	for rows.Next() {
		var n HostKeyNote
		var at sql.NullString
		if err := rows.Scan(&n.Device, &n.Fingerprint, &n.State, &at); err != nil {
			return nil, fmt.Errorf("registry: host key notes: %w", err)
		}
		if t := parseTime(at); t != nil {
			n.At = *t
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
