package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
	"github.com/openetl/etl/sink/sinktest"
)

// database is a test database of one dialect.
type database struct {
	dialect ledger.Dialect
	open    func(t *testing.T) *sql.DB
}

var databases = []database{
	{ledger.SQLite, func(t *testing.T) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/t.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}},
	{ledger.Postgres, func(t *testing.T) *sql.DB {
		dsn := os.Getenv("OPENETL_TEST_POSTGRES_DSN")
		if dsn == "" {
			if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
				t.Skip("OPENETL_TEST_POSTGRES_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
			}
			t.Fatal("OPENETL_TEST_POSTGRES_DSN is not set: start Postgres with scripts/servers.sh start postgres, or set OPENETL_SKIP_SERVERS=1")
		}
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}},
}

var prefixes atomic.Int64

// sqlDest is a test destination on package ledger's SQL books: tables
// named prefix_stream, of rows (id, seq, op, vals: the other columns as
// JSON), staged rows in prefix_staged, Markers in prefix_ledger. Every
// sqlDest on one database and prefix stands for a process of its own.
type sqlDest struct {
	db      *sql.DB
	dialect ledger.Dialect
	prefix  string
}

// newSQLDest creates the tables of a new prefix on db.
func newSQLDest(t *testing.T, db *sql.DB, dialect ledger.Dialect) *sqlDest {
	t.Helper()
	d := &sqlDest{db: db, dialect: dialect, prefix: fmt.Sprintf("l%d_%d", time.Now().UnixNano()%1e9, prefixes.Add(1))}
	ctx := context.Background()
	if err := d.books().Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.books().Create(ctx); err != nil {
		t.Fatalf("Create of an existing table: %v", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+d.prefix+`_staged (pipeline TEXT NOT NULL, stage TEXT NOT NULL,
		epoch BIGINT NOT NULL, stream TEXT NOT NULL, n BIGINT NOT NULL, id TEXT NOT NULL, seq BIGINT NOT NULL, op TEXT NOT NULL, vals TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *sqlDest) books() ledger.SQL {
	return ledger.SQL{DB: d.db, Dialect: d.dialect, Table: d.prefix + "_ledger"}
}

// q rewrites ? placeholders for Postgres.
func (d *sqlDest) q(query string) string {
	if d.dialect != ledger.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (d *sqlDest) table(stream string) string { return d.prefix + "_" + stream }

func (d *sqlDest) Class() sink.Class               { return sink.StageAndApply }
func (d *sqlDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }

func (d *sqlDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	pipeline, lane := cfg.Pipeline, cfg.Lane
	l := &sqlStager{d: d, pipeline: pipeline, stage: fmt.Sprintf("%d-%d", lane, writers.Add(1))}
	return ledger.NewWriter(ledger.Config[*sql.Tx]{Pipeline: pipeline, Lane: lane, Stager: l, Books: d.books(), Applier: sqlApplier{d}, Name: "sqltest"})
}

type sqlStager struct {
	d               *sqlDest
	pipeline, stage string
	rows            []memRow
}

func (l *sqlStager) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	rows, err := sinktest.RowsFromRecord(rec)
	if err != nil {
		return err
	}
	for _, r := range rows {
		delete(r.Values, sink.ColumnSyncedAt)
		l.rows = append(l.rows, memRow{stream: stream, row: r})
	}
	return nil
}

type sqlRef struct {
	Stage string         `json:"stage"`
	Rows  map[string]int `json:"rows"`
}

func (l *sqlStager) Stage(ctx context.Context, epoch uint64) ([]byte, error) {
	if len(l.rows) == 0 {
		return nil, nil
	}
	ref := sqlRef{Stage: l.stage, Rows: map[string]int{}}
	tx, err := l.d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	for n, r := range l.rows {
		vals, err := json.Marshal(r.row.Values)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, l.d.q(`INSERT INTO `+l.d.prefix+`_staged (pipeline, stage, epoch, stream, n, id, seq, op, vals)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`), l.pipeline, l.stage, int64(epoch), r.stream, n, r.row.ID, r.row.Seq, r.row.Op, string(vals)); err != nil {
			return nil, err
		}
		ref.Rows[r.stream]++
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	l.rows = nil
	return json.Marshal(ref)
}

func (l *sqlStager) Close(context.Context) error {
	l.rows = nil
	return nil
}

type sqlApplier struct{ d *sqlDest }

func (a sqlApplier) Apply(ctx context.Context, tx *sql.Tx, s ledger.Staged) error {
	var ref sqlRef
	if err := json.Unmarshal(s.Data, &ref); err != nil {
		return err
	}
	d := a.d
	for stream, n := range ref.Rows {
		t := d.table(stream)
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (id TEXT NOT NULL, seq BIGINT NOT NULL, op TEXT NOT NULL, vals TEXT NOT NULL)`); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, d.q(`INSERT INTO `+t+` (id, seq, op, vals) SELECT id, seq, op, vals FROM `+d.prefix+`_staged
			WHERE pipeline = ? AND stage = ? AND epoch = ? AND stream = ? ORDER BY n`), s.Pipeline, ref.Stage, int64(s.Epoch), stream)
		if err != nil {
			return err
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(n) {
			return fmt.Errorf("%s: %d staged rows of %d left (%v)", t, got, n, err)
		}
	}
	_, err := tx.ExecContext(ctx, d.q(`DELETE FROM `+d.prefix+`_staged WHERE pipeline = ? AND stage = ? AND epoch = ?`), s.Pipeline, ref.Stage, int64(s.Epoch))
	return err
}

