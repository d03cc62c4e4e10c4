package registry

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Event kinds recorded in the audit log.
const (
	EventDeviceAdded   = "device_added"
	EventDeviceRemoved = "device_removed"
	EventRevoked       = "revoked"
	EventKeyAdded      = "key_added"
	EventKeyRevoked    = "key_revoked"
	EventAuthRefused   = "auth_refused"
	EventSessionOpen   = "session_open"
	EventSessionClose  = "session_close"
	EventTakeover      = "takeover"
	EventViolation     = "violation"
	EventPoolMoved     = "pool_moved"
)

// Event is one audit record.
type Event struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Device string    `json:"device,omitempty"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail,omitempty"`
	Remote string    `json:"remote,omitempty"`
}

// AddEvent appends to the audit log.
func (r *Registry) AddEvent(ctx context.Context, e Event) error {
	return r.withTx(ctx, func(tx *sql.Tx) error { return addEvent(ctx, tx, e) })
}

func addEvent(ctx context.Context, tx *sql.Tx, e Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO events(at, device, kind, detail, remote) VALUES(?,?,?,?,?)`,
		now(), e.Device, e.Kind, e.Detail, e.Remote)
	if err != nil {
		return fmt.Errorf("registry: add event: %w", err)
	}
	return nil
}

// EventFilter selects events; zero values select everything.
type EventFilter struct {
	Device string
	Kind   string
	Limit  int // 0 means 1000, newest last
}

// Events returns the newest matching events in chronological order.
func (r *Registry) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	rows, err := r.db.QueryContext(ctx, `SELECT id, at, device, kind, detail, remote FROM (
		SELECT * FROM events WHERE (?='' OR device=?) AND (?='' OR kind=?) ORDER BY id DESC LIMIT ?) ORDER BY id`,
		f.Device, f.Device, f.Kind, f.Kind, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("registry: events: %w", err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var at string
		if err := rows.Scan(&e.ID, &at, &e.Device, &e.Kind, &e.Detail, &e.Remote); err != nil {
			return nil, fmt.Errorf("registry: events: %w", err)
		}
		if t := parseTime(sql.NullString{String: at, Valid: true}); t != nil {
			e.At = *t
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
