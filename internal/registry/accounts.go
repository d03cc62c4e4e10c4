package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/iotsafe/iotsafe/internal/profile"
	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// PrincipalAccount is the grant kind of a front-door account (its XID is the account id).
const PrincipalAccount = "account"

// Account is a person who reaches device services through the front door.
type Account struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Password  string    `json:"-"` // argon2id PHC string; never printed
	HasPass   bool      `json:"password_set"`
	CreatedAt time.Time `json:"created_at"`
	Tokens    int       `json:"active_tokens"`
	Sessions  int       `json:"login_sessions"` // open login-page sessions
	// TokenEpoch changes when the account logs out everywhere or its password changes:
	// the account's JWTs carry the one they were issued under.
	TokenEpoch int64 `json:"-"`
}

// Token is an API token of an account; only its hash is stored.
type Token struct {
	ID        int64      `json:"id"`
	Account   string     `json:"account"`
	AccountID int64      `json:"-"`
	Label     string     `json:"label,omitempty"`
	Hash      string     `json:"-"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Usable reports whether the token may authenticate at t.
func (t Token) Usable(at time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || at.Before(*t.ExpiresAt))
}

// AddAccount creates an account; passwordHash may be "" (token-only account).
func (r *Registry) AddAccount(ctx context.Context, name, passwordHash string) (*Account, error) {
	if !profile.ValidName(name) {
		return nil, fmt.Errorf("registry: account name %q: use lower-case letters, digits and '-'", name)
	}
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO accounts(name, password, created_at) VALUES(?,?,?) ON CONFLICT DO NOTHING`,
			name, passwordHash, now())
		if err != nil {
			return fmt.Errorf("registry: add account: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: account %q", ErrExists, name)
		}
		return r.addEvent(ctx, tx, Event{Kind: "account_added", Detail: "front-door account " + name})
	})
	if err != nil {
		return nil, err
	}
	return r.Account(ctx, name)
}

// SetPassword replaces an account's password hash and ends its login sessions (a
// password is changed when it may be known to someone else).
func (r *Registry) SetPassword(ctx context.Context, name, passwordHash string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET password=? WHERE name=?`, passwordHash, name)
		if err != nil {
			return fmt.Errorf("registry: set password: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: account %q", ErrNotFound, name)
		}
		ended, err := endLoginSessions(ctx, tx, name)
		if err != nil {
			return err
		}
		return r.addEvent(ctx, tx, Event{Kind: "account_password",
			Detail: fmt.Sprintf("password changed for account %s; %d login session(s) ended, with every REST token of the account", name, ended)})
	})
}

// RemoveAccount deletes an account, its tokens and its grants.
func (r *Registry) RemoveAccount(ctx context.Context, name string) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		var id int64
		if err := tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE name=?`, name).Scan(&id); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: account %q", ErrNotFound, name)
		} else if err != nil {
			return fmt.Errorf("registry: remove account: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM grants WHERE kind=? AND xid=?`, PrincipalAccount, id); err != nil {
			return fmt.Errorf("registry: remove account grants: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM accounts WHERE id=?`, id); err != nil {
			return fmt.Errorf("registry: remove account: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Kind: "account_removed", Detail: "front-door account " + name})
	})
}

// accountCols reads an account with its counts; ?1 is the current time.
const accountCols = `a.id, a.name, a.password, a.created_at, a.token_epoch,
	(SELECT COUNT(*) FROM tokens t WHERE t.account=a.id AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > ?1)),
	(SELECT COUNT(*) FROM login_sessions s WHERE s.account=a.id AND s.expires_at > ?1)`

func scanAccount(sc interface{ Scan(...any) error }) (*Account, error) {
	var a Account
	var created string
	if err := sc.Scan(&a.ID, &a.Name, &a.Password, &created, &a.TokenEpoch, &a.Tokens, &a.Sessions); err != nil {
		return nil, err
	}
	a.HasPass = a.Password != ""
	if t := parseTime(sql.NullString{String: created, Valid: true}); t != nil {
		a.CreatedAt = *t
	}
	return &a, nil
}

// Account returns one account.
func (r *Registry) Account(ctx context.Context, name string) (*Account, error) {
	a, err := scanAccount(r.db.QueryRowContext(ctx, `SELECT `+accountCols+` FROM accounts a WHERE a.name=?2`, now(), name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: account %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: account %s: %w", name, err)
	}
	return a, nil
}

// Accounts lists all accounts, by name.
func (r *Registry) Accounts(ctx context.Context) ([]*Account, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT `+accountCols+` FROM accounts a ORDER BY a.name`, now())
	if err != nil {
		return nil, fmt.Errorf("registry: accounts: %w", err)
	}
	defer rows.Close()
	out := []*Account{}
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("registry: accounts: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// AddToken stores a token hash for an account; expires may be nil (no expiry).
func (r *Registry) AddToken(ctx context.Context, account, label, hash string, expires *time.Time) (int64, error) {
	var id int64
	err := r.withTx(ctx, func(tx *sqldb.Tx) error {
		var aid int64
		if err := tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE name=?`, account).Scan(&aid); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: account %q", ErrNotFound, account)
		} else if err != nil {
			return fmt.Errorf("registry: add token: %w", err)
		}
		var exp any
		if expires != nil {
			exp = expires.UTC().Format(timeLayout)
		}
		if err := tx.QueryRowContext(ctx, `INSERT INTO tokens(account, label, hash, created_at, expires_at) VALUES(?,?,?,?,?) RETURNING id`,
			aid, label, hash, now(), exp).Scan(&id); err != nil {
			return fmt.Errorf("registry: add token: %w", err)
		}
		return r.addEvent(ctx, tx, Event{Kind: "token_added", Detail: fmt.Sprintf("API token %d (%s) for account %s", id, label, account)})
	})
	return id, err
}

