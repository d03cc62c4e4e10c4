package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
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

const table = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TEXT NOT NULL
)`

// Latest is the newest version of steps (0 for none).
func Latest(steps []Step) int {
	if len(steps) == 0 {
		return 0
	}
	return steps[len(steps)-1].Version
}

// Apply brings db to the newest of steps and returns the versions it applied. Each step
// runs in a transaction that first re-reads the version: where writers queue at BEGIN
// (SQLite immediate transactions), two processes opening a new database at once apply
// each step once.
func Apply(ctx context.Context, db *sql.DB, steps []Step) (applied []int, err error) {
	for i, s := range steps {
		if s.Version != i+1 {
			return nil, fmt.Errorf("migrate: step %q is numbered %d, want %d", s.Name, s.Version, i+1)
		}
	}
	if _, err := db.ExecContext(ctx, table); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	for _, s := range steps {
		done, err := apply(ctx, db, s, Latest(steps))
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

func apply(ctx context.Context, db *sql.DB, s Step, latest int) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	current, err := version(ctx, tx)
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
	if _, err := tx.ExecContext(ctx, s.SQL); err != nil {
		return false, err
	}
	at := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, s.Version, s.Name, at); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func version(ctx context.Context, q queryer) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}

// Version is db's schema version (0 before any step).
func Version(ctx context.Context, db *sql.DB) (int, error) {
	v, err := version(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("migrate: schema version: %w", err)
	}
	return v, nil
}
