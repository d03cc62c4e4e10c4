package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// Once makes an append happen at most once per key until the key expires, across the
// hub's restarts and across the hubs sharing the store: the key is claimed in the
// transaction that stores the notifications. A signed message's id (SOAP) is such a key:
// a copy of it replayed later, or to another hub, is not stored again.
type Once struct {
	Key   string
	Until time.Time // the key may be used again after it (retention deletes it then)
}

// ErrDuplicate means the Once key of an append was already used: nothing was stored.
var ErrDuplicate = errors.New("telemetry: already stored once under this key")

// schemaV4 holds the keys of AppendOnce until they expire.
const schemaV4 = `
CREATE TABLE once_keys (
	key   TEXT PRIMARY KEY, -- SHA-256 of the key, hex
	until INTEGER NOT NULL -- µs since 1970 UTC
);
CREATE INDEX once_keys_until ON once_keys(until);
`

// onceTag marks an append request made with AppendOnce.
type onceTag struct {
	Once
	dup bool // the key was in use (set by the writer)
}

// AppendOnce is Append, unless once.Key is in use: then nothing is stored and the error
// is ErrDuplicate.
func (s *Store) AppendOnce(ctx context.Context, once Once, items ...Notification) ([]Notification, error) {
	return s.append(ctx, &onceTag{Once: once}, items)
}

// claimOnce takes the request's key in tx; a key in use (and not expired) makes the
// request a duplicate, whose items are then not stored.
func claimOnce(tx *sqldb.Tx, r *appendReq, now time.Time) error {
	res, err := tx.Exec(`INSERT INTO once_keys(key, until) VALUES(?, ?)
		ON CONFLICT(key) DO UPDATE SET until = excluded.until WHERE once_keys.until < ?`,
		onceDigest(r.once.Key), r.once.Until.UnixMicro(), now.UnixMicro())
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		r.once.dup = true
		r.items = nil
	}
	return nil
}

// onceDigest is what the table keeps of a key: fixed in size, whatever bytes the key
// holds (a signed message's id is the sender's choice).
func onceDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// pruneOnce deletes the keys that expired before now.
func (s *Store) pruneOnce(ctx context.Context, now time.Time) error {
	return s.maintain(ctx, func(tx *sqldb.Tx) error {
		_, err := tx.Exec(`DELETE FROM once_keys WHERE until < ?`, now.UnixMicro())
		return err
	})
}
