package migrate

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

func TestMain(m *testing.M) { pgscratch.Main(m) }

// eachDB runs f on a new SQLite file (opened as the registry does: writers queue at
// BEGIN) and on a new database of a real PostgreSQL server; open gives another handle
// on the same database, as another process would have.
func eachDB(t *testing.T, f func(t *testing.T, open func() *sqldb.DB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "db")
		f(t, func() *sqldb.DB {
			db, err := sqldb.OpenSQLite(path, "busy_timeout(60000)", "journal_mode(WAL)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgscratch.Shared(t).Database(t)
		f(t, func() *sqldb.DB {
			db, err := sqldb.OpenPostgres(context.Background(), dsn, sqldb.PostgresOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		})
	})
}

var steps = []Step{
	{1, "things", `CREATE TABLE things (name TEXT PRIMARY KEY)`},
	{2, "colour", `ALTER TABLE things ADD COLUMN colour TEXT NOT NULL DEFAULT ''`},
}

func count(t *testing.T, db *sqldb.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Steps apply in order, once; a later build's new step applies on top of the data.
func TestApplyInOrderOnce(t *testing.T) { eachDB(t, testApplyInOrderOnce) }

func testApplyInOrderOnce(t *testing.T, open func() *sqldb.DB) {
	ctx := context.Background()
	db := open()
	if got, err := Apply(ctx, db, Table, steps[:1]); err != nil || len(got) != 1 {
		t.Fatalf("first apply: %v %v", got, err)
	}
	if _, err := db.Exec(`INSERT INTO things VALUES ('a')`); err != nil {
		t.Fatal(err)
	}
	if got, err := Apply(ctx, db, Table, steps); err != nil || len(got) != 1 || got[0] != 2 {
		t.Fatalf("upgrade: applied %v, %v", got, err)
	}
	if got, err := Apply(ctx, db, Table, steps); err != nil || len(got) != 0 {
		t.Fatalf("again: applied %v, %v", got, err)
	}
	if v, _ := Version(ctx, db, Table); v != 2 || count(t, db, `SELECT COUNT(*) FROM things WHERE colour = ''`) != 1 {
		t.Fatalf("version %d, or the row was lost", v)
	}
}

// A database a newer build migrated is refused, and left as it was.
func TestNewerIsRefused(t *testing.T) { eachDB(t, testNewerIsRefused) }

func testNewerIsRefused(t *testing.T, open func() *sqldb.DB) {
	ctx := context.Background()
	db := open()
	if _, err := Apply(ctx, db, Table, steps); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(ctx, db, Table, steps[:1])
	if !errors.Is(err, ErrTooNew) || !strings.Contains(err.Error(), "at version 2, this iotsafe knows up to 1") {
		t.Fatalf("an older build: %v", err)
	}
	if v, _ := Version(ctx, db, Table); v != 2 {
		t.Fatalf("version %d after the refusal", v)
	}
}

// A step that fails leaves the version before it, with nothing of the step kept, and
// says which step failed.
func TestFailedStepLeavesThePreviousVersion(t *testing.T) {
	eachDB(t, testFailedStepLeavesThePreviousVersion)
}

func testFailedStepLeavesThePreviousVersion(t *testing.T, open func() *sqldb.DB) {
	ctx := context.Background()
	db := open()
	broken := append(append([]Step(nil), steps...), Step{3, "broken", `CREATE TABLE half (x INTEGER); INSERT INTO nowhere VALUES (1)`})
	_, err := Apply(ctx, db, Table, broken)
	if err == nil || !strings.Contains(err.Error(), "migration 3 (broken)") {
		t.Fatalf("broken step: %v", err)
	}
	if v, _ := Version(ctx, db, Table); v != 2 {
		t.Fatalf("version %d, want 2", v)
	}
	if _, err := db.ExecContext(ctx, `SELECT COUNT(*) FROM half`); err == nil {
		t.Fatal("the failed step's first statement was kept")
	}
}

// Steps numbered out of order are a programming error, caught before anything runs.
func TestMisnumberedSteps(t *testing.T) {
	eachDB(t, func(t *testing.T, open func() *sqldb.DB) {
		if _, err := Apply(context.Background(), open(), Table, []Step{{2, "skipped one", `SELECT 1`}}); err == nil {
			t.Fatal("a list starting at 2 was applied")
		}
	})
}

// Processes that open a new database at the same moment apply each step once.
func TestConcurrentApply(t *testing.T) { eachDB(t, testConcurrentApply) }

func testConcurrentApply(t *testing.T, open func() *sqldb.DB) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Apply(context.Background(), open(), Table, steps)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, open(), `SELECT COUNT(*) FROM schema_migrations`); n != len(steps) {
		t.Fatalf("%d records, want %d", n, len(steps))
	}
}
