package registry

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
)

func rawDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A registry made before versions were kept (the same tables, no schema_migrations)
// opens with its data and is recorded at the newest version.
func TestRegistryFromBeforeVersions(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	r := open(t, dir)
	if err := r.PutProfile(ctx, &profile.Profile{Name: "p", Reverse: map[string]int{"http": 80}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddDevice(ctx, "dev1", "p", newKey(t)); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// What version 1 was: no record of versions, nothing the later steps added.
	if _, err := rawDB(t, dir).Exec(`DROP TABLE schema_migrations; DROP TABLE device_certs; DROP TABLE soap_keys;
		DROP INDEX devices_via; ALTER TABLE devices DROP COLUMN via`); err != nil {
		t.Fatal(err)
	}
	r = open(t, dir)
	if _, err := r.Device(ctx, "dev1"); err != nil {
		t.Fatalf("dev1 lost: %v", err)
	}
	if v, err := r.Version(ctx); err != nil || v != SchemaVersion() {
		t.Fatalf("version %d (%v), want %d", v, err, SchemaVersion())
	}
}

// A registry a newer iotsafe migrated is refused, naming the file.
func TestNewerRegistryIsRefused(t *testing.T) {
	dir := t.TempDir()
	open(t, dir).Close()
	if _, err := rawDB(t, dir).Exec(`INSERT INTO schema_migrations VALUES (99, 'from the future', '2030-01-01T00:00:00.000000Z')`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dir, sockets.Config{})
	if !errors.Is(err, migrate.ErrTooNew) || !strings.Contains(err.Error(), FileName) || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("open of a newer registry: %v", err)
	}
}
