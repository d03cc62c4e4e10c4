package registry

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Event kinds recorded in the audit log.
const (
	EventDeviceAdded   = "device_added"
	EventDeviceRemoved = "device_removed"
	EventRevoked       = "revoked"
	EventReinstated    = "reinstated" // a revocation undone (iotsafe device reinstate)
	EventKeyAdded      = "key_added"
	EventKeyRevoked    = "key_revoked"
	EventAuthRefused   = "auth_refused"
	EventSessionOpen   = "session_open"
	EventSessionClose  = "session_close"
	// EventSessionMoved: the device's session is now on another hub of a shared registry
	// (written by that hub); the hub that held it closes its old session.
	EventSessionMoved = "session_moved"
	EventTakeover     = "takeover"
	EventViolation    = "violation"
	EventPoolMoved    = "pool_moved"
	// EventBackup: iotsafe backup copied the data folder (detail: where, what);
	// EventRestored: iotsafe restore put a backup back (detail: which, and what it
	// revoked again).
	EventBackup   = "backup_taken"
	EventRestored = "restored"
	// EventHostKey: iotsafe hostkey added, dropped or promoted a host key (detail:
	// what, and the fingerprints).
	EventHostKey = "hostkey_rotation"
	// EventHubScanned: 'iotsafe scan --hub' rated the hub's endpoints (detail: the worst
	// finding and how many of each kind); the console's fleet page shows the newest.
	EventHubScanned = "hub_scanned"
	// EventProfileStored: a profile was stored or replaced for new sessions;
	// EventProfileApplied: also applied to live ones (each hub closes the sessions that
	// use it, so they come back under it). Detail is the profile's name.
	EventProfileStored  = "profile_stored"
	EventProfileApplied = "profile_applied"
)

// Event is one audit record.
type Event struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Device string    `json:"device,omitempty"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail,omitempty"`
	Remote string    `json:"remote,omitempty"`
	// Hub is the hub that wrote the event; "" for admin commands (and events written
	// before hubs were named), except a backup's, which names the hub whose data folder
	// it copied.
	Hub string `json:"hub,omitempty"`
}

// AddEvent appends to the audit log.
func (r *Registry) AddEvent(ctx context.Context, e Event) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error { return r.addEvent(ctx, tx, e) })
}

