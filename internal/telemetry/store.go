package telemetry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/bytesize"
	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// FileName is the store's SQLite file inside the data folder.
const FileName = "telemetry.db"

// Config bounds the store. Zero fields take the defaults.
type Config struct {
	// MaxBatch bounds the notifications committed in one transaction; 0 means 4096.
	MaxBatch int `yaml:"max_batch"`
	// QueueDepth bounds the notifications waiting for the writer; 0 means 65536.
	// Past it Append fails with ErrOverloaded.
	QueueDepth int `yaml:"queue_depth"`
	// Retention drops notifications older than this; 0 means 720h (30 days).
	Retention time.Duration `yaml:"retention"`
	// MaxPerDevice keeps at most this many notifications per device (the newest); 0
	// means 100000.
	MaxPerDevice int `yaml:"max_per_device"`
	// MaxCommands bounds the commands kept per device; 0 means 1000. A new one
	// replaces the oldest answered or expired one; with none of those it is refused.
	MaxCommands int `yaml:"max_commands"`
	// CommitInterval is the shortest time between the starts of two commits while
	// many clients send at once (the last batch held commitSiblings requests or more);
	// 0 means DefaultCommitInterval. Each batch then gathers what arrived in the
	// interval, and the store pays one commit (and fsync) per interval rather than one
	// per notification or two. A notification that finds the writer idle for longer
	// is committed at once, and a few steady senders (steadySenders) are waited for
	// only until each has sent again.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// DeviceRate is how many messages a second one device may send over all paths
	// (notifications over REST, SOAP and MQTT, and its other MQTT publishes); 0 means 10.
	// DeviceBurst is how many it may send at once above it; 0 means 100.
	DeviceRate  float64 `yaml:"device_rate"`
	DeviceBurst int     `yaml:"device_burst"`
	// DeviceBytesRate is how many bytes a second one device may send so (16 seconds'
	// worth at once); 0 means 64 KiB.
	DeviceBytesRate bytesize.Size `yaml:"device_bytes_rate"`
	// MinFreeMiB is the free space the data folder's disk keeps: below it notifications
	// and commands are refused (the registry and the audit log go on); 0 means 256. A
	// PostgreSQL store is guarded by its database server instead.
	MinFreeMiB int `yaml:"min_free_mib"`
}

// DefaultCommitInterval bounds commits to 500 a second. Measured with 12,800 devices
// posting once a second (the jwt lab's rate mode): the store's CPU per notification is
// 56 µs committing at once (3 a batch, one fsync each), 18 µs at 2 ms (31 a batch), 15 µs
// at 5 ms, for 2 ms more latency at most.
const DefaultCommitInterval = 2 * time.Millisecond

// commitSiblings is how many requests the last batch must have held for the writer to
// wait for the commit interval (PostgreSQL's commit_siblings). Waiting pays when many
// devices send at once; a few clients sending one message after the other (a bridge,
// a gateway, one device's burst) would only be slowed: each waits for its answer.
const commitSiblings = 3

// MaxCommitInterval bounds CommitInterval: a notification waits for it before its answer.
const MaxCommitInterval = time.Second

// ApplyDefaults fills zero fields.
func (c *Config) ApplyDefaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 4096
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 65536
	}
	if c.Retention <= 0 {
		c.Retention = 720 * time.Hour
	}
	if c.MaxPerDevice <= 0 {
		c.MaxPerDevice = 100000
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.MaxCommands <= 0 {
		c.MaxCommands = 1000
	}
	if c.DeviceRate == 0 {
		c.DeviceRate = 10
	}
	if c.DeviceBurst == 0 {
		c.DeviceBurst = 100
	}
	if c.DeviceBytesRate == 0 {
		c.DeviceBytesRate = 64 << 10
	}
	if c.MinFreeMiB == 0 {
		c.MinFreeMiB = 256
	}
}

// LiftDeviceBudgets sets the per-device rates so high that no device meets them: for the
// lab, which measures the hub's paths at full speed, not their budgets.
func (c *Config) LiftDeviceBudgets() {
	c.DeviceRate, c.DeviceBurst, c.DeviceBytesRate = 1e9, 1<<30, 1<<40
}

