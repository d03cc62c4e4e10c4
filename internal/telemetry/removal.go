package telemetry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// A removed device's notifications must not reach a new device of the same name. They
// may be many (up to MaxPerDevice), and deleting them takes the writer a chunk at a
// time; a hub that stops meanwhile, or a change path that gave up waiting, used to leave
// the rest for a new device to inherit. So a removal is first a row of the removals
// table: every read leaves out the device's notifications up to its bound from the
// moment it commits, and the store's remover deletes them in the background, then the
// row. A removal cut short goes on when the store opens again.

// notRemoved is the condition every read of notifications adds: none of a removal.
const notRemoved = `NOT EXISTS (SELECT 1 FROM notification_removals r WHERE r.device = notifications.device AND notifications.ts <= r.upto)`

// upsertRemoval records a removal of device up to upto, or raises the bound of one.
const upsertRemoval = `INSERT INTO notification_removals(device, upto) VALUES(?, ?)
	ON CONFLICT(device) DO UPDATE SET upto = CASE WHEN excluded.upto > notification_removals.upto THEN excluded.upto ELSE notification_removals.upto END`

// RemoveDevice forgets every notification device has stored and every command sent to
// it (it was removed from the registry). When it returns no reader sees them; they are deleted in the background,
// and only they: what a new device of the same name stores later stays.
func (s *Store) RemoveDevice(ctx context.Context, device string) error {
	return s.remove(ctx, device, math.MaxInt64)
}

// RemoveDeviceBefore forgets what device stored up to t: the registry removed it at t,
// and a device of the same name may have been enrolled since (see RemovalsApplied).
func (s *Store) RemoveDeviceBefore(ctx context.Context, device string, t time.Time) error {
	return s.remove(ctx, device, t.UnixMicro())
}

func (s *Store) remove(ctx context.Context, device string, bound int64) error {
	added := false
	err := s.maintain(ctx, func(tx *sqldb.Tx) error {
		// Commands are few per device (Config.MaxCommands): deleted at once.
		if _, err := tx.Exec(`DELETE FROM commands WHERE device=? AND ts <= ?`, device, bound); err != nil {
			return err
		}
		var upto sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(ts) FROM notifications WHERE device=? AND ts <= ?`, device, bound).Scan(&upto); err != nil {
			return err
		}
		if !upto.Valid {
			return nil // nothing stored
		}
		added = true
		_, err := tx.Exec(upsertRemoval, device, upto.Int64)
		return err
	})
	if err != nil {
		return fmt.Errorf("telemetry: remove %s: %w", device, err)
	}
	if added {
		s.kickRemover()
	}
	return nil
}

// PendingRemovals is how many devices' notifications are hidden and not yet deleted.
func (s *Store) PendingRemovals(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM notification_removals`).Scan(&n); err != nil {
		return 0, fmt.Errorf("telemetry: removals: %w", err)
	}
	return n, nil
}

func (s *Store) kickRemover() {
	select {
	case s.removing <- struct{}{}:
	default:
	}
}

// removerRetry is how long the remover waits after a failure (a full disk, a lost
// database connection) before it tries again.
const removerRetry = time.Minute

// remover deletes what the removals hide whenever one is added, at start (what a
// previous run left), and after a failure, until ctx ends.
func (s *Store) remover(ctx context.Context) {
	defer close(s.removerDone)
	s.kickRemover()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.removing:
		case <-retry:
		}
		retry = nil
		err := s.finishRemovals(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			if s.log != nil {
				s.log.Error("deleting removed devices' notifications failed; they stay hidden, retrying", "retry_in", removerRetry, "err", err)
			}
			retry = time.After(removerRetry)
		case s.removalsDone != nil:
			s.removalsDone()
		}
	}
}

// finishRemovals deletes the notifications of every removal, then the removal, until
// none is left.
func (s *Store) finishRemovals(ctx context.Context) error {
	for {
		pending, err := s.removals(ctx)
		if err != nil || len(pending) == 0 {
			return err
		}
		for _, r := range pending {
			n, err := s.deleteChunks(ctx, r.device, r.upto)
			if err != nil {
				return err
			}
			// Not if a later removal of the same name raised its bound meanwhile: the
			// next round deletes up to that.
			if err := s.maintain(ctx, func(tx *sqldb.Tx) error {
				_, err := tx.Exec(`DELETE FROM notification_removals WHERE device=? AND upto=?`, r.device, r.upto)
				return err
			}); err != nil {
				return err
			}
			if n > 0 && s.log != nil {
				s.log.Info("deleted a removed device's notifications", "device", r.device, "notifications", n)
			}
		}
	}
}

type removal struct {
	device string
	upto   int64
}

func (s *Store) removals(ctx context.Context) ([]removal, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT device, upto FROM notification_removals ORDER BY device`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []removal
	for rows.Next() {
		var r removal
		if err := rows.Scan(&r.device, &r.upto); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// removalsApplied names the state row RemovalsApplied reads.
const removalsApplied = "registry_removals_applied"

// RemovalsApplied is the id of the newest registry event of a device removal the
// store has applied (0: none yet). A removal the hub did not apply as it happened (made
// while no hub ran, or cut short by a crash) is one after it.
func (s *Store) RemovalsApplied(ctx context.Context) (int64, error) {
	var id int64
	err := s.db.QueryRowContext(ctx, `SELECT value FROM telemetry_state WHERE name=?`, removalsApplied).Scan(&id)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("telemetry: state: %w", err)
	}
	return id, nil
}

// SetRemovalsApplied records that every registry removal up to event id is applied.
func (s *Store) SetRemovalsApplied(ctx context.Context, id int64) error {
	err := s.maintain(ctx, func(tx *sqldb.Tx) error {
		_, err := tx.Exec(`INSERT INTO telemetry_state(name, value) VALUES(?, ?)
			ON CONFLICT(name) DO UPDATE SET value = CASE WHEN excluded.value > telemetry_state.value THEN excluded.value ELSE telemetry_state.value END`,
			removalsApplied, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("telemetry: state: %w", err)
	}
	return nil
}
