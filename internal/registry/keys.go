package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// AddKey gives a device another key, for rotation: both are accepted until the old one
// is revoked with RevokeKey. A key that belongs to any device, or a revoked device, is
// refused.
func (r *Registry) AddKey(ctx context.Context, device string, key ssh.PublicKey) error {
	fp := ssh.FingerprintSHA256(key)
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var revoked sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT revoked_at FROM devices WHERE name=?`, device).Scan(&revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: device %q", ErrNotFound, device)
		}
		if err != nil {
			return fmt.Errorf("registry: add key: %w", err)
		}
		if revoked.Valid {
			return fmt.Errorf("device %q is revoked: a new key would still be refused; remove the device and enroll it again", device)
		}
		var owner string
		if tx.QueryRowContext(ctx, `SELECT device FROM keys WHERE fingerprint=?`, fp).Scan(&owner) == nil {
			return fmt.Errorf("%w: key %s belongs to device %q", ErrExists, fp, owner)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO keys(fingerprint, device, pubkey, created_at) VALUES(?,?,?,?)`,
			fp, device, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))), now()); err != nil {
			return fmt.Errorf("registry: add key: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventKeyAdded, Detail: "key " + fp})
	})
}

// ErrLastKey refuses to revoke a device's only usable key: that is revoking the device.
var ErrLastKey = errors.New("it is the device's only active key: add its new key first ('iotsafe device key add'), or revoke the whole device ('iotsafe device revoke')")

// RevokeKey refuses one key of a device from now on; its other keys keep working.
func (r *Registry) RevokeKey(ctx context.Context, device, fingerprint string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var revoked sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT revoked_at FROM keys WHERE device=? AND fingerprint=?`, device, fingerprint).Scan(&revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: key %s of device %q (see 'iotsafe device show %s')", ErrNotFound, fingerprint, device, device)
		}
		if err != nil {
			return fmt.Errorf("registry: revoke key: %w", err)
		}
		if revoked.Valid {
			return nil // already revoked: idempotent
		}
		var active int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM keys WHERE device=? AND revoked_at IS NULL`, device).Scan(&active); err != nil {
			return fmt.Errorf("registry: revoke key: %w", err)
		}
		if active <= 1 {
			return fmt.Errorf("key %s of device %q: %w", fingerprint, device, ErrLastKey)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at=? WHERE fingerprint=?`, now(), fingerprint); err != nil {
			return fmt.Errorf("registry: revoke key: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Device: device, Kind: EventKeyRevoked, Detail: "key " + fingerprint})
	})
}