// Validate checks the bounds a hub.yaml may set.
func (c *Config) Validate() error {
	if c.DeviceRate < 0 || c.DeviceBurst < 0 || c.DeviceBytesRate < 0 || c.MinFreeMiB < 0 {
		return errors.New("telemetry: device_rate, device_burst, device_bytes_rate and min_free_mib must not be negative")
	}
	if c.CommitInterval < 0 || c.CommitInterval > MaxCommitInterval {
		return fmt.Errorf("telemetry.commit_interval: %s is not between 0 (the default, %s) and %s", c.CommitInterval, DefaultCommitInterval, MaxCommitInterval)
	}
	return nil
}

// Observer is told about each committed batch (metrics): how many notifications it held,
// how many were still queued after it, how long its oldest request waited for the writer
// and how long the transaction took (inserts and the fsync of its commit).
type Observer interface {
	Committed(batch, queued int, waited, took time.Duration)
}

// appendObserver is an Observer that is also told, per request of a committed batch,
// how long it waited from its queuing to the commit: a batch's oldest request
// (Committed's waited) understates what the others waited when batches grow.
type appendObserver interface {
	Appended(time.Duration)
}

// Options are what a store tells its owner.
type Options struct {
	Observer Observer     // nil: no metrics
	Log      *slog.Logger // nil: no log (PostgreSQL: a lost or restored change feed)
	// linger, in tests, replaces the writer's wait for the commit interval, or for
	// senders requests (steadySenders; 0: none); it may call the store's waitFor.
	linger func(wait time.Duration, senders int, stop <-chan struct{})
	// deleteChunk, in tests, replaces deleteChunk; chunkDone is called between chunks.
	deleteChunk int
	chunkDone   func()
	// removalsDone, in tests, is called when the remover has deleted every removal's
	// notifications.
	removalsDone func()
	// capPruned, in tests, is called after a device was pruned to max_per_device as it
	// wrote; hourlyCapOnly leaves the cap to the hourly pass (PruneCount's own tests).
	capPruned     func(device string)
	hourlyCapOnly bool
}

// Store is the notification store: an SQLite file of one hub, or a table in the
// PostgreSQL database several hubs share (see shared).
type Store struct {
	cfg     Config
	budgets *budgets   // per-device message and byte rates
	disk    *diskGuard // the data folder's free space (SQLite)
	caps    *capCheck  // telemetry.max_per_device, applied as devices write
	db      *sqldb.DB
	where   string // the file, or the DSN without its password
	feed    *feed
	queue   chan *appendReq
	// queued counts notifications waiting in the queue, bounded by cfg.QueueDepth.
	mu      sync.Mutex
	queued  int
	closed  bool
	stop    chan struct{}
	stopped chan struct{}
	lastTS  int64 // µs; the writer's alone
	obs     Observer
	log     *slog.Logger
	linger  func(wait time.Duration, senders int, stop <-chan struct{}) // tests; nil: waitFor
	// arrived is signalled (if empty) at each enqueue, for a writer waiting for a
	// number of requests.
	arrived chan struct{}

	deleteChunk int    // 0: the const deleteChunk
	chunkDone   func() // tests: called between deleting chunks

	// removing wakes the remover (buffered 1); unremove stops it, then removerDone
	// is closed.
	removing     chan struct{}
	unremove     context.CancelFunc
	removerDone  chan struct{}
	removalsDone func() // tests

	// shared is set on PostgreSQL, where other hubs append to the same table. Then
	// the feed is not fed by this hub's writer but by follow, which reads every row
	// past the last it published, in timestamp order, whenever this hub commits,
	// another hub's commit is announced (LISTEN/NOTIFY), or a second has passed.
	shared   bool
	wake     chan struct{} // to follow; buffered 1
	unfollow context.CancelFunc
	followed chan struct{} // closed when follow and the listeners have returned
	ownMu    sync.Mutex
	own      map[int64]string // ids this hub committed that follow has not read yet: their Via

	// durable is the hook Append waits for beside the commit (fanout.go).
	durable durable

	// relayedUpTo is, in a gateway's store, the last id its centre has (-1: the store
	// is not relayed); unrelayedDeleted counts what retention deleted above it
	// (relay.go).
	relayedUpTo      atomic.Int64
	unrelayedDeleted atomic.Int64

	// commands wakes command polls (command.go); commandsHeard is set while the
	// PostgreSQL listener of other hubs' command changes is connected.
	commands      *commandFeed
	commandsHeard atomic.Bool
}

