package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

func testConn(t testing.TB) (driver.Conn, string) {
	t.Helper()
	a := os.Getenv("OPENETL_TEST_CLICKHOUSE_ADDR")
	if a == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_CLICKHOUSE_ADDR is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_CLICKHOUSE_ADDR is not set: start ClickHouse with scripts/servers.sh start clickhouse, or set OPENETL_SKIP_SERVERS=1")
	}
	conn, err := ch.Open(&ch.Options{Addr: []string{a}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "openetl_itest_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
		conn.Close()
	})
	return conn, db
}

func intRecord(from, n int) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: colID, Type: arrow.BinaryTypes.String},
		{Name: colOp, Type: arrow.BinaryTypes.String},
		{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := from; i < from+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("id-%d", i))
		b.Field(2).(*array.StringBuilder).Append("insert")
		b.Field(3).(*array.Int64Builder).Append(int64(i + 1))
	}
	return b.NewRecordBatch()
}

func countRows(t *testing.T, conn driver.Conn, q string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestCrashBetweenCopyAndRecord is the crash the epoch record can't
// cover: every block of the epoch was copied into the append table, and
// the process died before _openetl_epochs recorded it. The next attempt
// must find the blocks there (by _openetl_batch) and not copy them again:
// exactly once without dedup tokens. A second case: the crash came after
// the first of two blocks.
func TestCrashBetweenCopyAndRecord(t *testing.T) {
	conn, db := testConn(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		copied int // blocks copied before the crash
	}{{"all blocks copied", 2}, {"one of two copied", 1}, {"none copied", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			pipeline := fmt.Sprintf("crash-%d", tc.copied)
			table := fmt.Sprintf("events_%d", tc.copied)
			d1, err := New(ctx, Config{Conn: conn, Database: db, BlockRows: 10})
			if err != nil {
				t.Fatal(err)
			}
			sw, _ := d1.Writer(ctx, sink.WriterConfig{Pipeline: pipeline})
			w1 := sw.(*writer)
			if _, err := w1.Recover(ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			for from := 0; from < 20; from += 10 { // two blocks of 10
				rec := intRecord(from, 10)
				err := w1.Write(ctx, table, rec)
				rec.Release()
				if err != nil {
					t.Fatal(err)
				}
			}
			c, err := w1.PreCommit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			byTable, _, err := w1.decodeAll(1, []sink.Committable{c})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(byTable[table]); n != 2 {
				t.Fatalf("%d blocks, want 2", n)
			}
			// The crash: the first tc.copied blocks copied, no record.
			if tc.copied > 0 {
				if err := w1.applyTable(ctx, table, byTable[table][:tc.copied], 1); err != nil {
					t.Fatal(err)
				}
			}
			q := fmt.Sprintf("SELECT count() FROM %s.%s", db, table)
			if n := countRows(t, conn, q); n != uint64(10*tc.copied) {
				t.Fatalf("after the crash: %d rows, want %d", n, 10*tc.copied)
			}
			// The next attempt, another process.
			d2, err := New(ctx, Config{Conn: conn, Database: db})
			if err != nil {
				t.Fatal(err)
			}
			sw2, _ := d2.Writer(ctx, sink.WriterConfig{Pipeline: pipeline})
			w2 := sw2.(*writer)
			head := &checkpoint.Record{Pipeline: pipeline, Epoch: 1, Generation: 1, Committables: [][]byte{c}}
			out, err := w2.Recover(ctx, 2, head)
			if err != nil {
				t.Fatal(err)
			}
			if out != sink.Recoverable {
				t.Fatalf("Recover = %v, want recoverable", out)
			}
			// The zombie (generation 1) tries again: fenced, copies nothing.
			if err := w1.Commit(ctx, 1, []sink.Committable{c}); err == nil {
				t.Fatal("the zombie's Commit succeeded after Recover(2)")
			}
			if err := w2.Commit(ctx, 1, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, conn, q); n != 20 {
				t.Fatalf("after the next attempt's Commit: %d rows, want 20", n)
			}
			if n := countRows(t, conn, fmt.Sprintf("SELECT uniqExact(id) FROM %s.%s", db, table)); n != 20 {
				t.Fatalf("%d distinct ids, want 20", n)
			}
			// Each block is one part of the table: it landed whole.
			parts := countRows(t, conn, fmt.Sprintf("SELECT count() FROM system.parts WHERE database = '%s' AND table = '%s' AND active", db, table))
			if parts != 2 {
				t.Errorf("%d active parts, want 2 (one per block)", parts)
			}
			// The staging partitions are gone.
			if n := countRows(t, conn, fmt.Sprintf("SELECT count() FROM %s.%s", db, stageName(table))); n != 0 {
				t.Errorf("staging table holds %d rows after the commit, want 0", n)
			}
		})
	}
}

// TestFencedApplyCopiesNothing: an apply by a generation the fence has
// passed copies nothing, even when it is sent (the check is inside the
// INSERT ... SELECT).
func TestFencedApplyCopiesNothing(t *testing.T) {
	conn, db := testConn(t)
	ctx := context.Background()
	d, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "fence"})
	w := sw.(*writer)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rec := intRecord(0, 5)
	defer rec.Release()
	if err := w.Write(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, raiseFence(db, "fence", 2)); err != nil {
		t.Fatal(err)
	}
	byTable, _, _ := w.decodeAll(1, []sink.Committable{c})
	if err := w.applyTable(ctx, "t", byTable["t"], 1); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, conn, fmt.Sprintf("SELECT count() FROM %s.t", db)); n != 0 {
		t.Fatalf("a fenced apply copied %d rows", n)
	}
}

