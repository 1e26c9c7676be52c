package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
)

// counter is the data path of a destination that keeps, exactly once,
// how many rows each table got: a lane counts rows, and its "staged
// data" is the counts themselves, carried in the committable.
type counter struct{ n map[string]int64 }

func (c *counter) Write(_ context.Context, table string, rec arrow.RecordBatch) error {
	c.n[table] += rec.NumRows()
	return nil
}

func (c *counter) Stage(context.Context, uint64) ([]byte, error) {
	if len(c.n) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(c.n)
	c.n = map[string]int64{}
	return b, err
}

func (c *counter) Close(context.Context) error { return nil }

// totals applies the counts to a table, in the transaction that records
// the epoch.
type totals struct{}

func (totals) Apply(ctx context.Context, tx *sql.Tx, s ledger.Staged) error {
	var n map[string]int64
	if err := json.Unmarshal(s.Data, &n); err != nil {
		return err
	}
	for table, rows := range n {
		if _, err := tx.ExecContext(ctx, `INSERT INTO totals (tbl, n) VALUES (?, ?)
			ON CONFLICT (tbl) DO UPDATE SET n = n + excluded.n`, table, rows); err != nil {
			return err
		}
	}
	return nil
}

// Intact: the counts are in the committable, so they can't be lost.
func (totals) Intact(context.Context, *sql.Tx, ledger.Staged) (bool, error) { return true, nil }

// Discard: nothing is staged outside the committables.
func (totals) Discard(context.Context, *sql.Tx, string, []ledger.Staged) error { return nil }

// A writer built on package ledger, driven by hand as the runner would:
// Recover, Write, PreCommit, Commit — and Commit again, which changes
// nothing. A zombie's Commit is fenced.
func ExampleNewWriter() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ledger")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	defer db.Close()
	books := ledger.SQL{DB: db, Dialect: ledger.SQLite}
	if err := books.Create(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE totals (tbl TEXT PRIMARY KEY, n INTEGER)`); err != nil {
		panic(err)
	}
	newWriter := func() *ledger.Writer[*sql.Tx] {
		w, err := ledger.NewWriter(ledger.Config[*sql.Tx]{Pipeline: "orders-sync", Stager: &counter{n: map[string]int64{}},
			Books: books, Applier: totals{}, Name: "totals"})
		if err != nil {
			panic(err)
		}
		return w
	}

	w := newWriter()
	out, _ := w.Recover(ctx, 1, nil) // generation 1, a new pipeline
	fmt.Println("recover:", out)
	rec := batchOf(3)
	_ = w.Write(ctx, "orders", rec)
	rec.Release()
	c, _ := w.PreCommit(ctx, 1)
	fmt.Println("commit:", w.Commit(ctx, 1, []sink.Committable{c}))
	fmt.Println("again:", w.Commit(ctx, 1, []sink.Committable{c}))

	// A second attempt (generation 2) recovers from the checkpoint of
	// epoch 1; the first attempt is a zombie from now on.
	head := &checkpoint.Record{Pipeline: "orders-sync", Epoch: 1, Generation: 1, Committables: [][]byte{c}}
	out, _ = newWriter().Recover(ctx, 2, head)
	fmt.Println("recover:", out)
	rec = batchOf(2)
	_ = w.Write(ctx, "orders", rec)
	rec.Release()
	c2, _ := w.PreCommit(ctx, 2)
	fmt.Println("zombie:", w.Commit(ctx, 2, []sink.Committable{c2}))

	var n int
	_ = db.QueryRowContext(ctx, `SELECT n FROM totals WHERE tbl = 'orders'`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// recover: applied
	// commit: <nil>
	// again: <nil>
	// recover: applied
	// zombie: totals: pipeline "orders-sync": generation 1 is fenced by generation 2: fenced by a newer generation
	// orders: 3
}

// batchOf returns a batch of n rows.
func batchOf(n int) arrow.RecordBatch {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	for i := range n {
		b.Append(int64(i))
	}
	col := b.NewArray()
	defer col.Release()
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	return array.NewRecordBatch(sc, []arrow.Array{col}, int64(n))
}
