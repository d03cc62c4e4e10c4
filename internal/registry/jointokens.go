package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path"
	"strings"
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
	EventApproved         = "approved" // a device that joined pending approval, approved
)

// The approval modes of a join token.
const (
	ApproveAuto   = "auto"   // a device joins and connects at once
	ApproveManual = "manual" // it joins pending: refused until 'iotsafe device approve'
)

// PendingReason starts the revocation reason of a device that joined pending approval:
// until it is approved it is refused everywhere, as a revoked device is.
const PendingReason = "pending approval"

// IsPending reports whether a device's revocation reason is PendingReason's.
func IsPending(why string) bool { return strings.HasPrefix(why, PendingReason) }

// ErrJoinRefused is a join the token does not allow; the message says why, for the
// device.
var ErrJoinRefused = errors.New("join refused")

// JoinToken is a token as listed (never the token itself).
type JoinToken struct {
	ID        int64      `json:"id"`
	Label     string     `json:"label,omitempty"`
	Profile   string     `json:"profile"`
	Pattern   string     `json:"names"`
	Approve   string     `json:"approve"`
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
func (r *Registry) AddJoinToken(ctx context.Context, hash, label, profileName, pattern string, uses int, expires time.Time, approve string) (int64, error) {
	if err := ValidNamePattern(pattern); err != nil {
		return 0, fmt.Errorf("registry: %w", err)
	}
	if approve == "" {
		approve = ApproveAuto
	}
	if approve != ApproveAuto && approve != ApproveManual {
		return 0, fmt.Errorf("registry: approve %q: want auto or manual", approve)
	}
	if uses < 1 {
		return 0, errors.New("registry: a join token is for at least one use")
	}
	if _, err := r.Profile(ctx, profileName); err != nil {
		return 0, err
	}
	var id int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		if err := tx.QueryRowContext(ctx, `INSERT INTO join_tokens(hash, label, profile, pattern, uses_left, approve, expires_at, created_at)
			VALUES(?,?,?,?,?,?,?,?) RETURNING id`, hash, label, profileName, pattern, uses, approve, expires.UTC().Format(timeLayout), now()).Scan(&id); err != nil {
			return fmt.Errorf("registry: add join token: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventJoinTokenAdded, Detail: fmt.Sprintf("token %d: profile %s, names %s, %d uses, approve %s, until %s", id, profileName, pattern, uses, approve, expires.UTC().Format(time.RFC3339))})
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
	rows, err := r.db.QueryContext(ctx, `SELECT id, label, profile, pattern, approve, uses_left, used, expires_at, created_at, revoked_at FROM join_tokens ORDER BY id DESC`)
	if err != nil {
		return nil, fmt.Errorf("registry: join tokens: %w", err)
	}
	defer rows.Close()
	out := []JoinToken{}
	for rows.Next() {
		var t JoinToken
		var exp, created string
		var revoked sql.NullString
		if err := rows.Scan(&t.ID, &t.Label, &t.Profile, &t.Pattern, &t.Approve, &t.UsesLeft, &t.Used, &exp, &created, &revoked); err != nil {
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
// match its pattern and be free, key must be nobody's. A token of ApproveManual enrols
// the device pending approval. The refusals are ErrJoinRefused (or ErrExists) with what
// the device should be told; nothing is enrolled then.
func (r *Registry) Join(ctx context.Context, hash, name string, key ssh.PublicKey, remote string) (*Device, error) {
	if err := checkNewDevice(name, nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrJoinRefused, err)
	}
	var tokenID int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var profName, pattern, approve, exp string
		var uses int
		var revoked sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT id, profile, pattern, approve, uses_left, expires_at, revoked_at FROM join_tokens WHERE hash=?`, hash).
			Scan(&tokenID, &profName, &pattern, &approve, &uses, &exp, &revoked)
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
		pending := ""
		if approve == ApproveManual {
			why := fmt.Sprintf("%s (join token %d)", PendingReason, tokenID)
			if _, err := tx.ExecContext(ctx, `UPDATE devices SET revoked_at=?, revoke_why=? WHERE name=?`, now(), why, name); err != nil {
				return fmt.Errorf("registry: join: %w", err)
			}
			pending = ", pending approval"
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventJoined, Detail: fmt.Sprintf("with join token %d, key %s%s", tokenID, ssh.FingerprintSHA256(key), pending), Remote: remote})
	})
	if err != nil {
		return nil, err
	}
	return r.Device(ctx, name)
}

// ApproveDevice lets a device that joined pending approval in: it is no longer
// refused. A device not pending is ErrNotRevoked-wrapped: nothing to approve.
func (r *Registry) ApproveDevice(ctx context.Context, name string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var why string
		var revoked sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT revoked_at, revoke_why FROM devices WHERE name=?`, name).Scan(&revoked, &why)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: device %q", ErrNotFound, name)
		case err != nil:
			return fmt.Errorf("registry: approve %s: %w", name, err)
		case !revoked.Valid || !IsPending(why):
			return fmt.Errorf("%w: device %q is not waiting for approval", ErrNotRevoked, name)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE devices SET revoked_at=NULL, revoke_why='' WHERE name=?`, name); err != nil {
			return fmt.Errorf("registry: approve %s: %w", name, err)
		}
		return r.addEvent(ctx, tx, Event{Device: name, Kind: EventApproved, Detail: why + " ended"})
	})
}