// TestCollectDropsLeftovers: blocks an older attempt staged and no
// checkpoint record names (sent mid-epoch, then the process died) are
// dropped by the next attempt's Collect (after its Recover), unless
// the generation no longer holds the pipeline; the head epoch's blocks
// are kept and applied.
func TestCollectDropsLeftovers(t *testing.T) {
	conn, db := testConn(t)
	ctx := context.Background()
	d1, err := New(ctx, Config{Conn: conn, Database: db, BlockRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	sw, _ := d1.Writer(ctx, sink.WriterConfig{Pipeline: "left"})
	w1 := sw.(*writer)
	if _, err := w1.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rec := intRecord(0, 10)
	defer rec.Release()
	if err := w1.Write(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	c1, err := w1.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	rec2 := intRecord(10, 10) // sealed at BlockRows: staged, in no committable
	defer rec2.Release()
	if err := w1.Write(ctx, "t", rec2); err != nil {
		t.Fatal(err)
	}
	stage := fmt.Sprintf("SELECT count() FROM %s.%s", db, stageName("t"))
	if n := countRows(t, conn, stage); n != 20 {
		t.Fatalf("staged %d rows, want 20", n)
	}
	blocks := fmt.Sprintf("SELECT uniqExact(_openetl_batch) FROM %s.%s", db, stageName("t"))
	if n := countRows(t, conn, blocks+" WHERE _openetl_stage_generation = 1 AND _openetl_stage_pipeline = 'left'"); n != 2 {
		t.Fatalf("%d staged blocks with a row stamped with generation 1 of pipeline left, want 2", n)
	}
	// The process dies; the next attempt recovers with head epoch 1.
	d2, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	sw2, _ := d2.Writer(ctx, sink.WriterConfig{Pipeline: "left"})
	w2 := sw2.(*writer)
	head := &checkpoint.Record{Pipeline: "left", Epoch: 1, Generation: 1, Committables: [][]byte{c1}}
	if out, err := w2.Recover(ctx, 2, head); err != nil || out != sink.Recoverable {
		t.Fatalf("Recover = %v, %v; want recoverable", out, err)
	}
	if n := countRows(t, conn, stage); n != 20 {
		t.Fatalf("after Recover %d rows staged, want 20 (Collect drops leftovers)", n)
	}
	req := sink.CollectRequest{Pipeline: "left", Generation: 2, Head: head,
		Held: func(context.Context) error { return sink.ErrFenced }}
	if out, err := d2.Collect(ctx, req); !errors.Is(err, sink.ErrFenced) || out.Removed != 0 {
		t.Fatalf("Collect by a generation no longer holding the pipeline = %+v, %v; want nothing dropped, fenced", out, err)
	}
	if n := countRows(t, conn, stage); n != 20 {
		t.Fatalf("after a refused Collect %d rows staged, want 20", n)
	}
	req.Held = func(context.Context) error { return nil }
	if out, err := d2.Collect(ctx, req); err != nil || out.Removed != 1 || out.Kept != 1 {
		t.Fatalf("Collect = %+v, %v; want 1 block dropped, the head's kept", out, err)
	}
	if n := countRows(t, conn, stage); n != 10 {
		t.Fatalf("after Collect %d rows staged, want the head's 10", n)
	}
	if out, err := d2.Collect(ctx, req); err != nil || out.Removed != 0 {
		t.Fatalf("Collect again = %+v, %v; want nothing more", out, err)
	}
	if err := w2.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, conn, fmt.Sprintf("SELECT count() FROM %s.t", db)); n != 10 {
		t.Fatalf("table has %d rows, want 10", n)
	}
	if n := countRows(t, conn, stage); n != 0 {
		t.Fatalf("after Commit %d rows staged, want 0", n)
	}
	// A block whose staging partition is gone is an error, not an empty
	// copy: epoch 2's block dropped by hand before Commit.
	rec3 := intRecord(20, 5)
	defer rec3.Release()
	if err := w2.Write(ctx, "t", rec3); err != nil {
		t.Fatal(err)
	}
	c2, err := w2.PreCommit(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	byTable, _, _ := w2.decodeAll(2, []sink.Committable{c2})
	if err := conn.Exec(ctx, dropStagePartition(db, "t", byTable["t"][0].Token)); err != nil {
		t.Fatal(err)
	}
	if err := w2.Commit(ctx, 2, []sink.Committable{c2}); err == nil {
		t.Fatal("Commit of a block whose staging partition is gone succeeded")
	}
	if ok, _ := w2.applied(ctx, 2); ok {
		t.Fatal("epoch 2 recorded as applied without its rows")
	}
}
