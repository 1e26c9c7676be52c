package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/openetl/etl/checkpoint"
)

// DefaultTable is the table SQL keeps the Markers in by default.
const DefaultTable = "_openetl_ledger"

// Dialect is the SQL dialect of an SQL's database.
type Dialect uint8

const (
	// SQLite: ? placeholders. A transaction must take the write lock at
	// BEGIN, so that a Marker it read can't change before it commits:
	// open the database with BEGIN IMMEDIATE transactions (modernc.org/sqlite:
	// _txlock=immediate in the DSN) and a busy timeout. With deferred
	// transactions two that read a Marker at once can't both commit
	// either, but the loser fails (SQLITE_BUSY) instead of waiting.
	SQLite Dialect = iota
	// Postgres: $n placeholders; Marker locks the pipeline's row (SELECT
	// ... FOR UPDATE) until the transaction ends. Any isolation level.
	Postgres
)

// String returns "sqlite" or "postgres".
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return fmt.Sprintf("dialect(%d)", uint8(d))
}

// SQL is Books in a table of a database/sql database: a row per
// pipeline,
//
//	CREATE TABLE _openetl_ledger (pipeline TEXT PRIMARY KEY,
//		fence BIGINT NOT NULL, epoch BIGINT NOT NULL,
//		generation BIGINT NOT NULL, finished BIGINT NOT NULL)
//
// which Create makes. Its transactions are *sql.Tx: apply staged data
// through the same tx, and the epoch and its rows land together. Many
// destinations (and pipelines, and processes) may share one table. The
// zero value is not usable: DB is required.
type SQL struct {
	// DB is the database; the caller opens and closes it.
	DB *sql.DB
	// Dialect is DB's dialect. Default SQLite.
	Dialect Dialect
	// Table is the table's name, used in SQL as written (quote it, or
	// qualify it with a schema, as the database wants). Default
	// DefaultTable.
	Table string
	// TxOptions are the options of Tx's transactions. Default nil: the
	// driver's.
	TxOptions *sql.TxOptions
}

var _ Books[*sql.Tx] = SQL{}

func (s SQL) table() string {
	if s.Table == "" {
		return DefaultTable
	}
	return s.Table
}

// q rewrites the ? placeholders of query for the dialect.
func (s SQL) q(query string) string {
	if s.Dialect != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Create creates the table when it does not exist.
func (s SQL) Create(ctx context.Context) error {
	_, err := s.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.table()+` (pipeline TEXT PRIMARY KEY,
		fence BIGINT NOT NULL, epoch BIGINT NOT NULL, generation BIGINT NOT NULL, finished BIGINT NOT NULL)`)
	if err != nil {
		return fmt.Errorf("ledger: create table %s: %w", s.table(), err)
	}
	return nil
}

// Tx runs f in a transaction of DB, committed when f returns nil.
func (s SQL) Tx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.DB.BeginTx(ctx, s.TxOptions)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// Marker reads pipeline's row in tx. It inserts a zero row first when
// there is none, so that the row exists to be locked: two transactions
// of a new pipeline can then not both read "none" and both write.
func (s SQL) Marker(ctx context.Context, tx *sql.Tx, pipeline string) (Marker, error) {
	var m Marker
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO `+s.table()+` (pipeline, fence, epoch, generation, finished)
		VALUES (?, 0, 0, 0, 0) ON CONFLICT (pipeline) DO NOTHING`), pipeline); err != nil {
		return m, err
	}
	query := `SELECT fence, epoch, generation, finished FROM ` + s.table() + ` WHERE pipeline = ?`
	if s.Dialect == Postgres {
		query += " FOR UPDATE"
	}
	var v [4]int64
	if err := tx.QueryRowContext(ctx, s.q(query), pipeline).Scan(&v[0], &v[1], &v[2], &v[3]); err != nil {
		return m, err
	}
	for _, x := range v {
		if x < 0 {
			return m, fmt.Errorf("table %s: pipeline %q has a negative number (%d, %d, %d, %d): edited by hand?", s.table(), pipeline, v[0], v[1], v[2], v[3])
		}
	}
	m.Fence, m.Epoch, m.Generation, m.Finished = checkpoint.Generation(v[0]), uint64(v[1]), checkpoint.Generation(v[2]), uint64(v[3])
	return m, nil
}

// SetMarker writes pipeline's row in tx; Marker must have read it in tx
// before.
func (s SQL) SetMarker(ctx context.Context, tx *sql.Tx, pipeline string, m Marker) error {
	for _, x := range []uint64{uint64(m.Fence), m.Epoch, uint64(m.Generation), m.Finished} {
		if x > math.MaxInt64 {
			return fmt.Errorf("table %s: %d does not fit a BIGINT", s.table(), x)
		}
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE `+s.table()+` SET fence = ?, epoch = ?, generation = ?, finished = ? WHERE pipeline = ?`),
		int64(m.Fence), int64(m.Epoch), int64(m.Generation), int64(m.Finished), pipeline)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n != 1 {
		return fmt.Errorf("table %s: no row of pipeline %q to update: SetMarker without Marker in the transaction?", s.table(), pipeline)
	}
	return nil
}
