package sqldb

import (
	"context"
	"database/sql"
	"strings"
)

// CopyTable copies every row of table from src into the same table in dst (either
// database to either), many rows per INSERT, keeping every column as it is, ids
// included. It returns how many rows it read; progress, if set, is told the running
// count every 10,000 rows.
func CopyTable(ctx context.Context, src, dst *Tx, table string, progress func(int)) (int, error) {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	// Well under both databases' limits on parameters per statement.
	perInsert := max(1, 4000/len(cols))
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
	var batch []any
	n, pending := 0, 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		q := `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) VALUES ` +
			strings.TrimSuffix(strings.Repeat(row+",", pending), ",")
		if _, err := dst.ExecContext(ctx, q, batch...); err != nil {
			return err
		}
		batch, pending = batch[:0], 0
		return nil
	}
	for rows.Next() {
		vals, err := ScanAny(rows, len(cols))
		if err != nil {
			return n, err
		}
		batch = append(batch, vals...)
		pending++
		n++
		if pending == perInsert {
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

// ContinueIdentity moves the identity counter of table's column past the highest id
// the table holds, after rows were inserted with explicit ids (CopyTable): otherwise
// PostgreSQL's next insert would collide with a copied row. SQLite's AUTOINCREMENT
// follows explicit ids by itself.
func ContinueIdentity(ctx context.Context, tx *Tx, table, column string) error {
	if tx.db.dialect != Postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('`+table+`', '`+column+`'),
		COALESCE((SELECT MAX(`+column+`) FROM `+table+`), 0) + 1, false)`)
	return err
}

// ScanAny reads the current row's n columns as the driver gives them (copies, and tests
// comparing two databases row by row).
func ScanAny(rows *sql.Rows, n int) ([]any, error) {
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, rows.Scan(ptrs...)
}
