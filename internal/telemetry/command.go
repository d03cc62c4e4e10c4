package telemetry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Commands go the other way from notifications: a platform app asks a device to do
// something (DeviceHive's /device/{id}/command), the device polls for its commands and
// answers each with a status and a result, and the app polls for the answer. They are
// kept in the same store, written by the same writer (under the same lock on
// PostgreSQL), and removed with their device.

// ErrTooManyCommands means the device already holds Config.MaxCommands commands it has
// not answered: it is not taking them, and more would only pile up.
var ErrTooManyCommands = errors.New("telemetry: too many unanswered commands")

// MaxStatusLen bounds a command's status; its result is bounded as parameters are.
const MaxStatusLen = 128

// MaxLifetime bounds a command's lifetime (a year, in seconds).
const MaxLifetime = 365 * 24 * 3600

// CommandChannel is the PostgreSQL notification channel a command's change announces
// itself on; the payload is the device's name.
const CommandChannel = "iotsafe_commands"

// Command is one request of a platform app to a device, and the device's answer.
type Command struct {
	ID     int64  // assigned by the store; increases per store
	Device string // the registry's device name
	Name   string // DeviceHive's "command"
	// Parameters is a JSON value, or nil for none.
	Parameters json.RawMessage
	// Lifetime is how many seconds after Timestamp the device may still receive the
	// command (0: no limit). A device that comes back after it does not get it.
	Lifetime int
	// Timestamp is when the hub stored it; LastUpdated when it last changed (equal to
	// Timestamp until the first update). Both come from one clock of the store, unique
	// and increasing across hubs: the cursors of polls for new and for answered commands.
	Timestamp, LastUpdated time.Time
	Status                 string          // set by updates ("" until then, unless the sender set one)
	Result                 json.RawMessage // a JSON value, or nil
	// UserID is the front-door account that sent it.
	UserID int64
}

// Updated reports whether the command has changed since it was stored.
func (c *Command) Updated() bool { return c.LastUpdated.After(c.Timestamp) }

// Expired reports whether the command's lifetime has passed at now.
func (c *Command) Expired(now time.Time) bool {
	return c.Lifetime > 0 && now.After(c.Timestamp.Add(time.Duration(c.Lifetime)*time.Second))
}

// Validate checks what the store requires of a new command.
func (c *Command) Validate() error {
	switch {
	case c.Device == "":
		return fmt.Errorf("%w: no device", ErrInvalid)
	case c.Name == "":
		return fmt.Errorf("%w: the command name is empty", ErrInvalid)
	case len(c.Name) > MaxNameLen:
		return fmt.Errorf("%w: the command name is longer than %d bytes", ErrInvalid, MaxNameLen)
	case c.Lifetime < 0 || c.Lifetime > MaxLifetime:
		return fmt.Errorf("%w: lifetime %d: want seconds from 0 (no limit) to %d", ErrInvalid, c.Lifetime, MaxLifetime)
	}
	if err := validJSON("parameters", c.Parameters); err != nil {
		return err
	}
	return CommandUpdate{Status: &c.Status, Result: c.Result}.Validate()
}

// CommandUpdate is a change to a command: its status, its result, or both.
type CommandUpdate struct {
	Status *string         // nil: unchanged
	Result json.RawMessage // nil: unchanged
}

// Validate checks an update's fields.
func (u CommandUpdate) Validate() error {
	if u.Status != nil && len(*u.Status) > MaxStatusLen {
		return fmt.Errorf("%w: the status is longer than %d bytes", ErrInvalid, MaxStatusLen)
	}
	return validJSON("result", u.Result)
}

func validJSON(what string, v json.RawMessage) error {
	switch {
	case len(v) > MaxParametersLen:
		return fmt.Errorf("%w: %s larger than %d bytes", ErrInvalid, what, MaxParametersLen)
	case v != nil && !json.Valid(v):
		return fmt.Errorf("%w: %s not valid JSON", ErrInvalid, what)
	}
	return nil
}

// Sort orders of a command query besides SortByID and SortByTimestamp.
const (
	SortByCommand = "command"
	SortByStatus  = "status"
)

