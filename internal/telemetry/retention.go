package telemetry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Retention: by age, by count per device, in chunks the writer commits between batches.

// Prune applies retention: by age, then by count per device. It returns how many
// notifications it deleted.
func (s *Store) Prune(ctx context.Context, now time.Time) (int64, error) {
	n, err := s.PruneAge(ctx, now)
	if err != nil {
		return n, err
	}
	m, err := s.PruneCount(ctx)
	return n + m, err
}

// PruneAge deletes the notifications older than the retention, oldest first, and the
// commands older than it.
func (s *Store) PruneAge(ctx context.Context, now time.Time) (int64, error) {
	cutoff := now.Add(-s.cfg.Retention).UnixMicro()
	n, err := s.deleteChunks(ctx, "", cutoff-1)
	if err != nil {
		return n, fmt.Errorf("telemetry: prune by age: %w", err)
	}
	// Commands age out with the notifications; they are not counted in n.
	if _, err := s.pruneCommands(ctx, cutoff); err != nil {
		return n, fmt.Errorf("telemetry: prune commands by age: %w", err)
	}
	if err := s.pruneOnce(ctx, now); err != nil {
		return n, fmt.Errorf("telemetry: prune expired once keys: %w", err)
	}
	return n, nil
}

// PruneCount deletes, for each device over the per-device limit, its oldest
// notifications past it. Finding those devices reads the whole device index; it is
// done as a reader, so the writer goes on committing meanwhile.
func (s *Store) PruneCount(ctx context.Context) (int64, error) {
	over, err := s.devicesOver(ctx, s.cfg.MaxPerDevice)
	if err != nil {
		return 0, fmt.Errorf("telemetry: prune by count: %w", err)
	}
	var total int64
	for _, d := range over {
		n, err := s.pruneDevice(ctx, d)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// pruneDevice deletes the device's oldest notifications past telemetry.max_per_device.
func (s *Store) pruneDevice(ctx context.Context, device string) (int64, error) {
	// The newest notification past the limit; what arrives meanwhile is newer.
	var edge int64
	err := s.db.QueryRowContext(ctx, `SELECT ts FROM notifications WHERE device=? ORDER BY ts DESC LIMIT 1 OFFSET ?`,
		device, s.cfg.MaxPerDevice).Scan(&edge)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("telemetry: prune by count: %w", err)
	}
	n, err := s.deleteChunks(ctx, device, edge)
	if err != nil {
		return n, fmt.Errorf("telemetry: prune by count: %w", err)
	}
	return n, nil
}

// countSlice is how many devices one read of devicesOver counts on SQLite.
const countSlice = 64

// devicesOver lists the devices with more than limit notifications. On SQLite it reads
// the device index countSlice devices at a time, each read a transaction of its own: the
// writer cannot restart the WAL while a reader uses it, and under a large fleet's load
// the WAL grows by tens of MB a second (a page per notification), so one read of the
// whole index of a large store would leave a WAL of gigabytes. PostgreSQL's readers do
// not hold its log back; there it is one query.
func (s *Store) devicesOver(ctx context.Context, limit int) ([]string, error) {
	q, slice := `SELECT device, COUNT(*) FROM notifications WHERE device > ? GROUP BY device ORDER BY device LIMIT ?`, countSlice
	if s.db.Dialect() == sqldb.Postgres {
		q, slice = `SELECT device, COUNT(*) FROM notifications WHERE device > ? GROUP BY device HAVING COUNT(*) > ?`, limit
	}
	var over []string
	after := ""
	for {
		rows, err := s.db.QueryContext(ctx, q, after, slice)
		if err != nil {
			return nil, err
		}
		seen := 0
		for rows.Next() {
			var d string
			var n int
			if err := rows.Scan(&d, &n); err != nil {
				rows.Close()
				return nil, err
			}
			seen, after = seen+1, d
			if n > limit {
				over = append(over, d)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if s.db.Dialect() == sqldb.Postgres || seen < slice {
			return over, nil
		}
	}
}

// deleteChunk bounds the notifications one deleting transaction removes: the writer
// commits no notification while it deletes. Measured on 400,000 expired notifications:
// one transaction took 1.0-1.3 s, all of it a wait for every device sending meanwhile;
// chunks of 1,000 took 3 s in all (a commit each), and a notification sent meanwhile
// waited 25 ms at most. Between chunks the writer commits what queued.
const deleteChunk = 1000

// deleteChunks deletes the notifications of device ("": of every device) with a
// timestamp up to upto, oldest first, deleteChunk per transaction of the writer, and
// returns how many it deleted. A chunk is a range of the timestamp (unique in a store)
// with a single bound, so it is deleted along an index: SQLite searches an index with
// one bound per column and would check a second one row by row from the index's start.
func (s *Store) deleteChunks(ctx context.Context, device string, upto int64) (int64, error) {
	chunk := s.deleteChunk
	if chunk <= 0 {
		chunk = deleteChunk
	}
	where, args := `ts <= ?`, []any{}
	if device != "" {
		where, args = `device=? AND ts <= ?`, []any{device}
	}
	var total int64
	for {
		var n, lost int64
		last := false
		err := s.maintain(ctx, func(tx *sqldb.Tx) error {
			// The chunk's newest notification: the chunk-th oldest.
			var edge int64
			err := tx.QueryRowContext(ctx, `SELECT ts FROM notifications WHERE `+where+` ORDER BY ts LIMIT 1 OFFSET ?`,
				append(args, upto, chunk-1)...).Scan(&edge)
			switch {
			case errors.Is(err, sql.ErrNoRows): // fewer than a chunk left
				last, edge = true, upto
			case err != nil:
				return err
			}
			if mark := s.relayedUpTo.Load(); mark >= 0 {
				// A gateway's: what its centre has not got yet is lost to it.
				if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications WHERE `+where+` AND id > ?`, append(args, edge, mark)...).Scan(&lost); err != nil {
					return err
				}
			}
			res, err := tx.Exec(`DELETE FROM notifications WHERE `+where, append(args, edge)...)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			// maintain gave up waiting (ctx ended): the writer may yet run fn, so n is
			// not read.
			return total, err
		}
		total += n
		s.unrelayedDeleted.Add(lost)
		if last {
			return total, nil
		}
		if s.chunkDone != nil {
			s.chunkDone()
		}
	}
}
