package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Step is one numbered change of a schema. Steps are appended with the next number and
// never edited once released.
type Step struct {
	Version int
	Name    string
	SQL     string
}

// ErrTooNew means the database was migrated by a newer build: this one would misread
// it, so it refuses to use it.
var ErrTooNew = errors.New("the schema is newer than this iotsafe")

// Table is where the registry records its versions; another list of steps sharing a
// PostgreSQL database with it (the telemetry store) records its own in another table.
const Table = "schema_migrations"

func createTable(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TEXT NOT NULL
)`
}

// Latest is the newest version of steps (0 for none).
func Latest(steps []Step) int {
	if len(steps) == 0 {
		return 0
	}
	return steps[len(steps)-1].Version
}

// Apply brings db to the newest of steps, recording versions in table, and returns the
// versions it applied. Each step runs in a transaction that first re-reads the version
// under a lock (SQLite: the immediate transaction; PostgreSQL: an advisory lock named
// after the table), so several processes opening a new database at once apply each
// step once. Schema text is written in SQLite's spelling (package sqldb rewrites it).
func Apply(ctx context.Context, db *sqldb.DB, table string, steps []Step) (applied []int, err error) {
	for i, s := range steps {
		if s.Version != i+1 {
			return nil, fmt.Errorf("migrate: step %q is numbered %d, want %d", s.Name, s.Version, i+1)
		}
	}
	for _, s := range steps {
		done, err := applyRetrying(ctx, db, table, s, Latest(steps))
		if errors.Is(err, ErrTooNew) {
			return applied, err
		}
		if err != nil {
			return applied, fmt.Errorf("migration %d (%s): %w", s.Version, s.Name, err)
		}
		if done {
			applied = append(applied, s.Version)
		}
	}
	return applied, nil
}

// applyRetrying is apply, again when SQLite answered busy without waiting: several
// processes opening a new file at once (admin commands started together on a new data
// folder) meet while one of them turns its journal into WAL. A minute at most, as the
// registry's busy timeout.
func applyRetrying(ctx context.Context, db *sqldb.DB, table string, s Step, latest int) (bool, error) {
	deadline := time.Now().Add(time.Minute)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		done, err := apply(ctx, db, table, s, latest)
		if !sqldb.IsBusy(err) || time.Now().After(deadline) {
			return done, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func apply(ctx context.Context, db *sqldb.DB, table string, s Step, latest int) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if db.Dialect() == sqldb.Postgres {
		// Creating the same table from two sessions at once fails in PostgreSQL even
		// with IF NOT EXISTS: take the lock first.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, lockKey(table)); err != nil {
			return false, err
		}
	}
	if err := db.ExecSchema(ctx, tx, createTable(table)); err != nil {
		return false, err
	}
	current, err := version(ctx, tx, table)
	if err != nil {
		return false, err
	}
	if current > latest {
		return false, fmt.Errorf("%w: it is at version %d, this iotsafe knows up to %d; run the newer iotsafe, or restore a copy taken before the upgrade",
			ErrTooNew, current, latest)
	}
	if current >= s.Version {
		return false, nil
	}
	if err := db.ExecSchema(ctx, tx, s.SQL); err != nil {
		return false, err
	}
	at := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, name, applied_at) VALUES (?, ?, ?)`, s.Version, s.Name, at); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sqldb.Row
}

// lockKey is the advisory lock of a table's migrations.
func lockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("iotsafe.migrate." + table))
	return int64(h.Sum64())
}

func version(ctx context.Context, q queryer, table string) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(version) FROM `+table).Scan(&v); err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}

// Version is db's schema version as recorded in table (0 before any step).
func Version(ctx context.Context, db *sqldb.DB, table string) (int, error) {
	v, err := version(ctx, db, table)
	if err != nil {
		return 0, fmt.Errorf("migrate: schema version: %w", err)
	}
	return v, nil
}
