package telemetry

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Reading the store: one notification, a filtered list, a long poll and a stream.

const columns = `id, device, name, parameters, ts, device_ts`

func scan(rows *sql.Rows) (Notification, error) {
	var n Notification
	var params sql.NullString
	var ts int64
	var dts sql.NullInt64
	if err := rows.Scan(&n.ID, &n.Device, &n.Name, &params, &ts, &dts); err != nil {
		return n, err
	}
	if params.Valid {
		n.Parameters = []byte(params.String)
	}
	n.Timestamp = time.UnixMicro(ts).UTC()
	if dts.Valid {
		t := time.UnixMicro(dts.Int64).UTC()
		n.DeviceTime = &t
	}
	return n, nil
}

// Get returns device's notification id.
func (s *Store) Get(ctx context.Context, device string, id int64) (Notification, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM notifications WHERE id=? AND device=? AND `+notRemoved, id, device)
	if err != nil {
		return Notification{}, fmt.Errorf("telemetry: get: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Notification{}, fmt.Errorf("telemetry: get: %w", err)
		}
		return Notification{}, fmt.Errorf("%w: notification %d of %s", ErrNotFound, id, device)
	}
	n, err := scan(rows)
	if err != nil {
		return Notification{}, fmt.Errorf("telemetry: get: %w", err)
	}
	return n, nil
}

// maxDevicesInQuery bounds the devices of one filter (SQLite binds at most 32766
// parameters per statement).
const maxDevicesInQuery = 30000

// List returns the notifications f selects.
func (s *Store) List(ctx context.Context, f Filter) ([]Notification, error) {
	if err := f.normalize(); err != nil {
		return nil, err
	}
	if f.Devices != nil && len(f.Devices) == 0 {
		return []Notification{}, nil
	}
	if len(f.Devices) > maxDevicesInQuery {
		return nil, fmt.Errorf("%w: more than %d devices in one query", ErrInvalid, maxDevicesInQuery)
	}
	var where []string
	var args []any
	where, args = whereIn(where, args, "device", f.Devices)
	where, args = whereIn(where, args, "name", f.Names)
	if !f.After.IsZero() {
		where, args = append(where, "ts > ?"), append(args, f.After.UnixMicro())
	}
	if !f.Start.IsZero() {
		where, args = append(where, "ts >= ?"), append(args, f.Start.UnixMicro())
	}
	if !f.End.IsZero() {
		where, args = append(where, "ts <= ?"), append(args, f.End.UnixMicro())
	}
	where = append(where, notRemoved)
	q := `SELECT ` + columns + ` FROM notifications WHERE ` + strings.Join(where, " AND ")
	col := map[string]string{"": "ts", SortByTimestamp: "ts", SortByID: "id", SortByNotification: "name", SortByDevice: "device"}[f.SortBy]
	dir := "ASC"
	if f.Desc {
		dir = "DESC"
	}
	q += " ORDER BY " + col + " " + dir
	if col != "ts" && col != "id" {
		q += ", ts " + dir
	}
	q += " LIMIT ? OFFSET ?"
	args = append(args, f.Take, f.Skip)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: list: %w", err)
	}
	return scanAll(rows, "list")
}

// whereIn adds "col IN (vals)" to a query's conditions and arguments; nil vals add
// nothing.
func whereIn(where []string, args []any, col string, vals []string) ([]string, []any) {
	if vals == nil {
		return where, args
	}
	where = append(where, col+" IN ("+strings.TrimSuffix(strings.Repeat("?,", len(vals)), ",")+")")
	for _, v := range vals {
		args = append(args, v)
	}
	return where, args
}

// scanAll reads and closes rows of notifications; what names the query in errors.
func scanAll(rows *sql.Rows, what string) ([]Notification, error) {
	defer rows.Close()
	out := []Notification{}
	for rows.Next() {
		n, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %s: %w", what, err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// Poll returns the notifications f selects (by timestamp, oldest first), waiting until
// there is at least one or ctx ends; then it returns an empty list and no error. With a
// zero f.After only notifications stored from now on count, as in DeviceHive.
func (s *Store) Poll(ctx context.Context, f Filter) ([]Notification, error) {
	f.SortBy, f.Desc, f.Skip = SortByTimestamp, false, 0
	if err := f.normalize(); err != nil {
		return nil, err
	}
	// Take the tick before querying: whatever commits after the query is in the feed.
	t := s.feed.current()
	if err := s.fromNow(ctx, &f); err != nil {
		if ctx.Err() != nil {
			return []Notification{}, nil
		}
		return nil, err
	}
	if !f.After.IsZero() {
		got, err := s.List(ctx, f)
		if err != nil || len(got) > 0 {
			return got, err
		}
	}
	got, _, err := waitFrom(ctx, t, &f)
	if err != nil {
		if ctx.Err() != nil {
			return []Notification{}, nil
		}
		return nil, err
	}
	return got, nil
}

// fromNow turns a zero cursor ("from now on") into the newest committed timestamp on a
// shared store. There the feed is fed by follow, which may publish a row committed
// before the reader came; the cursor keeps it out, and, as timestamps rise in commit
// order across hubs, lets in every row committed after, whatever the hubs' clocks say.
func (s *Store) fromNow(ctx context.Context, f *Filter) error {
	if !s.shared || !f.After.IsZero() {
		return nil
	}
	var ts int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(ts), 0) FROM notifications`).Scan(&ts); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	f.After = time.UnixMicro(ts).UTC()
	return nil
}

// Stream calls fn with the notifications f selects as they are committed, from f.After
// on (from now if it is zero), until ctx ends or fn returns an error.
func (s *Store) Stream(ctx context.Context, f Filter, fn func([]Notification) error) error {
	f.SortBy, f.Desc, f.Skip = SortByTimestamp, false, 0
	if err := f.normalize(); err != nil {
		return err
	}
	t := s.feed.current()
	if err := s.fromNow(ctx, &f); err != nil {
		return err
	}
	for !f.After.IsZero() {
		// Catch up from the store, a page at a time.
		got, err := s.List(ctx, f)
		if err != nil {
			return err
		}
		if len(got) == 0 {
			break
		}
		if err := fn(got); err != nil {
			return err
		}
		f.After = got[len(got)-1].Timestamp
	}
	f.Take = int(^uint(0) >> 1)
	for {
		got, next, err := waitFrom(ctx, t, &f)
		if err != nil {
			return nil
		}
		t = next
		// Batches already sent while catching up come round again: skip them.
		if !f.After.IsZero() {
			kept := got[:0]
			for _, n := range got {
				if n.Timestamp.After(f.After) {
					kept = append(kept, n)
				}
			}
			got = kept
		}
		if len(got) == 0 {
			continue
		}
		if err := fn(got); err != nil {
			return err
		}
		f.After = got[len(got)-1].Timestamp
	}
}
