package lab

import (
	"context"
	"fmt"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// MustBeEmptyDatabase refuses an operator's PostgreSQL database (given with --registry)
// that already holds tables: a lab fills the database it is given, and must not mix its
// devices and notifications into anything there.
func MustBeEmptyDatabase(ctx context.Context, dsn string) error {
	db, err := sqldb.OpenPostgres(ctx, dsn, sqldb.PostgresOptions{MaxConns: 1})
	if err != nil {
		return fmt.Errorf("--registry: %w", err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&tables); err != nil {
		return fmt.Errorf("--registry %s: %w", sqldb.Redact(dsn), err)
	}
	if tables > 0 {
		return fmt.Errorf("--registry %s must be an empty database (it has %d tables): the lab fills it with its own devices and data", sqldb.Redact(dsn), tables)
	}
	return nil
}
