package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// SQLite is an exactly-once stage-and-apply destination: each stream is
// a table of the same name in the database DB, a row per record, with
// the metadata columns and the record's other columns as a JSON object
// in data (read them with data->>'$.name', or with ReadTable):
//
//	CREATE TABLE orders (_openetl_id TEXT, _openetl_op TEXT,
//		_openetl_seq INTEGER, _openetl_synced_at TEXT, data TEXT)
//
// It keeps the commit protocol with two tables of its own in the same
// database:
//   - _openetl_staged: PreCommit inserts the lane's rows of the epoch
//     there (durable, and invisible to readers of the tables) and returns
//     a committable that names them;
//   - _openetl_pipelines: per pipeline, the fence (the newest generation
//     that recovered) and the last epoch applied. Commit checks the
//     fence, moves the staged rows into the tables and records the epoch,
//     in one transaction: an epoch is applied whole or not at all, once.
//
// Stream names starting with "sqlite_" can't be tables: SQLite keeps them.
type SQLite struct {
	// DB is the database, opened with OpenDB; the caller closes it. Any
	// number of processes may write to one.
	DB *sql.DB
}

// OpenDB opens the SQLite database at path, creating it when missing,
// as SQLite needs it, and creates the tables of the commit protocol. WAL
// and a busy timeout let processes share the file; every transaction
// takes the write lock at BEGIN (immediate), so a fence read in one
// can't change before it commits.
func OpenDB(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	_, err = db.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS _openetl_pipelines (pipeline TEXT PRIMARY KEY,
			fence INTEGER NOT NULL, applied INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS _openetl_staged (pipeline TEXT NOT NULL, stage TEXT NOT NULL,
			epoch INTEGER NOT NULL, stream TEXT NOT NULL, `+columns+`);
		CREATE INDEX IF NOT EXISTS _openetl_staged_by_stage ON _openetl_staged (stage, epoch)`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: %s: create the tables of the commit protocol: %w", path, err)
	}
	return db, nil
}

// columns are the columns of every table, staged rows included.
const columns = "_openetl_id TEXT NOT NULL, _openetl_op TEXT NOT NULL, _openetl_seq INTEGER NOT NULL, _openetl_synced_at TEXT, data TEXT NOT NULL"

// names are the same columns without their types.
const names = "_openetl_id, _openetl_op, _openetl_seq, _openetl_synced_at, data"

func (d *SQLite) Class() sink.Class               { return sink.StageAndApply }
func (d *SQLite) Capabilities() sink.Capabilities { return sink.Capabilities{} }

// Writer returns the writer of one lane of an attempt of pipeline.
func (d *SQLite) Writer(ctx context.Context, pipeline string, lane int) (sink.Writer, error) {
	// stage names this writer's staged rows: unique per lane and attempt,
	// so a zombie's rows never mix with its successor's.
	return &writer{db: d.DB, pipeline: pipeline, stage: fmt.Sprintf("%d-%s", lane, rand.Text())}, nil
}

// DropStaged discards the staged rows of every pipeline, returning how
// many: the space of pipelines that will not run again. It is safe at any
// time: a pipeline whose last checkpoint's rows it dropped reads that
// epoch again (Recover reports it Lost).
func (d *SQLite) DropStaged(ctx context.Context) (int, error) {
	res, err := d.DB.ExecContext(ctx, `DELETE FROM _openetl_staged`)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// Row is a row of a table as ReadTable reads it.
type Row struct {
	ID     string         // _openetl_id
	Seq    int64          // _openetl_seq
	Op     string         // _openetl_op
	Values map[string]any // data, decoded: the record's columns
}

// ReadTable calls f with each row of table, none when it does not exist
// yet.
func ReadTable(ctx context.Context, db *sql.DB, table string, f func(Row)) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, table).Scan(&n)
	if err != nil || n == 0 {
		return err
	}
	rs, err := db.QueryContext(ctx, `SELECT _openetl_id, _openetl_seq, _openetl_op, data FROM `+quote(table))
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var r Row
		var data []byte
		if err := rs.Scan(&r.ID, &r.Seq, &r.Op, &data); err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber() // integers stay exact
		if err := dec.Decode(&r.Values); err != nil {
			return fmt.Errorf("sqlite: %s: row %s: %w", table, r.ID, err)
		}
		f(r)
	}
	return rs.Err()
}

// quote quotes an SQL identifier.
func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

type writer struct {
	db              *sql.DB
	pipeline, stage string
	rows            []row                 // written since the last PreCommit
	gen             checkpoint.Generation // set by Recover (lane 0 only)
}

// row is one record, copied out of its Arrow batch: Write must not keep
// references into the batch after it returns.
type row struct {
	stream, id, op, syncedAt string
	seq                      int64
	data                     string
}

// committable is what PreCommit returns: where the lane's rows of the
// epoch are staged, and how many there are of each stream.
type committable struct {
	Pipeline string         `json:"pipeline"`
	Epoch    uint64         `json:"epoch"`
	Stage    string         `json:"stage"`
	Rows     map[string]int `json:"rows"`
}

func (w *writer) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	ids, ok1 := column[*array.String](rec, "_openetl_id")
	ops, ok2 := column[*array.String](rec, "_openetl_op")
	seqs, ok3 := column[*array.Int64](rec, "_openetl_seq")
	synced, ok4 := column[*array.Timestamp](rec, "_openetl_synced_at")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return fmt.Errorf("sqlite: %s: a batch without the metadata columns: %s", stream, rec.Schema())
	}
	doc, fields := map[string]any{}, rec.Schema().Fields()
	for i := range int(rec.NumRows()) {
		for c, f := range fields {
			if !strings.HasPrefix(f.Name, "_openetl_") || f.Name == "_openetl_deleted" {
				doc[f.Name] = rec.Column(c).GetOneForMarshal(i)
			}
		}
		data, err := json.Marshal(doc)
		if err != nil {
			return fmt.Errorf("sqlite: %s: row %s: %w", stream, ids.Value(i), err)
		}
		w.rows = append(w.rows, row{stream: stream, id: strings.Clone(ids.Value(i)), op: strings.Clone(ops.Value(i)),
			seq: seqs.Value(i), syncedAt: synced.ValueStr(i), data: string(data)})
	}
	return nil
}

// column returns rec's column name as a T.
func column[T arrow.Array](rec arrow.RecordBatch, name string) (T, bool) {
	var a T
	if idx := rec.Schema().FieldIndices(name); len(idx) == 1 {
		a, ok := rec.Column(idx[0]).(T)
		return a, ok
	}
	return a, false
}

// PreCommit stages the rows written since the last one, in one
// transaction.
func (w *writer) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	c := committable{Pipeline: w.pipeline, Epoch: epoch, Stage: w.stage, Rows: map[string]int{}}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	for _, r := range w.rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO _openetl_staged (pipeline, stage, epoch, stream, `+names+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, w.pipeline, w.stage, epoch, r.stream, r.id, r.op, r.seq, r.syncedAt, r.data); err != nil {
			return nil, fmt.Errorf("sqlite: stage epoch %d: %w", epoch, err)
		}
		c.Rows[r.stream]++
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: stage epoch %d: %w", epoch, err)
	}
	w.rows = w.rows[:0]
	return json.Marshal(c)
}

