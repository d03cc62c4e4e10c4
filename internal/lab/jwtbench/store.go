package jwtbench

import (
	"context"
	"fmt"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/pgscratch"
	"github.com/iotsafe/iotsafe/internal/sqldb"
	"github.com/iotsafe/iotsafe/internal/telemetry"
)

// openStore readies the PostgreSQL database the hub will keep its registry and
// notifications in, if Options asks for one, and says where the store is.
func (r *runner) openStore(ctx context.Context) (string, error) {
	switch r.o.Store {
	case StoreSQLite:
		return "SQLite (the hub's data folder)", nil
	case StorePostgres:
	default:
		return "", fmt.Errorf("store %q: not one of %v", r.o.Store, Stores)
	}
	if r.o.DSN != "" {
		if err := lab.MustBeEmptyDatabase(ctx, r.o.DSN); err != nil {
			return "", err
		}
		r.dsn = r.o.DSN
		return "PostgreSQL " + sqldb.Redact(r.o.DSN), nil
	}
	r.o.Progress.Note("starting a scratch PostgreSQL server (durable: PostgreSQL's own fsync settings)...")
	pg, err := pgscratch.NewWith(pgscratch.Options{Durable: true})
	if err != nil {
		return "", err
	}
	dsn, err := pg.CreateDatabase()
	if err != nil {
		pg.Close()
		return "", err
	}
	r.pg, r.dsn = pg, dsn
	return "PostgreSQL (a scratch server on this machine, started by the lab)", nil
}

func (r *runner) closeStore() {
	if r.pg != nil {
		r.pg.Close()
	}
}

// storeLocation is where telemetry.Open finds the store: the data folder or the DSN.
func (r *runner) storeLocation() string {
	if r.dsn != "" {
		return r.dsn
	}
	return r.data.Dir
}

// emptyStore removes every notification before a start of the hub, so every start
// begins alike (the registry and its devices stay).
func (r *runner) emptyStore(ctx context.Context) error {
	if err := telemetry.Empty(ctx, r.storeLocation()); err != nil {
		return fmt.Errorf("emptying the notification store: %w", err)
	}
	return nil
}
