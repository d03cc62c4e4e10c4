package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// LoginSession is a front-door login session. Only the cookie's hash is stored: a copy
// of the registry does not let anyone log in.
type LoginSession struct {
	Hash      string // hex SHA-256 of the session cookie
	AccountID int64
	ExpiresAt time.Time
}

// AddLoginSession stores a session and drops the ones that have expired. A session of an
// account that no longer exists is refused (ErrNotFound).
func (r *Registry) AddLoginSession(ctx context.Context, s LoginSession) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM login_sessions WHERE expires_at<=?`, now()); err != nil {
			return fmt.Errorf("registry: expire login sessions: %w", err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO login_sessions(hash, account, created_at, expires_at)
			SELECT ?, id, ?, ? FROM accounts WHERE id=?`, s.Hash, now(), s.ExpiresAt.UTC().Format(timeLayout), s.AccountID)
		if err != nil {
			return fmt.Errorf("registry: add login session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: account id %d", ErrNotFound, s.AccountID)
		}
		return nil
	})
}

// RemoveLoginSession deletes a session (logout); an unknown hash is not an error.
// On a shared registry the other hubs drop it from memory too: the change feed's
// EventLoginSessionEnded makes them reload their accounts and sessions.
func (r *Registry) RemoveLoginSession(ctx context.Context, hash string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var account string
		err := tx.QueryRowContext(ctx, `SELECT a.name FROM login_sessions s JOIN accounts a ON a.id=s.account WHERE s.hash=?`, hash).Scan(&account)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // gone already: nothing to tell
		}
		if err != nil {
			return fmt.Errorf("registry: remove login session: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM login_sessions WHERE hash=?`, hash); err != nil {
			return fmt.Errorf("registry: remove login session: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Kind: EventLoginSessionEnded, Detail: "a login session of account " + account + " ended (logout)"})
	})
}

// EventLoginSessionEnded: one login session ended (a logout); every hub forgets it.
const EventLoginSessionEnded = "login_session_ended"

// LoginSession is the session of that hash if it is still valid at the given time
// (ErrNotFound otherwise): a hub asks when a browser brings a session another hub of
// the registry started after this one loaded its sessions.
func (r *Registry) LoginSession(ctx context.Context, hash string, at time.Time) (LoginSession, error) {
	s := LoginSession{Hash: hash}
	var exp string
	err := r.db.QueryRowContext(ctx, `SELECT account, expires_at FROM login_sessions WHERE hash=? AND expires_at>?`, hash, at.UTC().Format(timeLayout)).Scan(&s.AccountID, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("%w: login session", ErrNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("registry: login session: %w", err)
	}
	t := parseTime(sql.NullString{String: exp, Valid: true})
	if t == nil {
		return s, fmt.Errorf("%w: login session", ErrNotFound)
	}
	s.ExpiresAt = *t
	return s, nil
}

// LoginSessions lists the sessions still valid at the given time.
func (r *Registry) LoginSessions(ctx context.Context, at time.Time) ([]LoginSession, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT hash, account, expires_at FROM login_sessions WHERE expires_at>? ORDER BY expires_at`,
		at.UTC().Format(timeLayout))
	if err != nil {
		return nil, fmt.Errorf("registry: login sessions: %w", err)
	}
	defer rows.Close()
	var out []LoginSession
	for rows.Next() {
		var s LoginSession
		var exp string
		if err := rows.Scan(&s.Hash, &s.AccountID, &exp); err != nil {
			return nil, fmt.Errorf("registry: login sessions: %w", err)
		}
		t := parseTime(sql.NullString{String: exp, Valid: true})
		if t == nil {
			continue // unreadable: treated as expired
		}
		s.ExpiresAt = *t
		out = append(out, s)
	}
	return out, rows.Err()
}

// EndLoginSessions ends every login session of an account (a lost laptop, a person who
// left) and returns how many there were.
func (r *Registry) EndLoginSessions(ctx context.Context, account string) (int64, error) {
	var ended int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM accounts WHERE name=?`, account).Scan(&exists); err != nil {
			return fmt.Errorf("registry: end login sessions: %w", err)
		}
		if exists == 0 {
			return fmt.Errorf("%w: account %q", ErrNotFound, account)
		}
		var err error
		if ended, err = endLoginSessions(ctx, tx, account); err != nil {
			return err
		}
		return r.addEvent(ctx, tx, Event{Kind: "account_logout", Detail: fmt.Sprintf("%d login session(s) of account %s ended by the operator, with every REST token of the account", ended, account)})
	})
	return ended, err
}

// endLoginSessions ends an account's login-page sessions and starts a new token epoch:
// its REST tokens (refresh tokens included) stop verifying too.
func endLoginSessions(ctx context.Context, tx *sqldb.Tx, account string) (int64, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM login_sessions WHERE account=(SELECT id FROM accounts WHERE name=?)`, account)
	if err != nil {
		return 0, fmt.Errorf("registry: end login sessions: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE accounts SET token_epoch=? WHERE name=?`, time.Now().UnixMicro(), account); err != nil {
		return 0, fmt.Errorf("registry: end an account's tokens: %w", err)
	}
	return res.RowsAffected()
}
