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
