package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

func TestFiles(t *testing.T) {
	sourcetest.Run(t, func(*testing.T) source.Source { return &Files{Dir: "sample"} }, sourcetest.Options{})
}

func TestSQLite(t *testing.T) {
	dst, visible := open(t)
	sinktest.Run(t, func(*testing.T) sink.Destination { return dst }, sinktest.Options{Visible: visible})
}

// TestSim: crashes at every step, lost responses, zombies, expiry (OPENETL_SIM_SEEDS seeds, 20).
func TestSim(t *testing.T) {
	sim.RunSeeds(t, sim.Seeds{Name: "the SQLite writer", Key: "examples/connector", Default: 20,
		Run: func(t *testing.T, seed uint64) (*sim.Report, error) {
			dst, visible := open(t)
			return sim.Run(seed, sim.Options{MaxRows: 40, Target: &sim.Target{Name: "sqlite", Read: visible, DropStaged: dst.DropStaged,
				Open: func(context.Context, sim.Setup) (sink.Destination, error) { return dst, nil }}})
		},
		Replay: func(seed uint64) string {
			return fmt.Sprintf("OPENETL_SIM_SEED=%d go test ./examples/connector -run TestSim", seed)
		},
	})
}

// open opens a new database, and what a reader of a table sees.
func open(t *testing.T) (*SQLite, func(context.Context, string) ([]sinktest.Row, error)) {
	db, err := OpenDB(t.Context(), t.TempDir()+"/out.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &SQLite{DB: db}, func(ctx context.Context, table string) (rows []sinktest.Row, err error) {
		err = ReadTable(ctx, db, table, func(r Row) { rows = append(rows, sinktest.Row(r)) })
		return rows, err
	}
}

// A writer on package ledger refuses to write past a checkpoint store
// that was lost: a Sync with an empty store, after one that committed,
// fails with a *sink.AheadError and adds no row (the conformance
// suite's Ahead check, here through the runner).
func TestLostStore(t *testing.T) {
	ctx := t.Context()
	dst, visible := open(t)
	sync := func(dir string) error {
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(ctx)
		p, err := etl.NewPipeline("connector").From(&Files{Dir: "sample"}).To(dst).Checkpoints(store).Build()
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Sync(ctx)
		return err
	}
	if err := sync(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	before, err := visible(ctx, "orders")
	if err != nil || len(before) == 0 {
		t.Fatalf("orders after the first Sync: %d rows, %v", len(before), err)
	}
	err = sync(t.TempDir())
	var ae *sink.AheadError
	if !errors.As(err, &ae) || errors.Is(err, sink.ErrFenced) || !etl.IsPermanent(err) {
		t.Fatalf("Sync with a new, empty checkpoint store = %v, want a permanent *sink.AheadError", err)
	}
	if after, _ := visible(ctx, "orders"); len(after) != len(before) {
		t.Errorf("orders: %d rows after the refused Sync, want %d", len(after), len(before))
	}
}

// The writer appends every stream (its Capabilities declare nothing
// more): Build refuses a stream in overwrite mode, naming it, and one in
// merge mode. CheckStream refuses a table name SQLite keeps.
func TestSpecRefused(t *testing.T) {
	dst, _ := open(t)
	for _, mode := range []delivery.Mode{delivery.Overwrite, delivery.Merge} {
		_, err := etl.NewPipeline("connector").From(&Files{Dir: "sample"}).To(dst).
			Checkpoints(checkpoint.NewMem()).Mode(mode, "orders").Build()
		if err == nil || !strings.Contains(err.Error(), `stream "orders"`) || !errors.Is(err, delivery.ErrInvalid) {
			t.Errorf("Build with orders in %v mode: %v, want delivery.ErrInvalid naming the stream", mode, err)
		}
	}
	if err := dst.CheckStream(sink.StreamSpec{Stream: "SQLite_Master", Table: "SQLite_Master"}); err == nil {
		t.Error("CheckStream accepts the table name SQLite_Master")
	}
}
