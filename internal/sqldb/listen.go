package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Notify asks PostgreSQL to tell every listener of channel (Listen) when tx commits.
// Notifications of one transaction with the same payload are delivered once. On SQLite
// it does nothing.
func (tx *Tx) Notify(ctx context.Context, channel string) error {
	return tx.NotifyPayload(ctx, channel, "")
}

// NotifyPayload is Notify with a payload the listeners receive (PostgreSQL bounds it
// to under 8,000 bytes).
func (tx *Tx) NotifyPayload(ctx context.Context, channel, payload string) error {
	if tx.db.dialect != Postgres {
		return nil
	}
	_, err := tx.raw.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// Listen calls wake with the payload of every notification on channel until ctx ends,
// on a connection of its own, and once with an empty payload after each (re)connection:
// a listener that was away may have missed some, so it should look again. It reconnects with backoff up to retry, and
// tells failures to fail. On SQLite it returns at once: there is nobody to listen to.
func (db *DB) Listen(ctx context.Context, channel string, retry time.Duration, wake func(payload string), fail func(error)) {
	if db.dialect != Postgres {
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := db.listenOnce(ctx, channel, wake)
		if ctx.Err() != nil {
			return
		}
		fail(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retry)
	}
}

func (db *DB) listenOnce(ctx context.Context, channel string, wake func(string)) error {
	conn, err := pgx.ConnectConfig(ctx, db.pgConfig)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	wake("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		wake(n.Payload)
	}
}
