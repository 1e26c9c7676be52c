package main

import (
	"context"
	"fmt"
	"testing"

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
