package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
