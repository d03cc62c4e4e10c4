package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Join tokens: an operator makes one for a batch of devices (a profile, a name pattern,
// a number of uses, a lifetime); each device makes its own key pair and enrols its
// public key with the token over SSH (sshd's join user), so no private key is ever made
// or kept anywhere but on the device.

// Audit events of join tokens.
const (
	EventJoinTokenAdded   = "join_token_added"
	EventJoinTokenRevoked = "join_token_revoked"
	EventJoined           = "joined" // a device enrolled its key with a token
	EventJoinRefused      = "join_refused"
)

// ErrJoinRefused is a join the token does not allow; the message says why, for the
// device.
var ErrJoinRefused = errors.New("join refused")

// JoinToken is a token as listed (never the token itself).
type JoinToken struct {
	ID        int64      `json:"id"`
	Label     string     `json:"label,omitempty"`
	Profile   string     `json:"profile"`
	Pattern   string     `json:"names"`
	UsesLeft  int        `json:"uses_left"`
	Used      int        `json:"used"`
	ExpiresAt time.Time  `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// ValidNamePattern checks a join token's name pattern: a shell glob (path.Match) that
// matches at least the device name form, such as 'sensor-*'.
func ValidNamePattern(p string) error {
	if p == "" {
		return errors.New("a name pattern is needed, such as 'sensor-*'")
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("name pattern %q: %v", p, err)
	}
	return nil
}

// AddJoinToken stores a join token by its hash.
func (r *Registry) AddJoinToken(ctx context.Context, hash, label, profileName, pattern string, uses int, expires time.Time) (int64, error) {
	if err := ValidNamePattern(pattern); err != nil {
		return 0, fmt.Errorf("registry: %w", err)
	}
	if uses < 1 {
		return 0, errors.New("registry: a join token is for at least one use")
	}
	if _, err := r.Profile(ctx, profileName); err != nil {
		return 0, err
	}
	var id int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		if err := tx.QueryRowContext(ctx, `INSERT INTO join_tokens(hash, label, profile, pattern, uses_left, expires_at, created_at)
			VALUES(?,?,?,?,?,?,?) RETURNING id`, hash, label, profileName, pattern, uses, expires.UTC().Format(timeLayout), now()).Scan(&id); err != nil {
			return fmt.Errorf("registry: add join token: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventJoinTokenAdded, Detail: fmt.Sprintf("token %d: profile %s, names %s, %d uses, until %s", id, profileName, pattern, uses, expires.UTC().Format(time.RFC3339))})
	})
	return id, err
}

// RevokeJoinToken refuses token id from now on.
func (r *Registry) RevokeJoinToken(ctx context.Context, id int64) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE join_tokens SET revoked_at=? WHERE id=? AND revoked_at IS NULL`, now(), id)
		if err != nil {
			return fmt.Errorf("registry: revoke join token: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: join token %d (or it is revoked already)", ErrNotFound, id)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventJoinTokenRevoked, Detail: fmt.Sprintf("token %d", id)})
	})
}

// JoinTokens lists the join tokens, newest first.
func (r *Registry) JoinTokens(ctx context.Context) ([]JoinToken, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT id, label, profile, pattern, uses_left, used, expires_at, created_at, revoked_at FROM join_tokens ORDER BY id DESC`)
	if err != nil {
		return nil, fmt.Errorf("registry: join tokens: %w", err)
	}
	defer rows.Close()
	out := []JoinToken{}
	for rows.Next() {
		var t JoinToken
		var exp, created string
		var revoked sql.NullString
		if err := rows.Scan(&t.ID, &t.Label, &t.Profile, &t.Pattern, &t.UsesLeft, &t.Used, &exp, &created, &revoked); err != nil {
			return nil, err
		}
		t.ExpiresAt, _ = time.Parse(timeLayout, exp)
		t.CreatedAt, _ = time.Parse(timeLayout, created)
		t.RevokedAt = parseTime(revoked)
		out = append(out, t)
	}
	return out, rows.Err()
}

// Join enrols device name with key under the join token whose hash is hash, in one
// transaction: the token must be live (not revoked, not expired, a use left), name must
// match its pattern and be free, key must be nobody's. The refusals are ErrJoinRefused
// (or ErrExists) with what the device should be told; nothing is enrolled then.
func (r *Registry) Join(ctx context.Context, hash, name string, key ssh.PublicKey, remote string) (*Device, error) {
	if err := checkNewDevice(name, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJoinRefused, err)
	}
	var tokenID int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var profName, pattern, exp string
		var uses int
		var revoked sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT id, profile, pattern, uses_left, expires_at, revoked_at FROM join_tokens WHERE hash=?`, hash).
			Scan(&tokenID, &profName, &pattern, &uses, &exp, &revoked)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: the token is not one of this hub's", ErrJoinRefused)
		case err != nil:
			return fmt.Errorf("registry: join: %w", err)
		case revoked.Valid:
			return fmt.Errorf("%w: the token was revoked", ErrJoinRefused)
		case exp <= now():
			return fmt.Errorf("%w: the token expired at %s", ErrJoinRefused, exp)
		case uses < 1:
			return fmt.Errorf("%w: the token is used up", ErrJoinRefused)
		}
		if ok, _ := path.Match(pattern, name); !ok {
			return fmt.Errorf("%w: the token is for names %s, not %s", ErrJoinRefused, pattern, name)
		}
		prof, err := r.profileTx(ctx, tx, profName)
		if err != nil {
			return err
		}
		if err := r.addDeviceTx(ctx, tx, name, prof, key, nil); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE join_tokens SET uses_left=uses_left-1, used=used+1 WHERE id=?`, tokenID); err != nil {
			return fmt.Errorf("registry: join: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventJoined, Detail: fmt.Sprintf("with join token %d, key %s", tokenID, ssh.FingerprintSHA256(key)), Remote: remote})
	})
	if err != nil {
		return nil, err
	}
	return r.Device(ctx, name)
}