// CommandFilter selects commands. Zero fields do not filter.
type CommandFilter struct {
	// Devices restricts to these devices; nil means any device, an empty non-nil slice
	// none.
	Devices []string
	Names   []string // command names
	Status  string
	// Start and End bound Timestamp, inclusive.
	Start, End time.Time
	// After is a poll's cursor, exclusive: Timestamp, or LastUpdated with Updated.
	After time.Time
	// Updated selects commands changed after After (answered), by LastUpdated, in
	// place of commands stored after it.
	Updated bool
	// Live leaves out commands whose lifetime has passed (what a device polls for).
	Live bool
	// SortBy is id, timestamp, command or status ("" means timestamp); Desc reverses it.
	SortBy string
	Desc   bool
	// Take bounds the result (0 means DefaultTake, at most MaxTake); Skip skips the first.
	Take, Skip int
}

func (f *CommandFilter) normalize() error {
	switch f.SortBy {
	case "", SortByTimestamp, SortByID, SortByCommand, SortByStatus:
	default:
		return fmt.Errorf("%w: sortField %q: want id, timestamp, command or status", ErrInvalid, f.SortBy)
	}
	if f.Take < 0 || f.Skip < 0 {
		return fmt.Errorf("%w: take and skip must not be negative", ErrInvalid)
	}
	if f.Take == 0 {
		f.Take = DefaultTake
	}
	f.Take = min(f.Take, MaxTake)
	if len(f.Devices) > maxDevicesInQuery {
		return fmt.Errorf("%w: more than %d devices in one query", ErrInvalid, maxDevicesInQuery)
	}
	return nil
}

const schemaV3 = `
CREATE TABLE commands (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	device       TEXT NOT NULL,
	name         TEXT NOT NULL,
	parameters   TEXT,                       -- JSON, or NULL
	lifetime     INTEGER NOT NULL DEFAULT 0, -- seconds; 0: no limit
	ts           INTEGER NOT NULL,           -- stored, µs since 1970 UTC
	last_updated INTEGER NOT NULL,           -- last change, µs; = ts until updated; unique
	status       TEXT NOT NULL DEFAULT '',
	result       TEXT,                       -- JSON, or NULL
	user_id      INTEGER NOT NULL DEFAULT 0  -- the sending account
);
CREATE INDEX commands_device_ts ON commands(device, ts);
CREATE INDEX commands_last_updated ON commands(last_updated);
`

const commandColumns = `id, device, name, parameters, lifetime, ts, last_updated, status, result, user_id`

func scanCommand(rows interface{ Scan(...any) error }) (Command, error) {
	var c Command
	var params, result sql.NullString
	var ts, upd int64
	if err := rows.Scan(&c.ID, &c.Device, &c.Name, &params, &c.Lifetime, &ts, &upd, &c.Status, &result, &c.UserID); err != nil {
		return c, err
	}
	if params.Valid {
		c.Parameters = json.RawMessage(params.String)
	}
	if result.Valid {
		c.Result = json.RawMessage(result.String)
	}
	c.Timestamp, c.LastUpdated = time.UnixMicro(ts).UTC(), time.UnixMicro(upd).UTC()
	return c, nil
}

func nullJSON(v json.RawMessage) any {
	if v == nil {
		return nil
	}
	return string(v)
}

// commandClock is the store's next command time in µs, read in the writer's transaction
// (under the writer lock on PostgreSQL): now, or just past every stored one. Inserts
// and updates share it, so "changed after T" misses nothing across hubs.
func commandClock(ctx context.Context, tx *sqldb.Tx) (int64, error) {
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(last_updated), 0) FROM commands`).Scan(&last); err != nil {
		return 0, err
	}
	return max(time.Now().UnixMicro(), last+1), nil
}

// InsertCommand stores c for its device and returns it with ID, Timestamp and
// LastUpdated set. A device holding Config.MaxCommands commands loses its oldest
// answered or expired one; if none is, the command is refused (ErrTooManyCommands).
func (s *Store) InsertCommand(ctx context.Context, c Command) (Command, error) {
	if err := s.disk.check(time.Now()); err != nil {
		return Command{}, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	err := s.maintain(ctx, func(tx *sqldb.Tx) error {
		now, err := commandClock(ctx, tx)
		if err != nil {
			return err
		}
		var held int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM commands WHERE device=?`, c.Device).Scan(&held); err != nil {
			return err
		}
		if held >= s.cfg.MaxCommands {
			// The oldest the device is done with: answered, or past its lifetime.
			res, err := tx.Exec(`DELETE FROM commands WHERE id IN (SELECT id FROM commands WHERE device=? AND (last_updated > ts OR (lifetime > 0 AND ts + lifetime*1000000 < ?)) ORDER BY ts LIMIT ?)`,
				c.Device, now, held-s.cfg.MaxCommands+1)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); int(n) < held-s.cfg.MaxCommands+1 {
				return fmt.Errorf("%w: device %s holds %d commands it has not answered (telemetry.max_commands)", ErrTooManyCommands, c.Device, s.cfg.MaxCommands)
			}
		}
		row := tx.QueryRowContext(ctx, `INSERT INTO commands(device, name, parameters, lifetime, ts, last_updated, status, result, user_id)
			VALUES(?,?,?,?,?,?,?,?,?) RETURNING id`, c.Device, c.Name, nullJSON(c.Parameters), c.Lifetime, now, now, c.Status, nullJSON(c.Result), c.UserID)
		if err := row.Scan(&c.ID); err != nil {
			return err
		}
		c.Timestamp = time.UnixMicro(now).UTC()
		c.LastUpdated = c.Timestamp
		return tx.NotifyPayload(ctx, CommandChannel, c.Device)
	})
	if err != nil {
		if errors.Is(err, ErrTooManyCommands) {
			return c, err
		}
		return c, fmt.Errorf("telemetry: insert command: %w", err)
	}
	s.commands.changed(c.Device)
	return c, nil
}

