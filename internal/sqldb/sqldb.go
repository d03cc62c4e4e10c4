package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // pure-Go SQLite: no cgo toolchain needed on the hub
)

// Dialect names the database behind a handle.
type Dialect int

// The two databases iotsafe runs on.
const (
	SQLite Dialect = iota
	Postgres
)

func (d Dialect) String() string {
	if d == Postgres {
		return "postgres"
	}
	return "sqlite"
}

// IsDSN reports whether location names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a data folder.
func IsDSN(location string) bool {
	return strings.HasPrefix(location, "postgres://") || strings.HasPrefix(location, "postgresql://")
}

// Redact returns dsn without its password, for logs and messages.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable DSN)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// DB is a database handle of one dialect. It is safe for concurrent use.
type DB struct {
	raw     *sql.DB
	dialect Dialect
	// writerLock, if not zero, is the advisory lock every PostgreSQL transaction takes
	// first: transactions of one handle's kind then run one at a time across every
	// process sharing the database, as SQLite's immediate transactions do.
	writerLock int64
	// writer, on SQLite, is held by the transaction in progress of this handle (every
	// one is a writer: they begin immediate) or by a statement run outside one. The
	// others of this process queue on it in order, for at most writerWait (the busy
	// timeout), instead of polling SQLite's lock: its busy handler sleeps up to 100 ms
	// between tries, so a writer could lose the lock to newcomers for a long time (a
	// registry write in a crowd of 32 waited 200 ms while most took 20 µs). Other
	// processes still meet on SQLite's lock.
	writer     *turns
	writerWait time.Duration
	maxConns   int             // of the pool (dropIdle restores it)
	rebound    sync.Map        // query text -> PostgreSQL text
	pgConfig   *pgx.ConnConfig // for Listen's own connection
}

// OpenSQLite opens the SQLite file at path with the given pragmas (name(value) each).
// Every transaction begins immediate: writers queue at BEGIN instead of failing at
// COMMIT.
func OpenSQLite(path string, pragmas ...string) (*DB, error) {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	q.Add("_txlock", "immediate")
	raw, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	return &DB{raw: raw, dialect: SQLite, writer: &turns{}, writerWait: busyTimeout(pragmas)}, nil
}

