package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// tables are the registry's tables, parents before the tables that refer to them, and
// the identity column of each that has one. A test holds this list to the schema.
var tables = []struct{ name, identity string }{
	{"settings", ""}, {"profiles", ""}, {"devices", ""}, {"keys", ""}, {"sockets", ""},
	{"events", "id"}, {"device_groups", ""}, {"grants", "id"}, {"accounts", "id"},
	{"tokens", "id"}, {"login_sessions", ""}, {"device_secrets", ""}, {"device_data", ""},
	{"device_certs", ""}, {"soap_keys", ""},
}

// notCopied are tables a copy leaves behind: a lease belongs to the hub (or command)
// holding the database it is in.
var notCopied = map[string]bool{"leases": true}

// ErrNotEmpty means a copy's destination already holds data.
var ErrNotEmpty = errors.New("registry: the destination is not empty")

// TableCount is how many rows of a table a copy moved.
type TableCount struct {
	Table string `json:"table"`
	Rows  int    `json:"rows"`
}

// CopyTo copies every row of r into dst, which must be empty (as Open leaves a new
// database) and at the same schema version: SQLite to PostgreSQL or back. It reads r in
// one transaction (no registry writer runs meanwhile) and writes dst in one, which
// it commits only once every table's count matches; identity counters continue after
// the copied ids. progress, if set, is told of each table as it is done.
func (r *Registry) CopyTo(ctx context.Context, dst *Registry, progress func(TableCount)) ([]TableCount, error) {
	if r.where == dst.where {
		return nil, errors.New("registry: source and destination are the same registry")
	}
	sv, err := r.Version(ctx)
	if err != nil {
		return nil, err
	}
	if dv, err := dst.Version(ctx); err != nil || dv != sv {
		return nil, fmt.Errorf("registry: the destination is at schema version %d, the source at %d (%v)", dv, sv, err)
	}
	src, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("registry: copy: %w", err)
	}
	defer src.Rollback()
	var out []TableCount
	err = dst.withTx(ctx, func(tx *sqldb.Tx) error {
		var held []string
		for _, t := range tables[1:] { // settings: Open has recorded the pool there
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				held = append(held, fmt.Sprintf("%d %s", n, t.name))
			}
		}
		if len(held) > 0 {
			return fmt.Errorf("%w: it holds %s; copy into a new, empty database", ErrNotEmpty, strings.Join(held, ", "))
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM settings`); err != nil {
			return err
		}
		for _, t := range tables {
			n, err := copyTable(ctx, src, tx, t.name)
			if err != nil {
				return fmt.Errorf("registry: copying %s: %w", t.name, err)
			}
			var have int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&have); err != nil {
				return err
			}
			if have != n {
				return fmt.Errorf("registry: copying %s: read %d rows, the destination holds %d", t.name, n, have)
			}
			if t.identity != "" && dst.db.Dialect() == sqldb.Postgres {
				// Explicit ids leave the identity's sequence behind: the next insert would
				// collide with a copied row.
				if _, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('`+t.name+`', '`+t.identity+`'),
					COALESCE((SELECT MAX(`+t.identity+`) FROM `+t.name+`), 0) + 1, false)`); err != nil {
					return err
				}
			}
			c := TableCount{Table: t.name, Rows: n}
			out = append(out, c)
			if progress != nil {
				progress(c)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, dst.loadPool(ctx, r.Pool().Config())
}

// copyTable copies one table's rows, many per INSERT.
func copyTable(ctx context.Context, src, dst *sqldb.Tx, table string) (int, error) {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	// Well under both databases' limits on parameters per statement.
	perInsert := max(1, 4000/len(cols))
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
	var batch []any
	n, pending := 0, 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		q := `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) VALUES ` +
			strings.TrimSuffix(strings.Repeat(row+",", pending), ",")
		if _, err := dst.ExecContext(ctx, q, batch...); err != nil {
			return err
		}
		batch, pending = batch[:0], 0
		return nil
	}
	for rows.Next() {
		vals, err := scanAny(rows, len(cols))
		if err != nil {
			return n, err
		}
		batch = append(batch, vals...)
		pending++
		n++
		if pending == perInsert {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// scanAny reads the current row's n columns as the driver gives them.
func scanAny(rows *sql.Rows, n int) ([]any, error) {
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, rows.Scan(ptrs...)
}

// Info is what 'iotsafe registry info' shows.
type Info struct {
	Where    string       `json:"where"`
	Database string       `json:"database"`
	Version  int          `json:"schema_version"`
	Tables   []TableCount `json:"tables"`
	// Hubs serving from the registry now (PostgreSQL), by name.
	Hubs map[string]HubInfo `json:"hubs,omitempty"`
}

// Info says where the registry is and how many rows each table holds.
func (r *Registry) Info(ctx context.Context) (Info, error) {
	v, err := r.Version(ctx)
	if err != nil {
		return Info{}, err
	}
	ri := Info{Where: r.where, Database: r.db.Dialect().String(), Version: v}
	for _, t := range tables {
		var n int
		if err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t.name).Scan(&n); err != nil {
			return Info{}, fmt.Errorf("registry: %s: %w", t.name, err)
		}
		ri.Tables = append(ri.Tables, TableCount{Table: t.name, Rows: n})
	}
	ri.Hubs, err = r.LiveHubs(ctx)
	return ri, err
}
