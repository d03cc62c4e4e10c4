package telemetry

import (
	"context"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// The writer's commit, step by step: one transaction writes a batch (relay marks, once
// keys, the rows), then what was stored is announced (cap, feed or follow, metrics) and
// each request answered.

// commit runs one batch: a maintenance request alone, or appends together.
func (s *Store) commit(batch []*appendReq) {
	start := time.Now()
	n := 0
	for _, r := range batch {
		n += len(r.items)
	}
	lastTS := s.lastTS
	err := s.inTx(func(tx *sqldb.Tx) error {
		if batch[0].fn != nil {
			if !batch[0].claim.CompareAndSwap(reqQueued, reqRunning) {
				return nil // its caller gave up waiting: nothing to do
			}
			return batch[0].fn(tx)
		}
		return s.writeBatch(tx, batch, start, &lastTS)
	})
	if err == nil {
		s.lastTS = lastTS
	} else {
		err = fmt.Errorf("telemetry: commit: %w", err)
	}
	s.mu.Lock()
	s.queued -= n
	queued := s.queued
	s.mu.Unlock()
	if err == nil {
		s.committed(batch, queued, start)
	} else if s.shared && n > 0 {
		s.markOwn(batch, false)
	}
	for _, r := range batch {
		if err == nil && r.once != nil && r.once.dup {
			r.done <- ErrDuplicate
			continue
		}
		r.done <- err
	}
}

// writeBatch writes a batch of appends in tx: relay marks and once keys first (they
// decide which items are stored), then the rows, their timestamps above lastTS.
func (s *Store) writeBatch(tx *sqldb.Tx, batch []*appendReq, start time.Time, lastTS *int64) error {
	if s.shared {
		// Under the writer lock: above whatever another hub committed.
		var committed int64
		if err := tx.QueryRowContext(context.Background(), `SELECT COALESCE(MAX(ts), 0) FROM notifications`).Scan(&committed); err != nil {
			return err
		}
		*lastTS = max(*lastTS, committed)
	}
	var marks map[string]int64 // relay sources' marks, moved with the rows
	var items []*Notification
	for _, r := range batch {
		if r.relay != nil {
			if marks == nil {
				marks = map[string]int64{}
			}
			if err := s.applyRelay(context.Background(), tx, r, marks); err != nil {
				return err
			}
		}
		if r.once != nil {
			if err := claimOnce(tx, r, start); err != nil {
				return err
			}
		}
		for i := range r.items {
			items = append(items, &r.items[i])
		}
	}
	if err := insertRows(tx, items, lastTS); err != nil {
		return err
	}
	if err := saveMarks(tx, marks); err != nil {
		return err
	}
	if s.shared {
		// Before the commit: follow may read the rows the moment it is visible.
		s.markOwn(batch, true)
		return tx.Notify(context.Background(), Channel)
	}
	return nil
}

// insertRows inserts items, many rows per statement (one statement per notification
// costs more than the row itself through database/sql), each stamped with the hub's
// clock made strictly increasing: the poll cursor is a timestamp.
func insertRows(tx *sqldb.Tx, items []*Notification, lastTS *int64) error {
	for len(items) > 0 {
		chunk := items[:min(len(items), rowsPerInsert)]
		items = items[len(chunk):]
		args := make([]any, 0, 5*len(chunk))
		for _, it := range chunk {
			ts := max(time.Now().UnixMicro(), *lastTS+1)
			*lastTS = ts
			var params, dts any
			if it.Parameters != nil {
				params = string(it.Parameters)
			}
			if it.DeviceTime != nil {
				dts = it.DeviceTime.UnixMicro()
			}
			args = append(args, it.Device, it.Name, params, ts, dts)
			it.Timestamp = time.UnixMicro(ts).UTC()
		}
		if err := insertChunk(tx, chunk, args); err != nil {
			return err
		}
	}
	return nil
}

// committed announces what a committed batch stored (a relay's duplicates and a used
// once key's items were not): the per-device cap, the readers (the feed, or on a shared
// store the follower, in order with the other hubs' rows) and the metrics, before the
// waiters hear: once an Append returns, its batch is counted.
func (s *Store) committed(batch []*appendReq, queued int, start time.Time) {
	n := 0
	for _, r := range batch {
		n += len(r.items)
	}
	if n == 0 {
		return
	}
	s.capCommitted(batch)
	if s.shared {
		s.poke()
	} else {
		all := make([]Notification, 0, n)
		for _, r := range batch {
			all = append(all, r.items...)
		}
		s.feed.publish(all)
	}
	if s.obs != nil {
		end := time.Now()
		s.obs.Committed(n, queued, start.Sub(batch[0].at), end.Sub(start))
		if ao, ok := s.obs.(appendObserver); ok {
			for _, r := range batch {
				ao.Appended(end.Sub(r.at))
			}
		}
	}
}
