package telemetry

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Relaying (paper 000's three levels): a gateway hands the notifications its devices
// stored there to its centre's store, in id order, over its SSH session. The centre
// keeps, per source (a gateway's store), the highest id it has taken, and moves that
// mark in the same transaction as the notifications it stores: a batch sent again after
// a lost answer is recognised and not stored twice, whichever hub of a shared store
// takes it. A source names the store as well as the gateway, because ids start again
// at 1 in a new store.

// identityState and relayState name the rows of telemetry_state the relay keeps;
// relayedState is, in a gateway's own store, the last id its centre has.
const (
	identityState = "identity"
	relayState    = "relay:" // + source: the highest id stored from it
	relayedState  = "relayed_up_to"
)

// Relayed is a notification another store relays here, with its id there.
type Relayed struct {
	Origin int64
	Notification
}

// relayTag marks an append of relayed notifications: its items are filtered against
// the source's mark in the writer's transaction.
type relayTag struct {
	source  string
	origins []int64 // of items, ascending
	upto    int64   // the mark after this batch: the last id the source read
	dups    int     // items at or under the mark (set by the writer)
	mark    int64   // the mark after the commit (set by the writer)
}

// Identity names this store's notification ids for a relay: a random number made at
// the first call and kept since. Copy carries it when it keeps the ids.
func (s *Store) Identity(ctx context.Context) (string, error) {
	if id, ok, err := s.state(ctx, s.db, identityState); err != nil || ok {
		return formatIdentity(id), err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	v := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	err := s.maintain(ctx, func(tx *sqldb.Tx) error {
		// Another hub of a shared store may have made one meanwhile: the first stays.
		_, err := tx.Exec(`INSERT INTO telemetry_state(name, value) VALUES(?, ?) ON CONFLICT(name) DO NOTHING`, identityState, v)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("telemetry: identity: %w", err)
	}
	id, _, err := s.state(ctx, s.db, identityState)
	return formatIdentity(id), err
}

func formatIdentity(v int64) string { return strconv.FormatInt(v, 36) }

// state reads one row of telemetry_state.
func (s *Store) state(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sqldb.Row
}, name string) (int64, bool, error) {
	var v int64
	err := q.QueryRowContext(ctx, `SELECT value FROM telemetry_state WHERE name=?`, name).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("telemetry: state: %w", err)
	}
	return v, true, nil
}

// After returns up to limit notifications with ids above id, in id order (a relay's
// reading of its own store). A removed device's notifications are left out.
func (s *Store) After(ctx context.Context, id int64, limit int) ([]Notification, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+columns+` FROM notifications WHERE id > ? AND `+notRemoved+` ORDER BY id LIMIT ?`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("telemetry: after: %w", err)
	}
	return scanAll(rows, "after")
}