func (a sqlApplier) Intact(ctx context.Context, tx *sql.Tx, s ledger.Staged) (bool, error) {
	var ref sqlRef
	if err := json.Unmarshal(s.Data, &ref); err != nil {
		return false, err
	}
	for stream, n := range ref.Rows {
		var got int
		if err := tx.QueryRowContext(ctx, a.d.q(`SELECT count(*) FROM `+a.d.prefix+`_staged WHERE pipeline = ? AND stage = ? AND epoch = ? AND stream = ?`),
			s.Pipeline, ref.Stage, int64(s.Epoch), stream).Scan(&got); err != nil || got != n {
			return false, err
		}
	}
	return true, nil
}

func (a sqlApplier) Discard(ctx context.Context, tx *sql.Tx, pipeline string, keep []ledger.Staged) error {
	query, args := `DELETE FROM `+a.d.prefix+`_staged WHERE pipeline = ?`, []any{pipeline}
	for _, s := range keep {
		var ref sqlRef
		if err := json.Unmarshal(s.Data, &ref); err != nil {
			return err
		}
		query += ` AND NOT (stage = ? AND epoch = ?)`
		args = append(args, ref.Stage, int64(s.Epoch))
	}
	_, err := tx.ExecContext(ctx, a.d.q(query), args...)
	return err
}