// UpdateCommand applies u to device's command id and returns the command as it now is.
func (s *Store) UpdateCommand(ctx context.Context, device string, id int64, u CommandUpdate) (Command, error) {
	if err := u.Validate(); err != nil {
		return Command{}, err
	}
	var c Command
	err := s.maintain(ctx, func(tx *sqldb.Tx) error {
		now, err := commandClock(ctx, tx)
		if err != nil {
			return err
		}
		set, args := []string{"last_updated=?"}, []any{now}
		if u.Status != nil {
			set, args = append(set, "status=?"), append(args, *u.Status)
		}
		if u.Result != nil {
			set, args = append(set, "result=?"), append(args, string(u.Result))
		}
		res, err := tx.Exec(`UPDATE commands SET `+strings.Join(set, ", ")+` WHERE id=? AND device=?`, append(args, id, device)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: command %d of %s", ErrNotFound, id, device)
		}
		if c, err = scanCommand(tx.QueryRowContext(ctx, `SELECT `+commandColumns+` FROM commands WHERE id=?`, id)); err != nil {
			return err
		}
		return tx.NotifyPayload(ctx, CommandChannel, device)
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return c, err
		}
		return c, fmt.Errorf("telemetry: update command: %w", err)
	}
	s.commands.changed(device)
	return c, nil
}

// GetCommand returns device's command id.
func (s *Store) GetCommand(ctx context.Context, device string, id int64) (Command, error) {
	c, err := scanCommand(s.db.QueryRowContext(ctx, `SELECT `+commandColumns+` FROM commands WHERE id=? AND device=?`, id, device))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return c, fmt.Errorf("%w: command %d of %s", ErrNotFound, id, device)
	case err != nil:
		return c, fmt.Errorf("telemetry: get command: %w", err)
	}
	return c, nil
}

