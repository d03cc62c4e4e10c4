package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/sockets"
	_ "modernc.org/sqlite" // pure-Go SQLite: no cgo toolchain needed on the hub
)

// Sentinel errors callers branch on.
var (
	ErrNotFound = errors.New("registry: not found")
	ErrExists   = errors.New("registry: already exists")
	// ErrUnsafeMode means the database file is readable by others than its owner.
	ErrUnsafeMode = errors.New("registry: unsafe file mode")
)

// FileName is the SQLite file inside the data folder.
const FileName = "registry.db"

const timeLayout = "2006-01-02T15:04:05.000000Z"

// Registry is the device registry. It is safe for concurrent use.
type Registry struct {
	db   *sql.DB
	pool atomic.Pointer[sockets.Pool]
}

// Open opens (creating if needed, mode 0600) the SQLite registry in dir. The registry is
// the one source of the reserved pool: the first open records want (defaults applied);
// later opens use the recorded pool, and fail with ErrPoolMismatch if want sets a field
// (CIDR or PortBase) to something else. An unset want means "whatever is recorded".
func Open(ctx context.Context, dir string, want sockets.Config) (*Registry, error) {
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
	q := url.Values{}
	// Writers queue for up to a minute: an operator's script may enroll hundreds of
	// devices at once, each command with its own connection (600 at once waited ~12 s).
	q.Add("_pragma", "busy_timeout(60000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_txlock", "immediate") // writers queue at BEGIN instead of failing at COMMIT
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("registry: open %s: %w", path, err)
	}
	if _, err := migrate.Apply(ctx, db, migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("registry %s: %w", path, err)
	}
	// WAL side files inherit the umask; keep them private too.
	for _, side := range []string{"-wal", "-shm"} {
		_ = os.Chmod(path+side, 0o600)
	}
	r := &Registry{db: db}
	if err := r.loadPool(ctx, want); err != nil {
		db.Close()
		return nil, err
	}
	return r, nil
}

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

func (r *Registry) withTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
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
