package pgscratch

import (
	"context"
	"testing"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// The scratch server survives a restart and keeps what was written before it.
func TestServerRestartKeepsData(t *testing.T) {
	s := Start(t)
	dsn := s.Database(t)
	ctx := context.Background()
	db, err := sqldb.OpenPostgres(ctx, dsn, sqldb.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO kv VALUES (?, ?)`, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	var v string
	// The pool's old connection died with the server; database/sql dials again.
	for range 2 {
		if err = db.QueryRowContext(ctx, `SELECT v FROM kv WHERE k=?`, "a").Scan(&v); err == nil {
			break
		}
	}
	if err != nil || v != "1" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
}
