package migrate

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // a real SQLite, as the registry and the store use
)

// openDB opens an SQLite file as the registry does: writers queue at BEGIN.
func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(60000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var steps = []Step{
	{1, "things", `CREATE TABLE things (name TEXT PRIMARY KEY)`},
	{2, "colour", `ALTER TABLE things ADD COLUMN colour TEXT NOT NULL DEFAULT ''`},
}

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Steps apply in order, once; a later build's new step applies on top of the data.
func TestApplyInOrderOnce(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	if got, err := Apply(ctx, db, steps[:1]); err != nil || len(got) != 1 {
		t.Fatalf("first apply: %v %v", got, err)
	}
	if _, err := db.Exec(`INSERT INTO things VALUES ('a')`); err != nil {
		t.Fatal(err)
	}
	if got, err := Apply(ctx, db, steps); err != nil || len(got) != 1 || got[0] != 2 {
		t.Fatalf("upgrade: applied %v, %v", got, err)
	}
	if got, err := Apply(ctx, db, steps); err != nil || len(got) != 0 {
		t.Fatalf("again: applied %v, %v", got, err)
	}
	if v, _ := Version(ctx, db); v != 2 || count(t, db, `SELECT COUNT(*) FROM things WHERE colour = ''`) != 1 {
		t.Fatalf("version %d, or the row was lost", v)
	}
}

// A database a newer build migrated is refused, and left as it was.
func TestNewerIsRefused(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	if _, err := Apply(ctx, db, steps); err != nil {
		t.Fatal(err)
	}
	_, err := Apply(ctx, db, steps[:1])
	if !errors.Is(err, ErrTooNew) || !strings.Contains(err.Error(), "at version 2, this iotsafe knows up to 1") {
		t.Fatalf("an older build: %v", err)
	}
	if v, _ := Version(ctx, db); v != 2 {
		t.Fatalf("version %d after the refusal", v)
	}
}

// A step that fails leaves the version before it, with nothing of the step kept, and
// says which step failed.
func TestFailedStepLeavesThePreviousVersion(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	broken := append(append([]Step(nil), steps...), Step{3, "broken", `CREATE TABLE half (x INTEGER); INSERT INTO nowhere VALUES (1)`})
	_, err := Apply(ctx, db, broken)
	if err == nil || !strings.Contains(err.Error(), "migration 3 (broken)") {
		t.Fatalf("broken step: %v", err)
	}
	if v, _ := Version(ctx, db); v != 2 {
		t.Fatalf("version %d, want 2", v)
	}
	if n := count(t, db, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'`); n != 0 {
		t.Fatal("the failed step's first statement was kept")
	}
}

// Steps numbered out of order are a programming error, caught before anything runs.
func TestMisnumberedSteps(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "db"))
	if _, err := Apply(context.Background(), db, []Step{{2, "skipped one", `SELECT 1`}}); err == nil {
		t.Fatal("a list starting at 2 was applied")
	}
}

// Processes that open a new database at the same moment apply each step once.
func TestConcurrentApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Apply(context.Background(), openDB(t, path), steps)
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
	if n := count(t, openDB(t, path), `SELECT COUNT(*) FROM schema_migrations`); n != len(steps) {
		t.Fatalf("%d records, want %d", n, len(steps))
	}
}
