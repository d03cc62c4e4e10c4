package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Sentinel errors callers branch on.
var (
	ErrNotFound = errors.New("registry: not found")
	ErrExists   = errors.New("registry: already exists")
	// ErrNotRevoked: a reinstatement of a device that is not revoked.
	ErrNotRevoked = errors.New("registry: not revoked")
	// ErrUnsafeMode means the database file is readable by others than its owner.
	ErrUnsafeMode = errors.New("registry: unsafe file mode")
)

// FileName is the SQLite file inside the data folder.
const FileName = "registry.db"

const timeLayout = "2006-01-02T15:04:05.000000Z"

// Registry is the device registry. It is safe for concurrent use.
type Registry struct {
	db    *sqldb.DB
	where string // the folder, or the DSN without its password
	// hub names the hub using this registry (SetHub); "" for admin commands.
	hub  string
	pool atomic.Pointer[sockets.Pool]
	// Tests: events deleted per transaction of PruneEvents (0: eventChunk), and a
	// function called after each of its transactions.
	eventChunk     int
	eventChunkDone func()
}

// writerLock is the PostgreSQL advisory lock every registry transaction takes (but
// sessions' starts and ends: withUnorderedTx): writers of every hub and admin command run
// one at a time, as they do on SQLite, so the read-then-write steps (a free address, a
// claim) need no retry loops, and change events commit in the order of their ids. The
// registry is written at human and session rates; high-rate telemetry has its own store.
const writerLock = 0x696f7473616665 // "iotsafe"

// Open opens the registry at location: a data folder (the SQLite file there, created
// mode 0600 if needed) or a postgres:// DSN (a database the operator created; the
// schema is created or brought up to date). The registry is the one source of the
// reserved pool: the first open records want (defaults applied); later opens use the
// recorded pool, and fail with ErrPoolMismatch if want sets a field (CIDR or PortBase)
// to something else. An unset want means "whatever is recorded".
func Open(ctx context.Context, location string, want sockets.Config) (*Registry, error) {
	var r *Registry
	var err error
	if sqldb.IsDSN(location) {
		r, err = openPostgres(ctx, location)
	} else {
		r, err = openSQLite(ctx, location)
	}
	if err != nil {
		return nil, err
	}
	if err := r.loadPool(ctx, want); err != nil {
		r.db.Close()
		return nil, err
	}
	return r, nil
}

func openPostgres(ctx context.Context, dsn string) (*Registry, error) {
	db, err := sqldb.OpenPostgres(ctx, dsn, sqldb.PostgresOptions{WriterLock: writerLock})
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	where := sqldb.Redact(dsn)
	if _, err := migrate.Apply(ctx, db, migrate.Table, migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("registry %s: %w", where, err)
	}
	return &Registry{db: db, where: where}, nil
}

func openSQLite(ctx context.Context, dir string) (*Registry, error) {
	path := filepath.Join(dir, FileName)
	// Create the file ourselves so it is 0600 from the first byte.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	f.Close()
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v; it holds key fingerprints, password hashes and the audit log and must not be readable by group or others (chmod 600 %s)",
			ErrUnsafeMode, path, fi.Mode().Perm(), path)
	}
	// Writers queue for up to a minute: an operator's script may enroll hundreds of
	// devices at once, each command with its own connection (600 at once waited ~12 s).
	db, err := sqldb.OpenSQLite(path, "busy_timeout(60000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("registry: open %s: %w", path, err)
	}
	if _, err := migrate.Apply(ctx, db, migrate.Table, migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("registry %s: %w", path, err)
	}
	// WAL side files inherit the umask; keep them private too.
	for _, side := range []string{"-wal", "-shm"} {
		_ = os.Chmod(path+side, 0o600)
	}
	return &Registry{db: db, where: path}, nil
}

// SetHub names the hub that uses this registry: its events and the sessions it records
// carry the name, so hubs sharing one registry tell theirs apart. Call it before the
// registry is used concurrently.
func (r *Registry) SetHub(name string) { r.hub = name }

// Hub is the name SetHub gave.
func (r *Registry) Hub() string { return r.hub }

// Where is the registry's file, or its DSN without the password, for messages.
func (r *Registry) Where() string { return r.where }

// Dialect is the database the registry is kept in.
func (r *Registry) Dialect() sqldb.Dialect { return r.db.Dialect() }

// Close releases the database.
func (r *Registry) Close() error { return r.db.Close() }

// Pool returns the reserved pool the registry allocates from.
func (r *Registry) Pool() *sockets.Pool { return r.pool.Load() }

func now() string { return time.Now().UTC().Format(timeLayout) }

func parseTime(s sql.NullString) *time.Time {
	if !s.Valid {
		return nil
	}
	t, err := time.Parse(timeLayout, s.String)
	if err != nil {
		return nil
	}
	return &t
}

func (r *Registry) withTx(ctx context.Context, fn func(*sqldb.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	return finishTx(tx, err, fn)
}

// withUnorderedTx runs fn in a transaction beside the writer lock (sqldb.BeginUnordered),
// for writes that no reader orders with the locked ones: sessions' starts and ends, which
// the change feed does not read (addEvent refuses a change event there). Sessions are
// the registry's most frequent writes; on a shared PostgreSQL registry they would
// otherwise queue, hub after hub, for one lock.
func (r *Registry) withUnorderedTx(ctx context.Context, fn func(*sqldb.Tx) error) error {
	tx, err := r.db.BeginUnordered(ctx)
	return finishTx(tx, err, fn)
}

// finishTx runs fn in tx, begun with err, and commits it, or rolls it back if fn fails.
func finishTx(tx *sqldb.Tx, err error, fn func(*sqldb.Tx) error) error {
	if err != nil {
		return fmt.Errorf("registry: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("registry: commit: %w", err)
	}
	return nil
}
