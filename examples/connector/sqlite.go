package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
)

// SQLite is an exactly-once stage-and-apply destination: each stream is
// a table of the same name in the database DB, a row per record, with
// the metadata columns and the record's other columns as a JSON object
// in data (read them with data->>'$.name', or with ReadTable):
//
//	CREATE TABLE orders (_openetl_id TEXT, _openetl_op TEXT,
//		_openetl_seq INTEGER, _openetl_synced_at TEXT, data TEXT)
//
// It is built on package ledger, which keeps the commit protocol (the
// fence, the epochs applied, the outcome of recovery) in its table
// _openetl_ledger of the same database; this file is only the data path:
//   - lane: a writer lane keeps the rows it is given (Write), and at each
//     checkpoint inserts them into the table _openetl_staged (Stage:
//     durable, and invisible to readers of the tables) and returns a
//     reference that names them;
//   - tables: once the checkpoint is recorded, Apply moves the staged
//     rows of each lane into the tables, in the transaction in which
//     package ledger checks the fence and records the epoch: an epoch is
//     applied whole or not at all, once. Intact tells a recovery whether
//     an epoch's staged rows are all there, Discard drops the rows of
//     attempts that died.
//
// Stream names starting with "sqlite_" can't be tables: SQLite keeps
// them (CheckStream refuses them).
type SQLite struct {
	// DB is the database, opened with OpenDB; the caller closes it. Any
	// number of processes may write to one.
	DB *sql.DB
}

// OpenDB opens the SQLite database at path, creating it when missing,
// as SQLite needs it, and creates the tables of the commit protocol. WAL
// and a busy timeout let processes share the file; every transaction
// takes the write lock at BEGIN (immediate), as ledger.SQLite requires,
// so a fence read in one can't change before it commits.
func OpenDB(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	if err := (ledger.SQL{DB: db}).Create(ctx); err != nil {
		db.Close()
		return nil, err
	}
	_, err = db.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS _openetl_staged (pipeline TEXT NOT NULL, stage TEXT NOT NULL,
			epoch INTEGER NOT NULL, stream TEXT NOT NULL, `+columns+`);
		CREATE INDEX IF NOT EXISTS _openetl_staged_by_stage ON _openetl_staged (stage, epoch)`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: %s: create the staging table: %w", path, err)
	}
	return db, nil
}

// columns are the columns of every table, staged rows included.
const columns = "_openetl_id TEXT NOT NULL, _openetl_op TEXT NOT NULL, _openetl_seq INTEGER NOT NULL, _openetl_synced_at TEXT, data TEXT NOT NULL"

// names are the same columns without their types.
const names = "_openetl_id, _openetl_op, _openetl_seq, _openetl_synced_at, data"

func (d *SQLite) Class() sink.Class { return sink.StageAndApply }

// Capabilities declares no mode beyond append: Build refuses a stream
// in merge or overwrite mode, naming it.
func (d *SQLite) Capabilities() sink.Capabilities { return sink.Capabilities{} }

var _ sink.SpecChecker = (*SQLite)(nil)

// CheckStream refuses a stream whose table name SQLite keeps for itself
// (sqlite_...): Build fails naming the stream, rather than the first
// Commit.
func (d *SQLite) CheckStream(spec sink.StreamSpec) error {
	if strings.HasPrefix(strings.ToLower(spec.Table), "sqlite_") {
		return fmt.Errorf("sqlite: table name %q: SQLite keeps names starting with sqlite_ for itself", spec.Table)
	}
	return nil
}

// Writer returns the writer of one lane of an attempt of cfg.Pipeline.
// Every stream is appended to its own table (the streams' specs are in
// cfg.Streams).
func (d *SQLite) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	// stage names this writer's staged rows: unique per lane and attempt,
	// so a zombie's rows never mix with its successor's.
	l := &lane{db: d.DB, pipeline: cfg.Pipeline, stage: fmt.Sprintf("%d-%s", cfg.Lane, rand.Text())}
	return ledger.NewWriter(ledger.Config[*sql.Tx]{Pipeline: cfg.Pipeline, Lane: cfg.Lane, Stager: l,
		Books: ledger.SQL{DB: d.DB}, Applier: tables{}, Name: "sqlite", Where: "the SQLite database"})
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

// lane is a writer lane's data path: Write keeps the rows of the epoch,
// Stage inserts them into _openetl_staged. Package ledger does the rest.
type lane struct {
	db              *sql.DB
	pipeline, stage string
	rows            []row // written since the last Stage
}

// row is one record, copied out of its Arrow batch: Write must not keep
// references into the batch after it returns.
type row struct {
	stream, id, op, syncedAt string
	seq                      int64
	data                     string
}

// staged is what Stage returns, for Apply: where the lane's rows of the
// epoch are staged, and how many there are of each stream.
type staged struct {
	Stage string         `json:"stage"`
	Rows  map[string]int `json:"rows"`
}

func (l *lane) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
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
		l.rows = append(l.rows, row{stream: stream, id: strings.Clone(ids.Value(i)), op: strings.Clone(ops.Value(i)),
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

// Stage inserts the rows written since the last one into
// _openetl_staged, in one transaction.
func (l *lane) Stage(ctx context.Context, epoch uint64) ([]byte, error) {
	if len(l.rows) == 0 {
		return nil, nil
	}
	s := staged{Stage: l.stage, Rows: map[string]int{}}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	for _, r := range l.rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO _openetl_staged (pipeline, stage, epoch, stream, `+names+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, l.pipeline, l.stage, epoch, r.stream, r.id, r.op, r.seq, r.syncedAt, r.data); err != nil {
			return nil, fmt.Errorf("sqlite: stage epoch %d: %w", epoch, err)
		}
		s.Rows[r.stream]++
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: stage epoch %d: %w", epoch, err)
	}
	l.rows = l.rows[:0]
	return json.Marshal(s)
}

