package telemetry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// The writer: appends queue requests, and one goroutine commits them in batches (at most
// one commit per commit interval while devices keep sending). A commit, step by step:
// one transaction writes a batch (relay marks, once keys, the rows), then what was
// stored is announced (cap, feed or follow, metrics) and each request answered.

// Append stores items durably and returns them with ID and Timestamp set. It fails at
// once with ErrOverloaded when the queue is full, and with ErrInvalid for a
// notification the store refuses (then nothing of the call is stored).
func (s *Store) Append(ctx context.Context, items ...Notification) ([]Notification, error) {
	return s.append(ctx, nil, items)
}

func (s *Store) append(ctx context.Context, once *onceTag, items []Notification) ([]Notification, error) {
	for i := range items {
		if err := items[i].Validate(); err != nil {
			return nil, err
		}
	}
	if err := s.admit(items); err != nil {
		return nil, err
	}
	req := &appendReq{items: items, once: once, done: make(chan error, 1), at: time.Now()}
	err := s.alongside(ctx, items, func() error {
		if err := s.enqueue(req, len(items)); err != nil {
			return err
		}
		select {
		case err := <-req.done:
			return err
		case <-ctx.Done():
			// Still committed if the writer gets to it; the caller gave up on the answer.
			return ctx.Err()
		}
	})
	if err != nil {
		return nil, err
	}
	return req.items, nil
}

func (s *Store) enqueue(req *appendReq, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.queued+n > s.cfg.QueueDepth && s.queued > 0:
		return ErrOverloaded
	}
	select {
	case s.queue <- req:
		s.queued += n
	default:
		return ErrOverloaded
	}
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	return nil
}

// Queued is the number of notifications waiting for the writer.
func (s *Store) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}

// writer commits queued requests in batches until Close.
func (s *Store) writer() {
	defer close(s.stopped)
	var next *appendReq           // a maintenance request gather met: it goes right after its batch
	var last time.Time            // when the last commit of notifications started
	var lastBatch int             // the requests it held
	var recent [steadyBatches]int // the requests of the last batches, newest first
	for {
		first := next
		next = nil
		if first == nil {
			select {
			case first = <-s.queue:
			case <-s.stop:
				// Commit what was queued before Close.
				for {
					select {
					case first = <-s.queue:
						batch, after := s.gather(first)
						s.commit(batch)
						if after != nil {
							s.commit([]*appendReq{after})
						}
					default:
						return
					}
				}
			}
		}
		if first.fn == nil {
			wait := s.cfg.CommitInterval - time.Since(last)
			if wait > 0 && lastBatch >= commitSiblings && s.Queued() < s.cfg.MaxBatch {
				s.wait(wait, steadySenders(recent))
			}
			last = time.Now()
		}
		var batch []*appendReq
		batch, next = s.gather(first)
		s.commit(batch)
		if batch[0].fn == nil {
			lastBatch = len(batch)
			copy(recent[1:], recent[:])
			recent[0] = lastBatch
		}
	}
}

// wait is the writer's wait before a batch: waitFor, or the tests' linger.
func (s *Store) wait(d time.Duration, senders int) {
	if s.linger != nil {
		s.linger(d, senders, s.stop)
		return
	}
	s.waitFor(d, senders)
}

// waitFor waits for d to pass, for Close (which commits at once), or, with senders > 0,
// for that many requests to be waiting (the one the writer took included): all of the
// steady senders have sent again, and nobody else is expected.
func (s *Store) waitFor(d time.Duration, senders int) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if senders > 0 && len(s.queue)+1 >= senders {
			return
		}
		select {
		case <-t.C:
			return
		case <-s.stop:
			return
		case <-s.arrived:
		}
	}
}

// steadyBatches is how many batches in a row must hold the same number of requests for
// the writer to take that number as its senders (steadySenders).
const steadyBatches = 4

// steadySenders is the number of clients sending one request after the other, each
// waiting for its answer (a few bridges or gateways relaying their devices), when the
// last batches say so: they all held that many requests. Then the writer waits for
// those clients only, not the whole interval: nobody else would join the batch, and
// each round would otherwise take an interval. Many devices sending on their own
// clocks make batches of varying sizes: 0, the whole interval. A run of equal batches
// among them ends a wait early at a batch as large as the last: no smaller batches.
func steadySenders(recent [steadyBatches]int) int {
	for _, n := range recent[1:] {
		if n != recent[0] {
			return 0
		}
	}
	if recent[0] < commitSiblings {
		return 0
	}
	return recent[0]
}

// gather takes first and whatever else is queued, up to MaxBatch notifications. A
// maintenance request is committed alone: met while gathering, it is returned as after.
func (s *Store) gather(first *appendReq) (batch []*appendReq, after *appendReq) {
	batch = []*appendReq{first}
	if first.fn != nil {
		return batch, nil
	}
	n := len(first.items)
	for n < s.cfg.MaxBatch {
		select {
		case r := <-s.queue:
			if r.fn != nil {
				return batch, r
			}
			batch = append(batch, r)
			n += len(r.items)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// rowsPerInsert bounds one INSERT statement (5 parameters a row, well below SQLite's
// 32766).
const rowsPerInsert = 256

var insertSQLs sync.Map // rows -> statement text

// insertSQL is the INSERT of n notifications.
func insertSQL(n int) string {
	if q, ok := insertSQLs.Load(n); ok {
		return q.(string)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO notifications(device, name, parameters, ts, device_ts) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?)")
	}
	q := b.String()
	insertSQLs.Store(n, q)
	return q
}

// insertChunk inserts one statement's notifications and sets their ids.
func insertChunk(tx *sqldb.Tx, chunk []*Notification, args []any) error {
	if tx.Dialect() == sqldb.Postgres {
		rows, err := tx.Query(insertSQL(len(chunk))+" RETURNING id", args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var got []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			got = append(got, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(got) != len(chunk) {
			return fmt.Errorf("inserted %d notifications, got %d ids", len(chunk), len(got))
		}
		// The identity is drawn row by row in VALUES order, under the writer lock:
		// ascending ids belong to the rows in order, whatever order RETURNING uses.
		slices.Sort(got)
		for i, it := range chunk {
			it.ID = got[i]
		}
		return nil
	}
	res, err := tx.Exec(insertSQL(len(chunk)), args...)
	if err != nil {
		return err
	}
	last, err := res.LastInsertId()
	if err != nil {
		return err
	}
	// AUTOINCREMENT with this single writer numbers one statement's rows consecutively.
	for i, it := range chunk {
		it.ID = last - int64(len(chunk)-1-i)
	}
	return nil
}

func (s *Store) inTx(fn func(*sqldb.Tx) error) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// maintain runs fn in the writer's transaction, between batches.
func (s *Store) maintain(ctx context.Context, fn func(*sqldb.Tx) error) error {
	req := &appendReq{fn: fn, done: make(chan error, 1)}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	// Maintenance waits for room rather than failing: it is what makes room.
	select {
	case s.queue <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		if req.claim.CompareAndSwap(reqQueued, reqAbandoned) {
			return ctx.Err()
		}
		return <-req.done // already running: its results are the caller's once it ends
	}
}

// The states of a maintenance request's claim.
const (
	reqQueued int32 = iota
	reqRunning
	reqAbandoned
)

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
