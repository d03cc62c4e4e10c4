package registry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/migrate"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// A registry made before versions were kept (the same tables, no schema_migrations)
// opens with its data and is recorded at the newest version.
func TestRegistryFromBeforeVersions(t *testing.T) {
	sqliteOnly(t)
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
	rawExec(t, dir, `DROP TABLE schema_migrations; DROP TABLE device_certs; DROP TABLE soap_keys; DROP TABLE leases;
		DROP INDEX devices_via; DROP INDEX devices_created; DROP INDEX devices_hub; ALTER TABLE devices DROP COLUMN via;
		ALTER TABLE devices DROP COLUMN hub; ALTER TABLE events DROP COLUMN hub; ALTER TABLE accounts DROP COLUMN token_epoch`)
	r = open(t, dir)
	if _, err := r.Device(ctx, "dev1"); err != nil {
		t.Fatalf("dev1 lost: %v", err)
	}
	if v, err := r.Version(ctx); err != nil || v != SchemaVersion() {
		t.Fatalf("version %d (%v), want %d", v, err, SchemaVersion())
	}
}

// A registry a newer iotsafe migrated is refused, naming the file or database.
func TestNewerRegistryIsRefused(t *testing.T) {
	dir := t.TempDir()
	open(t, dir).Close()
	rawExec(t, dir, `INSERT INTO schema_migrations VALUES (99, 'from the future', '2030-01-01T00:00:00.000000Z')`)
	_, err := Open(context.Background(), location(t, dir), sockets.Config{})
	where := FileName
	if pgscratch.OnPostgres() {
		where = sqldb.Redact(location(t, dir))
	}
	if !errors.Is(err, migrate.ErrTooNew) || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("open of a newer registry: %v", err)
	}
}
