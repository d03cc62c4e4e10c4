package telemetry

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
)

// A store a newer iotsafe migrated is refused at open, naming the file; the hub then
// does not start rather than misread it.
func TestNewerStoreIsRefused(t *testing.T) {
	if pgscratch.OnPostgres() {
		t.Skip("reads the SQLite file directly")
	}
	dir := t.TempDir()
	open(t, dir, Config{}).Close()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (7, 'from the future', '2030-01-01T00:00:00.000000Z')`); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), dir, Config{}, Options{})
	if !errors.Is(err, migrate.ErrTooNew) || !strings.Contains(err.Error(), FileName) {
		t.Fatalf("open of a newer store: %v", err)
	}
}