// Close drops the rows written since the last Stage.
func (l *lane) Close(ctx context.Context) error {
	l.rows = nil
	return nil
}

// tables applies staged rows: package ledger calls it in the transaction
// that checks the fence and records the epoch.
type tables struct{}

// Apply moves a lane's staged rows of an epoch into the tables.
func (tables) Apply(ctx context.Context, tx *sql.Tx, s ledger.Staged) error {
	var st staged
	if err := json.Unmarshal(s.Data, &st); err != nil {
		return err
	}
	for stream, n := range st.Rows {
		table := quote(stream)
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (`+columns+`)`); err != nil {
			return fmt.Errorf("create table %s: %w", table, err)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (`+names+`) SELECT `+names+` FROM _openetl_staged
			WHERE stage = ? AND epoch = ? AND stream = ? ORDER BY rowid`, st.Stage, s.Epoch, stream)
		if err != nil {
			return fmt.Errorf("apply to %s: %w", table, err)
		}
		if got, _ := res.RowsAffected(); got != int64(n) {
			return fmt.Errorf("%s: %d staged rows of %d are left: the epoch is lost", table, got, n)
		}
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM _openetl_staged WHERE stage = ? AND epoch = ?`, st.Stage, s.Epoch)
	return err
}

// Intact reports whether every staged row of a lane's epoch is there.
func (tables) Intact(ctx context.Context, tx *sql.Tx, s ledger.Staged) (bool, error) {
	var st staged
	if err := json.Unmarshal(s.Data, &st); err != nil {
		return false, err
	}
	for stream, n := range st.Rows {
		var got int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM _openetl_staged WHERE stage = ? AND epoch = ? AND stream = ?`,
			st.Stage, s.Epoch, stream).Scan(&got); err != nil || got != n {
			return false, err
		}
	}
	return true, nil
}

// Discard deletes the pipeline's staged rows but keep's: the rows of
// attempts that died or were fenced.
func (tables) Discard(ctx context.Context, tx *sql.Tx, pipeline string, keep []ledger.Staged) error {
	query, args := `DELETE FROM _openetl_staged WHERE pipeline = ?`, []any{pipeline}
	for _, s := range keep {
		var st staged
		if err := json.Unmarshal(s.Data, &st); err != nil {
			return err
		}
		query += ` AND NOT (stage = ? AND epoch = ?)`
		args = append(args, st.Stage, s.Epoch)
	}
	_, err := tx.ExecContext(ctx, query, args...)
	return err
}
