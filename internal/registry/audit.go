package registry

import (
	"context"
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
// (keep 0: no count bound). It returns how many it deleted.
func (r *Registry) PruneEvents(ctx context.Context, keep int, before time.Time) (int64, error) {
	var total int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE at < ?`, before.UTC().Format(timeLayout))
		if err != nil {
			return fmt.Errorf("registry: prune events: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if keep > 0 {
			res, err = tx.ExecContext(ctx, `DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - ?`, keep)
			if err != nil {
				return fmt.Errorf("registry: prune events: %w", err)
			}
			n, _ = res.RowsAffected()
			total += n
		}
		return nil
	})
	return total, err
}

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