type appendReq struct {
	items []Notification
	// fn, if set, runs in the writer's transaction instead (maintenance).
	fn func(*sqldb.Tx) error
	// claim decides between the writer running fn (queued -> running) and its caller
	// giving up (queued -> abandoned): a caller that returned never has fn run later,
	// writing the results it captured while the caller reads them.
	claim atomic.Int32
	// relay, if set, marks relayed items (AppendRelayed).
	relay *relayTag
	// once, if set, stores the items only if its key is free (AppendOnce).
	once *onceTag
	done chan error
	at   time.Time // when it was queued
}

// versionsTable is where the store records its schema versions on PostgreSQL: the
// database is the registry's, whose versions are in migrate.Table. An SQLite file is
// the store's alone and keeps migrate.Table, as files made before PostgreSQL did.
const versionsTable = "telemetry_migrations"

// writerLock is the PostgreSQL advisory lock every transaction of the store takes, so
// the hubs sharing the table commit one batch at a time: a batch's timestamps are
// chosen under the lock above every committed one, and the lock is released only
// after the commit is visible. A reader that sees a row therefore sees every row of a
// smaller timestamp, which is what makes a timestamp a lossless poll cursor across hubs.
const writerLock = 0x696f74746c6d // "iottlm"

// Channel is the PostgreSQL notification channel a commit announces itself on.
const Channel = "iotsafe_notifications"

// migrations are the store's schema steps, oldest first (package migrate). The first
// is idempotent: a store made before versions were kept takes it as is.
var migrations = []migrate.Step{{Version: 1, Name: "notifications", SQL: schemaV1}, {Version: 2, Name: "removals", SQL: schemaV2},
	{Version: 3, Name: "commands", SQL: schemaV3}, {Version: 4, Name: "once keys", SQL: schemaV4}}

// SchemaVersion is the newest store schema this build knows.
func SchemaVersion() int { return migrate.Latest(migrations) }

const schemaV1 = `
CREATE TABLE IF NOT EXISTS notifications (
	id         INTEGER PRIMARY KEY AUTOINCREMENT, -- increases per hub, never reused
	device     TEXT NOT NULL,
	name       TEXT NOT NULL,
	parameters TEXT,             -- JSON, or NULL
	ts         INTEGER NOT NULL, -- the hub's time, microseconds since 1970 UTC, unique per hub
	device_ts  INTEGER           -- the device's own time if it gave one
);
CREATE INDEX IF NOT EXISTS notifications_device_ts ON notifications(device, ts);
CREATE INDEX IF NOT EXISTS notifications_ts ON notifications(ts);
`

// schemaV2 keeps device removals durable while their notifications are deleted (see
// RemoveDevice), and where the store is in the registry's removals (RemovalsApplied).
const schemaV2 = `
CREATE TABLE notification_removals (
	device TEXT PRIMARY KEY,
	upto   INTEGER NOT NULL -- ts: the device's notifications up to it are gone
);
CREATE TABLE telemetry_state (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
);
`

