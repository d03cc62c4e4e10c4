package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// KeyJWT is the setting that holds the REST API's token signing keys when the
// registry is in PostgreSQL (package authn's key set, as JSON).
const KeyJWT = "jwt_keys"

// KeyConsoleCSRF is the setting that holds the operator console's CSRF key: every hub
// of a registry signs and checks the console's form tokens with it, so a form loaded
// from one hub may be posted to another (hubs behind one load balancer).
const KeyConsoleCSRF = "console_csrf_key"

// SharedSecret is a secret every hub of a PostgreSQL registry must hold alike, kept as a
// setting: today the token signing keys, so a token one hub issued verifies at every
// hub. On SQLite the keys stay in their own file in the data folder. Its methods are
// those of authn.KeyStore.
type SharedSecret struct {
	r   *Registry
	key string
}

// SharedSecret is the secret stored under key.
func (r *Registry) SharedSecret(key string) *SharedSecret { return &SharedSecret{r: r, key: key} }

// Where names the secret in messages (never its value).
func (s *SharedSecret) Where() string { return "setting " + s.key + " of the registry " + s.r.where }

// Read returns the secret, or an error wrapping os.ErrNotExist.
func (s *SharedSecret) Read(ctx context.Context) ([]byte, error) {
	var v string
	err := s.r.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE key=?`, s.key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", s.Where(), os.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return []byte(v), nil
}

// Create stores b when the secret is not set, or fails wrapping os.ErrExist (another hub
// created it first).
func (s *SharedSecret) Create(ctx context.Context, b []byte) error {
	return s.r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO settings(key, value) VALUES(?,?) ON CONFLICT(key) DO NOTHING`, s.key, string(b))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%s: %w", s.Where(), os.ErrExist)
		}
		return nil
	})
}

// Update replaces the secret with what fn makes of it, under the registry's writer lock.
func (s *SharedSecret) Update(ctx context.Context, fn func(old []byte) ([]byte, error)) error {
	return s.r.withTx(ctx, func(tx *sqldb.Tx) error {
		var v string
		err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE key=?`, s.key).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s: %w", s.Where(), os.ErrNotExist)
		}
		if err != nil {
			return err
		}
		b, err := fn([]byte(v))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE settings SET value=? WHERE key=?`, string(b), s.key)
		return err
	})
}

// Delete removes the secret (after it was moved out of the registry).
func (s *SharedSecret) Delete(ctx context.Context) error {
	return s.r.withTx(ctx, func(tx *sqldb.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM settings WHERE key=?`, s.key)
		return err
	})
}
