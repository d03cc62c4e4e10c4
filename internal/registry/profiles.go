package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// PutProfile stores (or replaces) a profile.
func (r *Registry) PutProfile(ctx context.Context, p *profile.Profile) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return upsertProfile(ctx, r.db, p)
}

// StoreProfile stores (or replaces) a profile as an operator's change, recorded in
// the audit log: EventProfileApplied when the live sessions that use it are to take it
// now (every hub closes them), EventProfileStored otherwise.
func (r *Registry) StoreProfile(ctx context.Context, p *profile.Profile, applyNow bool) error {
	if err := p.Validate(); err != nil {
		return err
	}
	kind := EventProfileStored
	if applyNow {
		kind = EventProfileApplied
	}
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if err := upsertProfile(ctx, tx, p); err != nil {
			return err
		}
		return r.addEvent(ctx, tx, Event{Kind: kind, Detail: p.Name})
	})
}

// upsertProfile writes p over any profile of its name, in a transaction or not.
func upsertProfile(ctx context.Context, db interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, p *profile.Profile) error {
	_, err := db.ExecContext(ctx, `INSERT INTO profiles(name, spec, updated_at) VALUES(?,?,?)
		ON CONFLICT(name) DO UPDATE SET spec=excluded.spec, updated_at=excluded.updated_at`,
		p.Name, string(p.Marshal()), now())
	if err != nil {
		return fmt.Errorf("registry: put profile %s: %w", p.Name, err)
	}
	return nil
}

// Profile returns the named profile. "default" is built in unless the operator stored one.
func (r *Registry) Profile(ctx context.Context, name string) (*profile.Profile, error) {
	return profileFrom(ctx, r.db, name)
}

// profileTx is Profile inside tx.
func (r *Registry) profileTx(ctx context.Context, tx *sqldb.Tx, name string) (*profile.Profile, error) {
	return profileFrom(ctx, tx, name)
}

func profileFrom(ctx context.Context, q rowQuerier, name string) (*profile.Profile, error) {
	var spec string
	err := q.QueryRowContext(ctx, `SELECT spec FROM profiles WHERE name=?`, name).Scan(&spec)
	if errors.Is(err, sql.ErrNoRows) {
		if name == profile.DefaultName {
			return profile.Default(), nil
		}
		return nil, fmt.Errorf("%w: profile %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: profile %s: %w", name, err)
	}
	p, err := profile.Parse([]byte(spec))
	if err != nil {
		return nil, fmt.Errorf("registry: stored profile %s: %w", name, err)
	}
	return p, nil
}

// Profiles lists stored profiles plus the built-in default if it was not overridden.
func (r *Registry) Profiles(ctx context.Context) ([]*profile.Profile, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT spec FROM profiles ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("registry: profiles: %w", err)
	}
	defer rows.Close()
	var out []*profile.Profile
	haveDefault := false
	for rows.Next() {
		var spec string
		if err := rows.Scan(&spec); err != nil {
			return nil, fmt.Errorf("registry: profiles: %w", err)
		}
		p, err := profile.Parse([]byte(spec))
		if err != nil {
			return nil, fmt.Errorf("registry: stored profile: %w", err)
		}
		haveDefault = haveDefault || p.Name == profile.DefaultName
		out = append(out, p)
	}
	if !haveDefault {
		out = append([]*profile.Profile{profile.Default()}, out...)
	}
	return out, rows.Err()
}