// RevokeToken marks a token of an account revoked.
func (r *Registry) RevokeToken(ctx context.Context, account string, id int64) error {
	return r.withTx(ctx, func(tx *sqldb.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tokens SET revoked_at=? WHERE id=? AND revoked_at IS NULL
			AND account=(SELECT id FROM accounts WHERE name=?)`, now(), id, account)
		if err != nil {
			return fmt.Errorf("registry: revoke token: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: active token %d of account %q", ErrNotFound, id, account)
		}
		return r.addEvent(ctx, tx, Event{Kind: "token_revoked", Detail: fmt.Sprintf("API token %d of account %s", id, account)})
	})
}

// Tokens lists tokens, of one account or (account "") of all.
func (r *Registry) Tokens(ctx context.Context, account string) ([]Token, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT t.id, a.name, a.id, t.label, t.hash, t.created_at, t.expires_at, t.revoked_at
		FROM tokens t JOIN accounts a ON a.id=t.account WHERE CAST(? AS TEXT)='' OR a.name=? ORDER BY t.id`, account, account)
	if err != nil {
		return nil, fmt.Errorf("registry: tokens: %w", err)
	}
	defer rows.Close()
	out := []Token{}
	for rows.Next() {
		var t Token
		var created string
		var exp, rev sql.NullString
		if err := rows.Scan(&t.ID, &t.Account, &t.AccountID, &t.Label, &t.Hash, &created, &exp, &rev); err != nil {
			return nil, fmt.Errorf("registry: tokens: %w", err)
		}
		t.CreatedAt = *parseTime(sql.NullString{String: created, Valid: true})
		t.ExpiresAt, t.RevokedAt = parseTime(exp), parseTime(rev)
		out = append(out, t)
	}
	return out, rows.Err()
}

// Route is what the front door needs to reach one service of a device.
type Route struct {
	Addr     *Socket    // nil: the device never offered this alias
	LastSeen *time.Time // last session activity
	Revoked  bool
}

// Route looks up device/alias in one query; ErrNotFound if the device does not exist.
func (r *Registry) Route(ctx context.Context, device, alias string) (Route, error) {
	var rt Route
	var seen, revoked, addr sql.NullString
	var port sql.NullInt64
	err := r.db.QueryRowContext(ctx, `SELECT d.last_seen, d.revoked_at, s.address, s.port FROM devices d
		LEFT JOIN sockets s ON s.device=d.name AND s.alias=? WHERE d.name=?`, alias, device).Scan(&seen, &revoked, &addr, &port)
	if errors.Is(err, sql.ErrNoRows) {
		return rt, fmt.Errorf("%w: device %q", ErrNotFound, device)
	}
	if err != nil {
		return rt, fmt.Errorf("registry: route %s/%s: %w", device, alias, err)
	}
	rt.LastSeen, rt.Revoked = parseTime(seen), revoked.Valid
	if addr.Valid {
		s, err := socketFrom(alias, addr.String, int(port.Int64))
		if err != nil {
			return rt, err
		}
		rt.Addr = &s
	}
	return rt, nil
}
