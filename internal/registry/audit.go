package registry

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Hub life-cycle events: a start and a clean stop. A start after a start means the
// previous run ended without stopping (a crash, SIGKILL, power loss).
const (
	EventHubStarted = "hub_started"
	EventHubStopped = "hub_stopped"
)

// PruneEvents deletes audit events older than before, and all but the newest keep
// (keep 0: no count bound). It returns how many it deleted. It deletes eventChunk
// events per transaction, oldest first: every registry write (a session opening, an
// admin command, an audit event) waits for the transaction in progress, and a lowered
// audit.max_events or a long outage of pruning can leave millions to delete.
func (r *Registry) PruneEvents(ctx context.Context, keep int, before time.Time) (int64, error) {
	// By age. There is no index on the time: the newest expired event is found by a
	// reader, which holds up no writer, and the chunks go by id up to it.
	cut := before.UTC().Format(timeLayout)
	var total int64
	var expired sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT max(id) FROM events WHERE at < ?`, cut).Scan(&expired); err != nil {
		return 0, fmt.Errorf("registry: prune events: %w", err)
	}
	if expired.Valid {
		n, err := r.deleteEvents(ctx, `DELETE FROM events WHERE id IN (SELECT id FROM events WHERE id <= ? AND at < ? ORDER BY id LIMIT ?)`,
			expired.Int64, cut)
		if total += n; err != nil {
			return total, err
		}
	}
	if keep <= 0 {
		return total, nil
	}
	// By count: the bound is read once, so what is recorded meanwhile stays.
	var newest sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT max(id) FROM events`).Scan(&newest); err != nil {
		return total, fmt.Errorf("registry: prune events: %w", err)
	}
	if !newest.Valid || newest.Int64 <= int64(keep) {
		return total, nil
	}
	n, err := r.deleteEvents(ctx, `DELETE FROM events WHERE id IN (SELECT id FROM events WHERE id <= ? ORDER BY id LIMIT ?)`,
		newest.Int64-int64(keep))
	return total + n, err
}

// deleteEvents runs stmt (its arguments: args, then the chunk size) in transactions of
// its own until one deletes less than a chunk.
func (r *Registry) deleteEvents(ctx context.Context, stmt string, args ...any) (int64, error) {
	chunk := r.eventChunk
	if chunk <= 0 {
		chunk = eventChunk
	}
	args = append(args, chunk)
	var total int64
	for {
		var n int64
		err := r.withTx(ctx, func(tx *sqldb.Tx) error {
			res, err := tx.ExecContext(ctx, stmt, args...)
			if err != nil {
				return fmt.Errorf("registry: prune events: %w", err)
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if r.eventChunkDone != nil {
			r.eventChunkDone()
		}
		if n < int64(chunk) {
			return total, nil
		}
	}
}

// eventChunk is how many audit events one transaction of PruneEvents deletes.
const eventChunk = 1000

// RecordStart records a hub start and closes, in the audit log, the sessions a previous
// run left open (it ended without a session_close for them). It returns those devices
// and whether the previous run ended without a clean stop.
func (r *Registry) RecordStart(ctx context.Context, detail string) (leftOpen []string, crashed bool, err error) {
	err = r.withTx(ctx, func(tx *sqldb.Tx) error {
		// This hub's own runs only: hubs sharing a registry start and stop on their own.
		// Events from before hubs were named ("") count as this hub's.
		var last string
		err := tx.QueryRowContext(ctx, `SELECT kind FROM events WHERE kind IN (?, ?) AND hub IN (?, '') ORDER BY id DESC LIMIT 1`, EventHubStarted, EventHubStopped, r.hub).Scan(&last)
		crashed = err == nil && last == EventHubStarted
		// Per device, its newest session event (the events_device index): an open one
		// this hub wrote was left open.
		rows, err := tx.QueryContext(ctx, `SELECT name FROM devices`)
		if err != nil {
			return fmt.Errorf("registry: sessions left open: %w", err)
		}
		var names []string
		for rows.Next() {
			var d string
			rows.Scan(&d)
			names = append(names, d)
		}
		rows.Close()
		for _, d := range names {
			var kind, hub string
			err := tx.QueryRowContext(ctx, `SELECT kind, hub FROM events WHERE device=? AND kind IN (?, ?) ORDER BY id DESC LIMIT 1`,
				d, EventSessionOpen, EventSessionClose).Scan(&kind, &hub)
			if err == nil && kind == EventSessionOpen && (hub == r.hub || hub == "") {
				leftOpen = append(leftOpen, d)
			}
		}
		why := "hub restarted: the previous run stopped without closing this session"
		if crashed {
			why = "hub restarted: the previous run ended without a clean stop (crash or kill)"
		}
		for _, d := range leftOpen {
			if err := r.addEvent(ctx, tx, Event{Device: d, Kind: EventSessionClose, Detail: why}); err != nil {
				return err
			}
		}
		// No session is on this hub while it starts.
		if _, err := tx.ExecContext(ctx, `UPDATE devices SET hub='' WHERE hub=?`, r.hub); err != nil {
			return err
		}
		if crashed {
			detail += fmt.Sprintf("; the previous run ended without a clean stop, %d sessions closed in the log", len(leftOpen))
		}
		return r.addEvent(ctx, tx, Event{Kind: EventHubStarted, Detail: detail})
	})
	return leftOpen, crashed, err
}
