package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/iotsafe/iotsafe/internal/sqldb"
)

// MovedSuffix is appended to a data folder's telemetry.db once Copy has moved its
// notifications into a shared store (RetireLocal): kept as a backup, no longer read.
const MovedSuffix = ".moved"

// CopyResult is what Copy did.
type CopyResult struct {
	Rows int `json:"notifications"`
	// Commands is how many commands were copied (with their ids into a store without
	// commands, else with new ones).
	Commands int `json:"commands"`
	// KeptIDs: the destination was empty and every notification kept its id. Otherwise
	// they were appended with new ids (timestamps kept).
	KeptIDs bool `json:"kept_ids"`
}

// Count is how many notifications the store at location holds. A data folder without
// a telemetry.db, or a database without the store's table, holds none, and is left so.
func Count(ctx context.Context, location string) (int, error) {
	if !sqldb.IsDSN(location) && !hasFile(location) {
		return 0, nil
	}
	if sqldb.IsDSN(location) {
		db, err := sqldb.OpenPostgres(ctx, location, sqldb.PostgresOptions{MaxConns: 1})
		if err != nil {
			return 0, fmt.Errorf("telemetry: %w", err)
		}
		defer db.Close()
		var exists bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass('notifications') IS NOT NULL`).Scan(&exists); err != nil || !exists {
			return 0, err
		}
		var n int
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications`).Scan(&n)
		return n, err
	}
	db, _, err := openDB(ctx, location)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications`).Scan(&n)
	return n, err
}

// Empty deletes every notification of the store at location, which no hub may be
// using (the labs, between runs): a data folder's telemetry.db goes, a PostgreSQL
// store's tables are truncated (pending removals with them: nothing is left to hide).
// A database without the store is left alone.
func Empty(ctx context.Context, location string) error {
	if !sqldb.IsDSN(location) {
		for _, side := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(filepath.Join(location, FileName+side)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("telemetry: %w", err)
			}
		}
		return nil
	}
	db, err := sqldb.OpenPostgres(ctx, location, sqldb.PostgresOptions{MaxConns: 1})
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	defer db.Close()
	for _, table := range []string{"notifications", "notification_removals", "commands"} {
		if _, err := db.ExecContext(ctx, `DO $$ BEGIN IF to_regclass('`+table+`') IS NOT NULL THEN TRUNCATE `+table+`; END IF; END $$`); err != nil {
			return fmt.Errorf("telemetry: emptying %s: %w", sqldb.Redact(location), err)
		}
	}
	return nil
}

func hasFile(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, FileName))
	return err == nil
}

// Copy copies every notification of the store at from into the store at to (each a
// data folder or a postgres:// DSN). Into an empty store ids and timestamps are kept,
// so platform apps' cursors and ids stay valid; into a store that already holds
// notifications (a hub's own file moved into the store its hubs share after they
// started using it) they are appended with new ids and their own timestamps. Each
// side is one transaction, and the destination commits only once its count grew by
// exactly the rows read. No hub may write from's store meanwhile (the caller holds
// its data folder's lock). A folder without a telemetry.db copies nothing.
func Copy(ctx context.Context, from, to string, progress func(int)) (CopyResult, error) {
	if from == to {
		return CopyResult{}, errors.New("telemetry: source and destination are the same store")
	}
	if !sqldb.IsDSN(from) && !hasFile(from) {
		return CopyResult{KeptIDs: true}, nil
	}
	src, srcWhere, err := openDB(ctx, from)
	if err != nil {
		return CopyResult{}, err
	}
	defer src.Close()
	dst, dstWhere, err := openDB(ctx, to)
	if err != nil {
		return CopyResult{}, err
	}
	defer dst.Close()
	rtx, err := src.BeginTx(ctx, nil)
	if err != nil {
		return CopyResult{}, fmt.Errorf("telemetry: reading %s: %w", srcWhere, err)
	}
	defer rtx.Rollback()
	wtx, err := dst.BeginTx(ctx, nil) // on PostgreSQL under the writer lock: hubs wait
	if err != nil {
		return CopyResult{}, fmt.Errorf("telemetry: writing %s: %w", dstWhere, err)
	}
	defer wtx.Rollback()
	var before int
	if err := wtx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications`).Scan(&before); err != nil {
		return CopyResult{}, err
	}
	res := CopyResult{KeptIDs: before == 0}
	if res.KeptIDs {
		res.Rows, err = sqldb.CopyTable(ctx, rtx, wtx, "notifications", progress)
		if err == nil {
			err = sqldb.ContinueIdentity(ctx, wtx, "notifications", "id")
		}
	} else {
		res.Rows, err = appendAll(ctx, rtx, wtx, progress)
	}
	if err == nil {
		err = copyRemovals(ctx, rtx, wtx)
	}
	if err == nil {
		err = copyRelayState(ctx, rtx, wtx, res.KeptIDs)
	}
	if err == nil {
		res.Commands, err = copyCommands(ctx, rtx, wtx)
	}
	if err != nil {
		return CopyResult{}, fmt.Errorf("telemetry: copying %s to %s: %w", srcWhere, dstWhere, err)
	}
	var after int
	if err := wtx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications`).Scan(&after); err != nil {
		return CopyResult{}, err
	}
	if after != before+res.Rows {
		return CopyResult{}, fmt.Errorf("telemetry: copying %s: read %d notifications, the destination grew by %d", srcWhere, res.Rows, after-before)
	}
	if res.Rows > 0 {
		if err := wtx.Notify(ctx, Channel); err != nil { // waiting readers at every hub look
			return CopyResult{}, err
		}
	}
	if err := wtx.Commit(); err != nil {
		return CopyResult{}, fmt.Errorf("telemetry: writing %s: %w", dstWhere, err)
	}
	return res, nil
}

// appendAll inserts every notification src holds into dst with new ids, oldest first.
func appendAll(ctx context.Context, src, dst *sqldb.Tx, progress func(int)) (int, error) {
	rows, err := src.QueryContext(ctx, `SELECT `+columns+` FROM notifications ORDER BY ts`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var chunk []*Notification
	n := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		args := make([]any, 0, 5*len(chunk))
		for _, it := range chunk {
			var params, dts any
			if it.Parameters != nil {
				params = string(it.Parameters)
			}
			if it.DeviceTime != nil {
				dts = it.DeviceTime.UnixMicro()
			}
			args = append(args, it.Device, it.Name, params, it.Timestamp.UnixMicro(), dts)
		}
		err := insertChunk(dst, chunk, args)
		chunk = chunk[:0]
		return err
	}
	for rows.Next() {
		it, err := scan(rows)
		if err != nil {
			return n, err
		}
		chunk = append(chunk, &it)
		n++
		if len(chunk) == rowsPerInsert {
			if err := flush(); err != nil {
				return n, err
			}
		}
		if progress != nil && n%10000 == 0 {
			progress(n)
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// copyCommands copies every command of src into dst: with their ids into a store
// without commands, so devices and apps polling by id stay right, else appended with
// new ids (timestamps kept).
func copyCommands(ctx context.Context, src, dst *sqldb.Tx) (int, error) {
	var held int
	if err := dst.QueryRowContext(ctx, `SELECT COUNT(*) FROM commands`).Scan(&held); err != nil {
		return 0, err
	}
	if held == 0 {
		n, err := sqldb.CopyTable(ctx, src, dst, "commands", nil)
		if err == nil {
			err = sqldb.ContinueIdentity(ctx, dst, "commands", "id")
		}
		return n, err
	}
	rows, err := src.QueryContext(ctx, `SELECT `+commandColumns+` FROM commands ORDER BY ts`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return n, err
		}
		if _, err := dst.ExecContext(ctx, `INSERT INTO commands(device, name, parameters, lifetime, ts, last_updated, status, result, user_id) VALUES(?,?,?,?,?,?,?,?,?)`,
			c.Device, c.Name, nullJSON(c.Parameters), c.Lifetime, c.Timestamp.UnixMicro(), c.LastUpdated.UnixMicro(), c.Status, nullJSON(c.Result), c.UserID); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// copyRemovals carries the removals whose notifications src has not deleted yet: they
// stay hidden in dst, and the remover of a hub on dst deletes them.
func copyRemovals(ctx context.Context, src, dst *sqldb.Tx) error {
	rows, err := src.QueryContext(ctx, `SELECT device, upto FROM notification_removals`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var device string
		var upto int64
		if err := rows.Scan(&device, &upto); err != nil {
			return err
		}
		if _, err := dst.Exec(upsertRemoval, device, upto); err != nil {
			return err
		}
	}
	return rows.Err()
}

// copyRelayState carries the relay marks of the sources src took notifications from,
// so a gateway's batch sent again is still known, and, when ids are kept, src's
// identity, so a gateway relaying from the copy goes on where it was.
func copyRelayState(ctx context.Context, src, dst *sqldb.Tx, keptIDs bool) error {
	rows, err := src.QueryContext(ctx, `SELECT name, value FROM telemetry_state WHERE name = ? OR name LIKE ?`, identityState, relayState+"%")
	if err != nil {
		return err
	}
	defer rows.Close()
	marks := map[string]int64{}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return err
		}
		switch {
		case name == identityState && keptIDs:
			if _, err := dst.ExecContext(ctx, `INSERT INTO telemetry_state(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value`, name, v); err != nil {
				return err
			}
		case strings.HasPrefix(name, relayState):
			marks[strings.TrimPrefix(name, relayState)] = v
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return saveMarks(dst, marks)
}

// RetireLocal renames a data folder's telemetry.db (and its side files) with
// MovedSuffix after its notifications were copied into the shared store: kept as a
// backup, no longer mistaken for notifications the shared store lacks.
func RetireLocal(dir string) error {
	for _, side := range []string{"", "-wal", "-shm"} {
		p := filepath.Join(dir, FileName+side)
		if err := os.Rename(p, p+MovedSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("telemetry: %w", err)
		}
	}
	return nil
}

// SkipIDs moves the data folder's store (SQLite) past n ids: the next notification, and
// the next command, gets an id at least n above any it holds. A store put back from a backup would otherwise
// give again the ids it gave after the backup was taken, which whoever read them (a
// platform app, the centre this hub relays to, which takes each id once) has seen for
// other notifications. It reports false, doing nothing, where there is no such store.
func SkipIDs(ctx context.Context, location string, n int64) (bool, error) {
	if sqldb.IsDSN(location) || !hasFile(location) {
		return false, nil
	}
	db, _, err := openDB(ctx, location)
	if err != nil {
		return false, err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("telemetry: %w", err)
	}
	defer tx.Rollback()
	for _, table := range []string{"notifications", "commands"} {
		var last int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = ?`, table).Scan(&last); err != nil {
			return false, fmt.Errorf("telemetry: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM sqlite_sequence WHERE name = ?`, table); err != nil {
			return false, fmt.Errorf("telemetry: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_sequence(name, seq) VALUES(?, ?)`, table, last+n); err != nil {
			return false, fmt.Errorf("telemetry: %w", err)
		}
	}
	return true, tx.Commit()
}