// addEvent appends e in tx at e.At, or now when it is zero (an event held while the
// registry could not write keeps the time it happened), naming the hub that wrote it
// (none for admin commands), or e.Hub if set.
func (r *Registry) addEvent(ctx context.Context, tx *sqldb.Tx, e Event) error {
	at := now()
	if !e.At.IsZero() {
		at = e.At.UTC().Format(timeLayout)
	}
	hub := r.hub
	if e.Hub != "" {
		hub = e.Hub
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO events(at, device, kind, detail, remote, hub) VALUES(?,?,?,?,?,?)`,
		at, e.Device, e.Kind, e.Detail, e.Remote, hub)
	if err != nil {
		return fmt.Errorf("registry: add event: %w", err)
	}
	if slices.Contains(changeKinds, e.Kind) {
		if tx.Unordered() {
			// The change feed relies on every change committing in the order of its id.
			return fmt.Errorf("registry: change event %s written outside the writer lock", e.Kind)
		}
		// Every hub on a shared registry reads its change feed at once (WatchChanges).
		if err := tx.Notify(ctx, changesChannel); err != nil {
			return fmt.Errorf("registry: notify: %w", err)
		}
	}
	return nil
}

// changesChannel is the PostgreSQL notification channel of the change feed.
const changesChannel = "iotsafe_changes"

// WatchChanges calls wake as soon as another process commits a change (PostgreSQL
// LISTEN/NOTIFY), and once whenever it (re)connects; fail is told why it lost its
// connection. It returns when ctx ends, or at once on SQLite, where the change feed is
// read by polling alone.
func (r *Registry) WatchChanges(ctx context.Context, wake func(), fail func(error)) {
	r.db.Listen(ctx, changesChannel, 30*time.Second, func(string) { wake() }, fail)
}

// EventFilter selects events; zero values select everything.
type EventFilter struct {
	Device string
	Kind   string
	Hub    string // events naming this hub
	Limit  int    // 0 means 1000, newest last
	// After, if set, selects events past this id, the oldest Limit of them (a follower
	// reading on from the last it saw misses none).
	After int64
}

// Events returns the newest matching events in chronological order.
func (r *Registry) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	where, args := "", []any{}
	if f.Device != "" {
		where, args = " AND device=?", append(args, f.Device)
	}
	if f.Kind != "" {
		where, args = where+" AND kind=?", append(args, f.Kind)
	}
	if f.Hub != "" {
		where, args = where+" AND hub=?", append(args, f.Hub)
	}
	q := `SELECT id, at, device, kind, detail, remote, hub FROM (
		SELECT * FROM events WHERE 1=1` + where + ` ORDER BY id DESC LIMIT ?) newest ORDER BY id`
	if f.After > 0 {
		q, args = `SELECT id, at, device, kind, detail, remote, hub FROM events WHERE id > ?`+where+` ORDER BY id LIMIT ?`, append([]any{f.After}, args...)
	}
	rows, err := r.db.QueryContext(ctx, q, append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("registry: events: %w", err)
	}
	defer rows.Close()
	return scanEvents(rows)
}

// LastBackup is the newest backup of hub's data folder in the audit log, nil if none. On
// a registry several hubs share (PostgreSQL) only backups naming hub count: another
// hub's backup says nothing of this one's keys and configuration. A SQLite registry
// belongs to one data folder, so every backup counts, also those recorded before
// backups named their hub.
func (r *Registry) LastBackup(ctx context.Context, hub string) (*Event, error) {
	f := EventFilter{Kind: EventBackup, Limit: 1}
	if r.Dialect() == sqldb.Postgres {
		f.Hub = hub
	}
	evs, err := r.Events(ctx, f)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	return &evs[0], nil
}

// scanEvents reads rows of id, at, device, kind, detail, remote, hub.
func scanEvents(rows *sql.Rows) ([]Event, error) {
	out := []Event{}
	for rows.Next() {
		var e Event
		var at string
		if err := rows.Scan(&e.ID, &at, &e.Device, &e.Kind, &e.Detail, &e.Remote, &e.Hub); err != nil {
			return nil, fmt.Errorf("registry: events: %w", err)
		}
		if t := parseTime(sql.NullString{String: at, Valid: true}); t != nil {
			e.At = *t
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("registry: events: %w", err)
	}
	return out, nil
}

// changeKinds are the events that change what a running hub must enforce: its sessions
// (revocations, removals) or its access policy (grants, device groups, accounts).
var changeKinds = []string{EventRevoked, EventReinstated, EventApproved, EventDeviceRemoved, EventKeyRevoked, "granted", "ungranted", "groups_set",
	EventProfileApplied,
	// A new device is new addresses for the access policy of every hub (and new sockets
	// for hubs that relay to their peers).
	EventDeviceAdded,
	"account_removed", "account_password", "account_logout", "token_revoked", EventLoginSessionEnded,
	// A new secret, client certificate or SOAP key retires the old one on every hub.
	EventSecretSet, EventCertIssued, EventSOAPKeySet, EventSessionMoved,
	// A revoked SSH certificate closes its sessions; an untrusted CA, every session it vouched for.
	EventSSHCertRevoked, EventSSHCAUntrusted}

// lastChangeQuery finds the newest change event with one index lookup per kind (the
// events_kind index), however many other events came after it.
var lastChangeQuery = func() string {
	per := make([]string, len(changeKinds))
	for i := range per {
		per[i] = `SELECT max(id) AS id FROM events WHERE kind=?`
	}
	return `SELECT max(id) FROM (` + strings.Join(per, " UNION ALL ") + `) AS newest`
}()

// changesQuery reads the change events after an id (the events_kind index).
var changesQuery = `SELECT id, at, device, kind, detail, remote, hub FROM events WHERE kind IN (?` +
	strings.Repeat(",?", len(changeKinds)-1) + `) AND id > ? ORDER BY id`

// EventsAfter returns up to limit events of a change kind with an id above after, oldest
// first: a cursor over one kind of change (change events commit in id order).
func (r *Registry) EventsAfter(ctx context.Context, kind string, after int64, limit int) ([]Event, error) {
	if !slices.Contains(changeKinds, kind) {
		return nil, fmt.Errorf("registry: %s is not a change event: its ids are no cursor", kind)
	}
	rows, err := r.db.QueryContext(ctx, `SELECT id, at, device, kind, detail, remote, hub FROM events WHERE kind=? AND id > ? ORDER BY id LIMIT ?`,
		kind, after, limit)
	if err != nil {
		return nil, fmt.Errorf("registry: events: %w", err)
	}
	defer rows.Close()
	return scanEvents(rows)
}

// LastChangeID is the id of the newest change event (0 for none): where a change feed
// starts. Every change up to it is committed and visible (see Changes).
func (r *Registry) LastChangeID(ctx context.Context) (int64, error) {
	var id sql.NullInt64
	if err := r.db.QueryRowContext(ctx, lastChangeQuery, changeKindArgs()...).Scan(&id); err != nil {
		return 0, fmt.Errorf("registry: events: %w", err)
	}
	return id.Int64, nil
}

func changeKindArgs() []any {
	args := make([]any, len(changeKinds))
	for i, k := range changeKinds {
		args[i] = k
	}
	return args
}

// Changes returns, oldest first, the events after id that change what a hub enforces,
// written by anyone (an admin command, another process) in the same transaction as the
// change itself; and the id to continue from. It is the hub's change feed: a hub applies
// them even when the admin socket did not tell it.
//
// Change events are written only under the writer lock (SQLite's immediate transactions;
// PostgreSQL's advisory lock), so they commit one at a time in the order of their ids,
// and what one query sees of them is every one up to its newest: the feed continues
// from there. Other events, sessions' starts and ends, are written beside the lock
// (OpenSession) and may commit out of id order; the feed never reads them, so their ids
// are not a bound for it.
func (r *Registry) Changes(ctx context.Context, after int64) ([]Event, int64, error) {
	rows, err := r.db.QueryContext(ctx, changesQuery, append(changeKindArgs(), after)...)
	if err != nil {
		return nil, after, fmt.Errorf("registry: changes: %w", err)
	}
	defer rows.Close()
	out, err := scanEvents(rows)
	if err != nil {
		return nil, after, err
	}
	if len(out) > 0 {
		after = out[len(out)-1].ID
	}
	return out, after, nil
}