// LastID is the highest id the store has given (0: none): with a relay's mark, how far
// the relay is behind, in ids.
func (s *Store) LastID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM notifications`).Scan(&id); err != nil {
		return 0, fmt.Errorf("telemetry: last id: %w", err)
	}
	return id, nil
}

// SetRelayedUpTo records, in a gateway's store, that its centre has every notification
// up to id (0: none yet, but the store is relayed): retention then counts what it
// deletes above it (UnrelayedDeleted). persist
// also writes it down, so a restart while the centre is away still knows it; a relay
// persists now and then, not per batch (each is a commit of its own).
func (s *Store) SetRelayedUpTo(ctx context.Context, id int64, persist bool) error {
	for {
		old := s.relayedUpTo.Load()
		if id <= old || s.relayedUpTo.CompareAndSwap(old, id) {
			break
		}
	}
	if !persist {
		return nil
	}
	return s.maintain(ctx, func(tx *sqldb.Tx) error { return saveState(tx, relayedState, id) })
}

// RestartRelayAt records the centre's mark as a relay session starts: the centre has
// every notification up to id and none above, even if it acknowledged more before (a
// centre restored from a backup, which the relay fills in again). It writes id down
// and returns the mark it replaced (-1: the store was not relayed).
func (s *Store) RestartRelayAt(ctx context.Context, id int64) (previous int64, err error) {
	previous = s.relayedUpTo.Swap(id)
	return previous, s.maintain(ctx, func(tx *sqldb.Tx) error { return resetState(tx, relayedState, id) })
}

// UnrelayedDeleted is how many notifications retention deleted since the store opened
// that its gateway's centre had not got (above SetRelayedUpTo's id): lost to the centre.
func (s *Store) UnrelayedDeleted() int64 { return s.unrelayedDeleted.Load() }

// NextCommit is closed when the store next commits notifications (any hub's, on a
// shared store). Take it before reading, so nothing committed after the read is missed.
func (s *Store) NextCommit() <-chan struct{} { return s.feed.current().done }

// RelayMark is the highest id this store has taken from source (0: none yet).
func (s *Store) RelayMark(ctx context.Context, source string) (int64, error) {
	v, _, err := s.state(ctx, s.db, relayState+source)
	return v, err
}

// AppendRelayed stores items relayed from source, ascending by Origin, and moves the
// source's mark to upto (the last id the source read; at least the last Origin). Items
// at or under the mark are duplicates of a batch stored before and are not stored again.
// It returns the notifications stored, the duplicates and the mark; like Append it
// fails at once with ErrOverloaded, and with ErrInvalid (nothing stored) for an item
// the store refuses or origins out of order.
func (s *Store) AppendRelayed(ctx context.Context, source string, upto int64, items []Relayed) (stored []Notification, dups int, mark int64, err error) {
	tag := &relayTag{source: source, upto: upto}
	ns := make([]Notification, len(items))
	for i := range items {
		if err := items[i].Validate(); err != nil {
			return nil, 0, 0, err
		}
		if i > 0 && items[i].Origin <= items[i-1].Origin || items[i].Origin > upto {
			return nil, 0, 0, fmt.Errorf("%w: relayed ids out of order", ErrInvalid)
		}
		ns[i], tag.origins = items[i].Notification, append(tag.origins, items[i].Origin)
	}
	if err := s.holdRelayed(ctx, source, items); err != nil {
		return nil, 0, 0, err
	}
	req := &appendReq{items: ns, relay: tag, done: make(chan error, 1), at: time.Now()}
	if err := s.enqueue(req, len(ns)); err != nil {
		return nil, 0, 0, err
	}
	select {
	case err := <-req.done:
		if err != nil {
			return nil, 0, 0, err
		}
		return req.items, tag.dups, tag.mark, nil
	case <-ctx.Done():
		return nil, 0, 0, ctx.Err()
	}
}

// holdRelayed hands the durable hook what of items is above source's mark, before the
// batch is queued: a batch the hook refuses is sent again by the source (ErrOverloaded),
// and what it took before is not stored twice (the mark decides).
func (s *Store) holdRelayed(ctx context.Context, source string, items []Relayed) error {
	h := s.hook()
	if h == nil {
		return nil
	}
	mark, err := s.RelayMark(ctx, source)
	if err != nil {
		return err
	}
	var fresh []Notification
	for _, it := range items {
		if it.Origin > mark {
			fresh = append(fresh, it.Notification)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	if err := h(ctx, fresh); err != nil {
		return &overloadedError{err}
	}
	return nil
}

// applyRelay drops from a relayed request, in the writer's transaction, what its source
// has already stored; marks holds the marks this transaction read or will write.
func (s *Store) applyRelay(ctx context.Context, tx *sqldb.Tx, r *appendReq, marks map[string]int64) error {
	t := r.relay
	mark, ok := marks[t.source]
	if !ok {
		var err error
		if mark, _, err = s.state(ctx, tx, relayState+t.source); err != nil {
			return err
		}
	}
	kept := r.items[:0:0]
	for i, o := range t.origins {
		if o > mark {
			kept = append(kept, r.items[i])
		}
	}
	t.dups = len(r.items) - len(kept)
	r.items = kept
	t.mark = max(mark, t.upto)
	marks[t.source] = t.mark
	return nil
}

// saveMarks writes the marks a transaction moved.
func saveMarks(tx *sqldb.Tx, marks map[string]int64) error {
	for source, v := range marks {
		if err := saveState(tx, relayState+source, v); err != nil {
			return err
		}
	}
	return nil
}

// saveState raises a telemetry_state row to v (never lowers it).
func saveState(tx *sqldb.Tx, name string, v int64) error {
	_, err := tx.Exec(`INSERT INTO telemetry_state(name, value) VALUES(?, ?)
		ON CONFLICT(name) DO UPDATE SET value = CASE WHEN excluded.value > telemetry_state.value THEN excluded.value ELSE telemetry_state.value END`,
		name, v)
	return err
}

// resetState sets a telemetry_state row to v, lower or not.
func resetState(tx *sqldb.Tx, name string, v int64) error {
	_, err := tx.Exec(`INSERT INTO telemetry_state(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value`, name, v)
	return err
}
