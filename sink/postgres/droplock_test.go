package postgres_test

import (
	"context"
	"testing"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
)

// lockWaiters counts the server's sessions waiting on a lock in a
// statement naming e's schema (its tables or its staging schema).
func (e *env) lockWaiters(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0`, e.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stagedEpoch writes one row on lane 0 of pipeline and stages it as
// epoch 1, returning its committable and its staging table.
func (e *env) stagedEpoch(t *testing.T, d sink.Destination, pipeline string) (sink.Committable, string) {
	t.Helper()
	ctx := context.Background()
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: pipeline, Streams: []sink.StreamSpec{{Stream: "orders", Table: "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "orders", batch(t, row{id: 1, value: "a", seq: 1})); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var staging string
	if err := e.pool.QueryRow(ctx, `SELECT staging FROM "_openetl_staging_`+e.schema+`"._openetl_staged WHERE pipeline = $1`,
		pipeline).Scan(&staging); err != nil {
		t.Fatal(err)
	}
	return c, staging
}

// DropStaged leaves a staging table whose registry row another
// transaction holds (a Commit applying it, a Recover checking it) and
// does not wait for it: waiting on one row while holding others is what
// closed a cycle with a Commit locking its lanes' rows in turn. Once the
// holder is gone, the next DropStaged drops it.
func TestDropStagedSkipsTablesInUse(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	d := e.open(t)
	_, staging := e.stagedEpoch(t, d, "inuse")
	h, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Rollback(context.Background())
	if _, err := h.Exec(ctx, `SELECT 1 FROM "_openetl_staging_`+e.schema+`"._openetl_staged WHERE staging = $1 FOR UPDATE`, staging); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := d.DropStaged(ctx); done <- err }()
	if err := testutil.Recv(t, "DropStaged beside a held registry row", done); err != nil {
		t.Fatal(err)
	}
	if tables, _ := e.stagedTables(t); len(tables) != 1 || tables[0].name != staging {
		t.Fatalf("staging tables after DropStaged beside a holder: %+v, want %s kept", tables, staging)
	}
	if err := h.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := d.DropStaged(ctx); err != nil || n != 1 {
		t.Fatalf("DropStaged after the holder ended: %d rows, %v; want 1", n, err)
	}
	if tables, orphans := e.stagedTables(t); len(tables) != 0 || len(orphans) != 0 {
		t.Fatalf("after the second DropStaged: tables %+v, registry rows without a table %v; want none", tables, orphans)
	}
}

// A Recover checking an epoch's staging table (Intact) while DropStaged
// drops it: DropStaged holds the table's registry row and waits to read
// the table (another session holds it exclusively); Recover waits for
// the row before it touches the table, so when the holder lets go
// DropStaged drops the table and Recover finds the epoch Lost. Recover
// used to count the table first: both then held it shared, DropStaged's
// DROP waited on Recover and Recover's Discard on DropStaged's row, and
// the server broke the deadlock (40P01).
func TestRecoverBesideDropStaged(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	d := e.open(t)
	c, staging := e.stagedEpoch(t, d, "rd")
	h, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Rollback(context.Background())
	if _, err := h.Exec(ctx, `LOCK TABLE "_openetl_staging_`+e.schema+`"."`+staging+`" IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	dropped := make(chan error, 1)
	go func() { _, err := d.DropStaged(ctx); dropped <- err }()
	testutil.Until(t, "DropStaged to wait for the table", func() bool { return e.lockWaiters(t) >= 1 })

	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "rd", Streams: []sink.StreamSpec{{Stream: "orders", Table: "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	type recovered struct {
		out sink.Outcome
		err error
	}
	rec := make(chan recovered, 1)
	head := &checkpoint.Record{Pipeline: "rd", Epoch: 1, Generation: 1, Committables: [][]byte{c}}
	go func() { out, err := w.Recover(ctx, 2, head); rec <- recovered{out, err} }()
	testutil.Until(t, "Recover to wait too", func() bool { return e.lockWaiters(t) >= 2 })
	if err := h.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, "DropStaged", dropped); err != nil {
		t.Errorf("DropStaged beside a Recover: %v", err)
	}
	r := testutil.Recv(t, "Recover", rec)
	if r.err != nil || r.out != sink.Lost {
		t.Errorf("Recover of an epoch DropStaged dropped beside it: %v, %v; want Lost", r.out, r.err)
	}
}
