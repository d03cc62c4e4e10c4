package registry

import (
	"context"
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
	{"device_certs", ""}, {"soap_keys", ""}, {"hostkey_notes", ""}, {"group_info", ""},
	{"join_tokens", "id"}, {"ssh_cas", "id"}, {"ssh_certs", "id"}, {"ssh_offers", ""},
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
			n, err := sqldb.CopyTable(ctx, src, tx, t.name, nil)
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
			if t.identity != "" {
				if err := sqldb.ContinueIdentity(ctx, tx, t.name, t.identity); err != nil {
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