// visible reads a stream's table.
func (d *sqlDest) visible(ctx context.Context, stream string) ([]sinktest.Row, error) {
	rs, err := d.db.QueryContext(ctx, `SELECT id, seq, op, vals FROM `+d.table(stream))
	if err != nil {
		if strings.Contains(err.Error(), "no such table") || strings.Contains(err.Error(), "does not exist") {
			return nil, nil
		}
		return nil, err
	}
	defer rs.Close()
	var out []sinktest.Row
	for rs.Next() {
		var r sinktest.Row
		var vals string
		if err := rs.Scan(&r.ID, &r.Seq, &r.Op, &vals); err != nil {
			return nil, err
		}
		dec := json.NewDecoder(strings.NewReader(vals))
		dec.UseNumber()
		if err := dec.Decode(&r.Values); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// dropStaged deletes every staged row, as an expiry would.
func (d *sqlDest) dropStaged(ctx context.Context) (int, error) {
	res, err := d.db.ExecContext(ctx, `DELETE FROM `+d.prefix+`_staged`)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// A writer on ledger.SQL passes the conformance suite and the
// simulation on each dialect (Postgres: OPENETL_TEST_POSTGRES_DSN).
func TestSQLConformance(t *testing.T) {
	for _, db := range databases {
		t.Run(db.dialect.String(), func(t *testing.T) {
			d := newSQLDest(t, db.open(t), db.dialect)
			sinktest.Run(t, func(*testing.T) sink.Destination { return d }, sinktest.Options{Visible: d.visible})
		})
	}
}

// TestSQLSim: OPENETL_SIM_SEEDS seeds (default 20) per dialect.
func TestSQLSim(t *testing.T) {
	for _, db := range databases {
		t.Run(db.dialect.String(), func(t *testing.T) {
			sim.RunSeeds(t, sim.Seeds{Name: "a writer on ledger.SQL (" + db.dialect.String() + ")", Key: "sink/ledger/sql/" + db.dialect.String(), Default: 20, One: *flagSimSeed,
				Run: func(t *testing.T, seed uint64) (*sim.Report, error) {
					// A database per seed: the seeds run in parallel, and
					// SQLite has one writer at a time per file.
					d := newSQLDest(t, db.open(t), db.dialect)
					opts := simOptions
					opts.Target = &sim.Target{Name: "ledger.SQL on " + db.dialect.String(), Read: d.visible, DropStaged: d.dropStaged,
						Open: func(context.Context, sim.Setup) (sink.Destination, error) { return d, nil }}
					return sim.Run(seed, opts)
				},
				Replay: func(seed uint64) string {
					return fmt.Sprintf("go test ./sink/ledger -run 'TestSQLSim/%s' -sim.seed %d -v", db.dialect, seed)
				},
			})
		})
	}
}

// SQL reads the zero Marker of a new pipeline, what SetMarker wrote in
// a committed transaction, nothing of a rolled-back one; other
// pipelines' rows are their own.
func TestSQLMarker(t *testing.T) {
	for _, db := range databases {
		t.Run(db.dialect.String(), func(t *testing.T) {
			d := newSQLDest(t, db.open(t), db.dialect)
			b, ctx := d.books(), context.Background()
			get := func(pipeline string) ledger.Marker {
				t.Helper()
				var m ledger.Marker
				if err := b.Tx(ctx, func(tx *sql.Tx) (err error) { m, err = b.Marker(ctx, tx, pipeline); return err }); err != nil {
					t.Fatal(err)
				}
				return m
			}
			if m := get("a"); m != (ledger.Marker{}) {
				t.Errorf("a new pipeline's Marker = %+v, want zero", m)
			}
			want := ledger.Marker{Fence: 7, Epoch: 1 << 40, Generation: 6, Finished: 3}
			set := func(pipeline string, m ledger.Marker, fail error) error {
				return b.Tx(ctx, func(tx *sql.Tx) error {
					if _, err := b.Marker(ctx, tx, pipeline); err != nil {
						return err
					}
					if err := b.SetMarker(ctx, tx, pipeline, m); err != nil {
						return err
					}
					return fail
				})
			}
			if err := set("a", want, nil); err != nil {
				t.Fatal(err)
			}
			if err := set("a", ledger.Marker{Fence: 9}, errInjected); !errors.Is(err, errInjected) {
				t.Fatalf("Tx = %v, want f's error", err)
			}
			if m := get("a"); m != want {
				t.Errorf("Marker = %+v, want %+v (the rolled-back write not seen)", m, want)
			}
			if m := get("b"); m != (ledger.Marker{}) {
				t.Errorf("another pipeline's Marker = %+v, want zero", m)
			}
			if err := set("a", ledger.Marker{Fence: 1 << 63}, nil); err == nil {
				t.Error("SetMarker of a fence above BIGINT returned nil")
			}
			err := b.Tx(ctx, func(tx *sql.Tx) error { return b.SetMarker(ctx, tx, "c", want) })
			if err == nil {
				t.Error("SetMarker without Marker returned nil")
			}
			if _, err := d.db.ExecContext(ctx, `UPDATE `+d.prefix+`_ledger SET epoch = -1 WHERE pipeline = 'a'`); err != nil {
				t.Fatal(err)
			}
			if err := b.Tx(ctx, func(tx *sql.Tx) error { _, err := b.Marker(ctx, tx, "a"); return err }); err == nil {
				t.Error("Marker of a row with a negative epoch returned nil")
			}
		})
	}
}

// Recovers of many generations at once on a new pipeline, each in its
// own process: every one either recovers or is fenced, and the fence
// ends at the newest generation, never lowered by an older one that came
// later.
func TestSQLRecoverRace(t *testing.T) {
	for _, db := range databases {
		t.Run(db.dialect.String(), func(t *testing.T) {
			d := newSQLDest(t, db.open(t), db.dialect)
			const n = 12
			var wg sync.WaitGroup
			errs := make([]error, n+1)
			for gen := 1; gen <= n; gen++ {
				wg.Go(func() {
					w, err := d.Writer(context.Background(), sink.WriterConfig{Pipeline: pipe})
					if err == nil {
						_, err = w.Recover(context.Background(), checkpoint.Generation(gen), nil)
					}
					errs[gen] = err
				})
			}
			wg.Wait()
			for gen, err := range errs[1:] {
				if err != nil && !errors.Is(err, sink.ErrFenced) {
					t.Errorf("Recover(%d): %v, want nil or fenced", gen+1, err)
				}
			}
			if errs[n] != nil {
				t.Errorf("Recover(%d), the newest: %v", n, errs[n])
			}
			b := d.books()
			var m ledger.Marker
			if err := b.Tx(context.Background(), func(tx *sql.Tx) (err error) { m, err = b.Marker(context.Background(), tx, pipe); return err }); err != nil {
				t.Fatal(err)
			}
			if m.Fence != n {
				t.Errorf("fence = %d after the race, want %d", m.Fence, n)
			}
		})
	}
}

// On Postgres, Marker locks the pipeline's row until the transaction
// ends, also the row it has just created: a second transaction's Marker
// waits (here until its lock_timeout), so two can't both read a Marker
// and both write it.
func TestSQLMarkerLocks(t *testing.T) {
	db := databases[1]
	conn := db.open(t)
	d := newSQLDest(t, conn, db.dialect)
	b, ctx := d.books(), context.Background()
	for _, pipeline := range []string{"new", "existing"} {
		if pipeline == "existing" {
			if err := b.Tx(ctx, func(tx *sql.Tx) error { _, err := b.Marker(ctx, tx, pipeline); return err }); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(pipeline, func(t *testing.T) {
			err := b.Tx(ctx, func(tx *sql.Tx) error {
				if _, err := b.Marker(ctx, tx, pipeline); err != nil {
					return err
				}
				other, err := conn.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer other.Rollback()
				if _, err := other.ExecContext(ctx, `SET LOCAL lock_timeout = '300ms'`); err != nil {
					return err
				}
				_, err = b.Marker(ctx, other, pipeline)
				if err == nil || !strings.Contains(err.Error(), "55P03") {
					t.Errorf("a second transaction's Marker while the first holds it: %v, want a lock timeout (SQLSTATE 55P03)", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