// ListCommands returns the commands f selects.
func (s *Store) ListCommands(ctx context.Context, f CommandFilter) ([]Command, error) {
	if err := f.normalize(); err != nil {
		return nil, err
	}
	if f.Devices != nil && len(f.Devices) == 0 {
		return []Command{}, nil
	}
	var where []string
	var args []any
	where, args = whereIn(where, args, "device", f.Devices)
	where, args = whereIn(where, args, "name", f.Names)
	cond := func(c string, v any) { where, args = append(where, c), append(args, v) }
	if f.Status != "" {
		cond("status = ?", f.Status)
	}
	if !f.Start.IsZero() {
		cond("ts >= ?", f.Start.UnixMicro())
	}
	if !f.End.IsZero() {
		cond("ts <= ?", f.End.UnixMicro())
	}
	col := map[string]string{"": "ts", SortByTimestamp: "ts", SortByID: "id", SortByCommand: "name", SortByStatus: "status"}[f.SortBy]
	switch {
	case f.Updated:
		where = append(where, "last_updated > ts")
		if !f.After.IsZero() {
			cond("last_updated > ?", f.After.UnixMicro())
		}
		col = "last_updated"
	case !f.After.IsZero():
		cond("ts > ?", f.After.UnixMicro())
	}
	if f.Live {
		cond("(lifetime = 0 OR ts + lifetime*1000000 >= ?)", time.Now().UnixMicro())
	}
	q := `SELECT ` + commandColumns + ` FROM commands`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	dir := "ASC"
	if f.Desc {
		dir = "DESC"
	}
	q += " ORDER BY " + col + " " + dir
	if col == "name" || col == "status" {
		q += ", ts " + dir
	}
	q += " LIMIT ? OFFSET ?"
	args = append(args, f.Take, f.Skip)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: list commands: %w", err)
	}
	defer rows.Close()
	out := []Command{}
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, fmt.Errorf("telemetry: list commands: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// PollCommands returns the commands f selects, oldest first: those stored after
// f.After (or, with f.Updated, answered after it), waiting until there is at least one
// or ctx ends; then it returns an empty list and no error. A zero f.After means from
// now on.
func (s *Store) PollCommands(ctx context.Context, f CommandFilter) ([]Command, error) {
	f.SortBy, f.Desc, f.Skip = SortByTimestamp, false, 0
	if err := f.normalize(); err != nil {
		return nil, err
	}
	// Taken before the first query: a change committed after it wakes the wait.
	t := s.commands.current()
	if f.After.IsZero() {
		var last int64
		if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(last_updated), 0) FROM commands`).Scan(&last); err != nil {
			if ctx.Err() != nil {
				return []Command{}, nil
			}
			return nil, fmt.Errorf("telemetry: poll commands: %w", err)
		}
		f.After = time.UnixMicro(last).UTC()
	}
	var devices map[string]bool
	if f.Devices != nil {
		devices = make(map[string]bool, len(f.Devices))
		for _, d := range f.Devices {
			devices[d] = true
		}
	}
	for {
		got, err := s.ListCommands(ctx, f)
		if ctx.Err() != nil {
			return []Command{}, nil
		}
		if err != nil || len(got) > 0 {
			return got, err
		}
		if t = s.waitCommands(ctx, t, devices); t == nil {
			return []Command{}, nil
		}
	}
}

// PollCommandUpdate returns device's command id once it has been updated (at once if it
// has been), or as it is when ctx ends (updated false).
func (s *Store) PollCommandUpdate(ctx context.Context, device string, id int64) (c Command, updated bool, err error) {
	t := s.commands.current()
	for {
		c, err := s.GetCommand(ctx, device, id)
		if err != nil && ctx.Err() == nil {
			return c, false, err
		}
		if err == nil && c.Updated() {
			return c, true, nil
		}
		if t = s.waitCommands(ctx, t, map[string]bool{device: true}); t == nil {
			return c, false, nil
		}
	}
}

// waitCommands waits from t until a change of one of devices' commands (nil: any
// device's) and returns the tick to wait from next, or nil when ctx ends. On a shared
// store whose change listener is down it returns each second: another hub's change is
// then only seen by looking.
func (s *Store) waitCommands(ctx context.Context, t *commandTick, devices map[string]bool) *commandTick {
	var every <-chan time.Time
	if s.shared && !s.commandsHeard.Load() {
		tm := time.NewTimer(followEvery)
		defer tm.Stop()
		every = tm.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-every:
			return t
		case <-t.done:
		}
		d := t.device
		t = t.next
		if d == "" || devices == nil || devices[d] {
			return t
		}
	}
}

// commandFeed wakes command polls: a list of changes, each naming the device whose
// commands changed ("" for any: the listener reconnected). A poll walks it from where
// it last queried and queries again only for a change of its own devices.
type commandFeed struct {
	mu  sync.Mutex
	cur *commandTick
}

type commandTick struct {
	done   chan struct{} // closed once device and next are set
	device string
	next   *commandTick
}

func newCommandFeed() *commandFeed { return &commandFeed{cur: &commandTick{done: make(chan struct{})}} }

func (f *commandFeed) current() *commandTick {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *commandFeed) changed(device string) {
	f.mu.Lock()
	t := f.cur
	t.device, t.next = device, &commandTick{done: make(chan struct{})}
	f.cur = t.next
	f.mu.Unlock()
	close(t.done)
}

// listenCommands feeds s.commands with other hubs' command changes (PostgreSQL) until
// ctx ends.
func (s *Store) listenCommands(ctx context.Context) {
	s.db.Listen(ctx, CommandChannel, 30*time.Second, func(device string) {
		s.commandsHeard.Store(true)
		s.commands.changed(device)
	}, func(err error) {
		if s.commandsHeard.Swap(false) && s.log != nil {
			s.log.Warn("telemetry: command change feed lost: other hubs' commands reach this hub's polls within a second until it is back", "err", err)
		}
	})
}

// pruneCommands deletes the commands stored before cutoff (µs).
func (s *Store) pruneCommands(ctx context.Context, cutoff int64) (int64, error) {
	var n int64
	err := s.maintain(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.Exec(`DELETE FROM commands WHERE ts < ?`, cutoff)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}
