package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iotsafe/iotsafe/internal/registry"
	"github.com/iotsafe/iotsafe/internal/sockets"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// A backup whose registry a newer iotsafe wrote is refused before the data folder is
// touched, naming both versions.
func TestRestoreRefusesANewerSchema(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	reg, err := registry.Open(ctx, data, sockets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg.Close()
	db, err := sqldb.OpenSQLite(filepath.Join(data, registry.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, 'from the future', '2030-01-01')`, registry.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	dir := filepath.Join(t.TempDir(), "backup")
	var out, errs bytes.Buffer
	if code := Execute(ctx, []string{"backup", dir, "--data", data}, nil, &out, &errs); code != 0 {
		t.Fatalf("backup: %s", errs.String())
	}
	target := t.TempDir()
	errs.Reset()
	if code := Execute(ctx, []string{"restore", dir, "--data", target}, nil, &out, &errs); code == 0 || !strings.Contains(errs.String(), "newer than this iotsafe's") {
		t.Fatalf("restore of a newer registry: exit %d\n%s", code, errs.String())
	}
	if entries, _ := os.ReadDir(target); len(entries) > 1 { // the lock only
		t.Fatalf("the data folder was touched: %v", entries)
	}
}

// A restore reads the replaced registry for its revocations without changing it: one
// at an older schema stays at that version in the folder moved aside (an operator going
// back to the older iotsafe can use it), and its revocation still carries over.
func TestRestoreLeavesTheReplacedRegistryAsItWas(t *testing.T) {
	ctx := context.Background()
	run := func(args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if code := Execute(ctx, args, nil, &out, &errs); code != 0 {
			t.Fatalf("iotsafe %v: exit %d\n%s%s", args, code, out.String(), errs.String())
		}
		return out.String()
	}
	data := t.TempDir()
	run("init", "--data", data)
	run("device", "add", "dev1", "--keygen", t.TempDir(), "--data", data)
	dir := filepath.Join(t.TempDir(), "backup")
	run("backup", dir, "--data", data)
	run("device", "revoke", "dev1", "--data", data)
	// The folder's registry as an older iotsafe left it: one schema step less.
	db, err := sqldb.OpenSQLite(filepath.Join(data, registry.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`DROP TABLE ssh_offers`, `DELETE FROM schema_migrations WHERE version = 15`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	out := run("restore", "--force", dir, "--data", data)
	if !strings.Contains(out, "revoked again: dev1") {
		t.Fatalf("restore:\n%s", out)
	}
	asides, _ := filepath.Glob(data + ".replaced-*")
	if len(asides) != 1 {
		t.Fatalf("moved aside: %v", asides)
	}
	t.Cleanup(func() { os.RemoveAll(asides[0]) })
	db, err = sqldb.OpenSQLite(filepath.Join(asides[0], registry.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&v); err != nil || v != 14 {
		t.Fatalf("the replaced registry is at version %d (%v), want 14: the restore migrated it", v, err)
	}
}