// busyTimeout is the busy_timeout(MS) among pragmas: how long a writer waits for the
// lock (SQLite's default: not at all).
func busyTimeout(pragmas []string) time.Duration {
	for _, p := range pragmas {
		var ms int
		if _, err := fmt.Sscanf(p, "busy_timeout(%d)", &ms); err == nil {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return 0
}

// PostgresOptions tune a PostgreSQL handle.
type PostgresOptions struct {
	// WriterLock, if not zero, makes every transaction of this handle take this
	// advisory lock first (see DB).
	WriterLock int64
	// MaxConns bounds the handle's connections (default 8).
	MaxConns int
}

// OpenPostgres connects to the PostgreSQL database dsn names (a postgres:// URL; its
// password may come from PGPASSWORD or ~/.pgpass instead of the URL, as with psql).
// The connection is checked before OpenPostgres returns.
func OpenPostgres(ctx context.Context, dsn string, o PostgresOptions) (*DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx quotes the DSN in some errors; never show a password.
		return nil, fmt.Errorf("postgres DSN %s: not valid", Redact(dsn))
	}
	// A lock held by a stuck writer fails the waiting one after a minute, as SQLite's
	// busy timeout, rather than hanging an admin command for ever.
	if _, ok := cfg.RuntimeParams["lock_timeout"]; !ok {
		cfg.RuntimeParams["lock_timeout"] = "60000"
	}
	if cfg.RuntimeParams["application_name"] == "" {
		// Names the machine in pg_stat_activity.
		host, _ := os.Hostname()
		cfg.RuntimeParams["application_name"] = "iotsafe@" + host
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	raw := stdlib.OpenDB(*cfg)
	if o.MaxConns <= 0 {
		o.MaxConns = 8
	}
	raw.SetMaxOpenConns(o.MaxConns)
	raw.SetMaxIdleConns(o.MaxConns)
	raw.SetConnMaxIdleTime(5 * time.Minute)
	if err := raw.PingContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("postgres %s: %w", Redact(dsn), err)
	}
	return &DB{raw: raw, dialect: Postgres, writerLock: o.WriterLock, pgConfig: cfg, maxConns: o.MaxConns}, nil
}

// Dialect is the database behind db.
func (db *DB) Dialect() Dialect { return db.dialect }

// Close closes the handle.
func (db *DB) Close() error { return db.raw.Close() }

// SetMaxOpenConns bounds the handle's connections.
func (db *DB) SetMaxOpenConns(n int) { db.raw.SetMaxOpenConns(n) }

// maxCachedQuery bounds the text of a query q keeps rewritten. Longer ones are built per
// call with a list of parameters (a platform app's poll names every device it may
// see): each length of list is a new text, and a fleet growing by one device at a time
// would have kept one of each, up to 30,000 parameters and 200 KB apiece, for the
// life of the hub. Rewriting is linear and costs less than binding that many.
const maxCachedQuery = 4096

// q is query in db's dialect.
func (db *DB) q(query string) string {
	if db.dialect == SQLite {
		return query
	}
	if v, ok := db.rebound.Load(query); ok {
		return v.(string)
	}
	out := rebind(query)
	if len(query) <= maxCachedQuery {
		db.rebound.Store(query, out)
	}
	return out
}

// ExecContext runs a statement. On PostgreSQL, a statement that failed on a connection
// the server had dropped (a restart) before any of it was sent is sent again once, on a
// new connection.
func (db *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	// On SQLite a statement outside a transaction is a writer too: it takes its turn.
	release, err := db.takeWriter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := db.raw.ExecContext(ctx, db.q(query), args...)
	if db.dialect == Postgres && pgconn.SafeToRetry(err) {
		db.dropIdle()
		res, err = db.raw.ExecContext(ctx, db.q(query), args...)
	}
	return res, err
}

// QueryContext runs a query. On PostgreSQL a query that failed on a broken connection
// (not an error of the server's) is asked again once, on a new connection: reads have
// no effect to repeat, and a restarted server leaves every pooled connection broken.
func (db *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := db.raw.QueryContext(ctx, db.q(query), args...)
	if db.brokenConn(ctx, err) {
		db.dropIdle()
		rows, err = db.raw.QueryContext(ctx, db.q(query), args...)
	}
	return rows, err
}

// QueryRowContext runs a query expected to return at most one row (retried as
// QueryContext).
func (db *DB) QueryRowContext(ctx context.Context, query string, args ...any) *Row {
	rows, err := db.QueryContext(ctx, query, args...)
	return &Row{rows: rows, err: err}
}

// Row is the result of QueryRowContext, as database/sql's.
type Row struct {
	rows *sql.Rows
	err  error
}

// Scan copies the row's columns into dest; sql.ErrNoRows if there was none.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// brokenConn reports whether err is the connection's, not the server's answer: worth
// asking again on another connection.
func (db *DB) brokenConn(ctx context.Context, err error) bool {
	if db.dialect != Postgres || err == nil || ctx.Err() != nil {
		return false
	}
	var pg *pgconn.PgError
	return !errors.As(err, &pg) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// dropIdle closes every idle connection: after one was found broken, the others made
// before the same server restart are too.
func (db *DB) dropIdle() {
	db.raw.SetMaxIdleConns(0)
	db.raw.SetMaxIdleConns(db.maxConns)
}

// Exec runs a statement without a context.
func (db *DB) Exec(query string, args ...any) (sql.Result, error) {
	return db.ExecContext(context.Background(), query, args...)
}

// ExecSchema runs schema text (several statements, no arguments) written in SQLite's
// spelling, rewritten for db's dialect.
func (db *DB) ExecSchema(ctx context.Context, tx *Tx, schema string) error {
	if db.dialect == Postgres {
		schema = PostgresSchema(schema)
	}
	_, err := tx.raw.ExecContext(ctx, schema)
	return err
}

// BeginTx starts a transaction (on PostgreSQL, after taking the handle's writer lock).
// A start that failed on a broken connection is tried once more on a new one; nothing
// of the transaction had happened.
func (db *DB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*Tx, error) {
	return db.beginRetried(ctx, opts, true)
}

// BeginUnordered starts a transaction that, on PostgreSQL, does not take the handle's
// writer lock: it runs beside the locked transactions and its commits are not ordered
// with theirs (an id it draws from a sequence may commit before a smaller one drawn by
// a locked transaction). Use it only for writes that no reader orders with the locked
// transactions' (Tx.Unordered lets the writer check). On SQLite it is BeginTx: every
// writer takes its turn there.
func (db *DB) BeginUnordered(ctx context.Context) (*Tx, error) {
	return db.beginRetried(ctx, nil, false)
}

func (db *DB) beginRetried(ctx context.Context, opts *sql.TxOptions, ordered bool) (*Tx, error) {
	tx, err := db.begin(ctx, opts, ordered)
	if db.brokenConn(ctx, err) {
		db.dropIdle()
		tx, err = db.begin(ctx, opts, ordered)
	}
	return tx, err
}

func (db *DB) begin(ctx context.Context, opts *sql.TxOptions, ordered bool) (*Tx, error) {
	release, err := db.takeWriter(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := db.raw.BeginTx(ctx, opts)
	if err != nil {
		release()
		return nil, err
	}
	tx := &Tx{raw: raw, db: db, release: release}
	if db.dialect == Postgres && db.writerLock != 0 {
		tx.unordered = !ordered
		if ordered {
			if _, err := raw.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, db.writerLock); err != nil {
				tx.Rollback()
				return nil, fmt.Errorf("waiting for the writer lock: %w", err)
			}
		}
	}
	return tx, nil
}

// takeWriter waits for this handle's transaction in progress, on SQLite (see DB.writer),
// and returns what gives the turn to the next.
func (db *DB) takeWriter(ctx context.Context) (release func(), err error) {
	if db.writer == nil {
		return func() {}, nil
	}
	return db.writer.take(ctx, db.writerWait)
}

// Begin starts a transaction without a context.
func (db *DB) Begin() (*Tx, error) { return db.BeginTx(context.Background(), nil) }

// Tx is a transaction of a DB.
type Tx struct {
	raw     *sql.Tx
	db      *DB
	release func() // the handle's writer turn (once)
	// unordered: begun without the writer lock (BeginUnordered on PostgreSQL).
	unordered bool
}

// Unordered reports whether the transaction runs outside the writer lock, its commit
// not ordered with the locked transactions' (BeginUnordered).
func (tx *Tx) Unordered() bool { return tx.unordered }

// ExecContext runs a statement in the transaction.
func (tx *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return tx.raw.ExecContext(ctx, tx.db.q(query), args...)
}

// QueryContext runs a query in the transaction.
func (tx *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return tx.raw.QueryContext(ctx, tx.db.q(query), args...)
}

// QueryRowContext runs a query expected to return at most one row.
func (tx *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *Row {
	rows, err := tx.raw.QueryContext(ctx, tx.db.q(query), args...)
	return &Row{rows: rows, err: err}
}

// Exec runs a statement without a context.
func (tx *Tx) Exec(query string, args ...any) (sql.Result, error) {
	return tx.ExecContext(context.Background(), query, args...)
}

// Query runs a query without a context.
func (tx *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	return tx.QueryContext(context.Background(), query, args...)
}

// PrepareContext prepares a statement used many times in the transaction.
func (tx *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return tx.raw.PrepareContext(ctx, tx.db.q(query))
}

// Dialect is the database the transaction runs in.
func (tx *Tx) Dialect() Dialect { return tx.db.dialect }

// Commit commits the transaction.
func (tx *Tx) Commit() error {
	defer tx.release()
	return tx.raw.Commit()
}

// Rollback abandons the transaction (a no-op after Commit).
func (tx *Tx) Rollback() error {
	defer tx.release()
	return tx.raw.Rollback()
}

// IsBusy reports whether err is SQLite's "database is locked" returned without waiting
// (SQLITE_BUSY where SQLite does not call its busy handler, as while another connection
// turns a new file's journal into WAL): worth trying the whole transaction again.
func IsBusy(err error) bool {
	return err != nil && strings.Contains(err.Error(), "(SQLITE_BUSY)")
}

// IsUniqueViolation reports whether err is a unique-constraint failure, on either
// database.
func IsUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}