// Commit applies epoch: it moves the staged rows of every lane into the
// tables and records the epoch as applied, in one transaction; nothing
// when the epoch is applied already; ErrFenced when a newer generation
// has recovered.
func (w *writer) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	if w.gen == 0 {
		return errors.New("sqlite: Commit before Recover")
	}
	cs, err := decode(w.pipeline, epoch, committables)
	if err != nil {
		return err
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if applied, err := w.checkFence(ctx, tx, w.gen); err != nil || applied >= epoch {
		return err
	}
	for _, c := range cs {
		for stream, n := range c.Rows {
			table := quote(stream)
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (`+columns+`)`); err != nil {
				return fmt.Errorf("sqlite: create table %s: %w", table, err)
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (`+names+`) SELECT `+names+` FROM _openetl_staged
				WHERE stage = ? AND epoch = ? AND stream = ? ORDER BY rowid`, c.Stage, epoch, stream)
			if err != nil {
				return fmt.Errorf("sqlite: apply epoch %d to %s: %w", epoch, table, err)
			}
			if got, _ := res.RowsAffected(); got != int64(n) {
				return fmt.Errorf("sqlite: epoch %d of %s: %d staged rows of %d are left: the epoch is lost", epoch, table, got, n)
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM _openetl_staged WHERE stage = ? AND epoch = ?`, c.Stage, epoch); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE _openetl_pipelines SET applied = ? WHERE pipeline = ?`, epoch, w.pipeline); err != nil {
		return err
	}
	return tx.Commit()
}

// Recover raises the fence to gen and reports head's epoch Applied (the
// pipeline's marker has it), Recoverable (every staged row of it is
// there) or Lost. It discards staged rows that head does not name: the
// rows of attempts that died or were fenced.
func (w *writer) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	var epoch uint64 // 0: a new pipeline
	var cs []committable
	if head != nil {
		var err error
		if cs, err = decode(w.pipeline, head.Epoch, head.Committables); err != nil {
			return 0, err
		}
		epoch = head.Epoch
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	applied, err := w.checkFence(ctx, tx, gen)
	if err != nil {
		return 0, err
	}
	// A database ahead of the log (the checkpoint store was lost or
	// restored from an older copy) must not be written past.
	if err := sink.CheckAhead(w.pipeline, "the SQLite database", applied, 0, gen, head); err != nil {
		return 0, err
	}
	out := sink.Applied
	if applied < epoch {
		out = sink.Recoverable
		for _, c := range cs {
			for stream, n := range c.Rows {
				var got int
				if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM _openetl_staged WHERE stage = ? AND epoch = ? AND stream = ?`,
					c.Stage, epoch, stream).Scan(&got); err != nil {
					return 0, err
				}
				if got != n {
					out = sink.Lost
				}
			}
		}
	}
	stages := []string{}
	for _, c := range cs {
		stages = append(stages, c.Stage)
	}
	keep, _ := json.Marshal(stages)
	if _, err := tx.ExecContext(ctx, `DELETE FROM _openetl_staged WHERE pipeline = ? AND
		(epoch != ? OR stage NOT IN (SELECT value FROM json_each(?)))`, w.pipeline, epoch, string(keep)); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO _openetl_pipelines (pipeline, fence, applied) VALUES (?, ?, 0)
		ON CONFLICT (pipeline) DO UPDATE SET fence = excluded.fence`, w.pipeline, gen); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	w.gen = gen
	return out, nil
}

// checkFence returns the pipeline's last applied epoch, or an error
// wrapping sink.ErrFenced when a generation newer than gen has recovered.
func (w *writer) checkFence(ctx context.Context, tx *sql.Tx, gen checkpoint.Generation) (applied uint64, err error) {
	var fence checkpoint.Generation
	err = tx.QueryRowContext(ctx, `SELECT fence, applied FROM _openetl_pipelines WHERE pipeline = ?`, w.pipeline).Scan(&fence, &applied)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err == nil && fence > gen:
		return 0, fmt.Errorf("sqlite: pipeline %q: generation %d is fenced by %d: %w", w.pipeline, gen, fence, sink.ErrFenced)
	}
	return applied, err
}

// decode decodes the lanes' committables of epoch.
func decode[T ~[]byte](pipeline string, epoch uint64, raw []T) ([]committable, error) {
	cs := make([]committable, len(raw))
	for lane, b := range raw {
		if err := json.Unmarshal(b, &cs[lane]); err != nil {
			return nil, fmt.Errorf("sqlite: lane %d's committable: %w", lane, err)
		}
		if c := cs[lane]; c.Pipeline != pipeline || c.Epoch != epoch {
			return nil, fmt.Errorf("sqlite: lane %d's committable is for %s epoch %d, not %s epoch %d", lane, c.Pipeline, c.Epoch, pipeline, epoch)
		}
	}
	return cs, nil
}

// Close drops the rows written since the last PreCommit.
func (w *writer) Close(ctx context.Context) error {
	w.rows = nil
	return nil
}