// Open opens the store at location and starts its writer. location is a data folder
// (the store is its telemetry.db, created mode 0600) or a postgres:// DSN (the
// registry's database, which every hub using that registry shares: one store for all).
func Open(ctx context.Context, location string, cfg Config, o Options) (*Store, error) {
	cfg.ApplyDefaults()
	db, where, err := openDB(ctx, location)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, db: db, where: where, feed: newFeed(), queue: make(chan *appendReq, cfg.QueueDepth),
		stop: make(chan struct{}), stopped: make(chan struct{}), obs: o.Observer, log: o.Log,
		own: map[int64]string{}, linger: o.linger, arrived: make(chan struct{}, 1),
		deleteChunk: o.deleteChunk, chunkDone: o.chunkDone, removing: make(chan struct{}, 1), removerDone: make(chan struct{}),
		removalsDone: o.removalsDone, commands: newCommandFeed(), budgets: newBudgets(cfg), disk: &diskGuard{minMiB: int64(cfg.MinFreeMiB)}, caps: newCapCheck(cfg.MaxPerDevice, o.capPruned)}
	if o.hourlyCapOnly {
		s.caps = nil
	}
	if !sqldb.IsDSN(location) {
		s.disk.dir = location
	}
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(ts), 0) FROM notifications`).Scan(&s.lastTS); err != nil {
		db.Close()
		return nil, fmt.Errorf("telemetry: %s: %w", where, err)
	}
	relayed, ok, err := s.state(ctx, db, relayedState)
	if err != nil {
		db.Close()
		return nil, err
	}
	if !ok {
		relayed = -1 // not relayed (yet)
	}
	s.relayedUpTo.Store(relayed)
	if db.Dialect() == sqldb.Postgres {
		s.shared, s.wake, s.followed = true, make(chan struct{}, 1), make(chan struct{})
		fctx, cancel := context.WithCancel(context.Background())
		s.unfollow = cancel
		go s.follow(fctx, s.lastTS)
	}
	go s.writer()
	rctx, cancel := context.WithCancel(context.Background())
	s.unremove = cancel
	go s.remover(rctx)
	return s, nil
}

// openDB opens and migrates the store's database at location.
func openDB(ctx context.Context, location string) (*sqldb.DB, string, error) {
	if sqldb.IsDSN(location) {
		where := sqldb.Redact(location)
		// The writer holds one connection; readers (queries, polls, follow) the rest.
		db, err := sqldb.OpenPostgres(ctx, location, sqldb.PostgresOptions{WriterLock: writerLock, MaxConns: 6})
		if err != nil {
			return nil, "", fmt.Errorf("telemetry: %w", err)
		}
		if _, err := migrate.Apply(ctx, db, versionsTable, migrations); err != nil {
			db.Close()
			return nil, "", fmt.Errorf("telemetry store %s: %w", where, err)
		}
		return db, where, nil
	}
	path := filepath.Join(location, FileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("telemetry: %w", err)
	}
	f.Close()
	// synchronous FULL: a commit is on disk when it returns. Group commit makes that one
	// fsync per batch, and the REST API acknowledges only what is durable.
	// temp_store MEMORY: a multi-row INSERT keeps a statement journal of the pages it
	// changes (to undo itself alone); in a file that is a write per page per batch.
	// journal_size_limit: the WAL file keeps the size it once reached (a reader that
	// held it back, a burst) unless this truncates it when it restarts.
	db, err := sqldb.OpenSQLite(path, "busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)", "temp_store(MEMORY)",
		fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	if err != nil {
		return nil, "", fmt.Errorf("telemetry: open %s: %w", path, err)
	}
	if _, err := migrate.Apply(ctx, db, migrate.Table, migrations); err != nil {
		db.Close()
		return nil, "", fmt.Errorf("telemetry store %s: %w", path, err)
	}
	for _, side := range []string{"-wal", "-shm"} {
		_ = os.Chmod(path+side, 0o600)
	}
	return db, path, nil
}

// walSizeLimit is the size the store's WAL file is cut back to when it restarts.
const walSizeLimit = 64 << 20

// Where is the store's file, or its database's DSN without a password.
func (s *Store) Where() string { return s.where }

// Shared reports whether the store is in PostgreSQL, shared by every hub of the registry.
func (s *Store) Shared() bool { return s.shared }

// Close stops the writer after it has committed what is queued, then closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// The remover first: it waits on the writer. What it has not deleted stays hidden,
	// and the next Open goes on.
	s.unremove()
	<-s.removerDone
	close(s.stop)
	<-s.stopped
	if s.shared {
		s.unfollow()
		<-s.followed
	}
	return s.db.Close()
}

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

// markOwn records (or, after a failed commit, forgets) the ids of a batch this hub
// stores in a shared store with the path each came in on, which the table does not
// keep: follow gives them back their Via (ownVia).
func (s *Store) markOwn(batch []*appendReq, add bool) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	for _, r := range batch {
		for _, it := range r.items {
			if add {
				s.own[it.ID] = it.Via
			} else {
				delete(s.own, it.ID)
			}
		}
	}
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
