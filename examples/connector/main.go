// Command connector shows how to write connectors of your own: a source
// that reads a directory of NDJSON files (Files, in source.go) and an
// exactly-once stage-and-apply writer into SQLite (SQLite, in sqlite.go),
// each proved in connector_test.go by the conformance suite of its
// contract (source/sourcetest, sink/sinktest) and the writer also by the
// seeded simulation of the whole runner under faults (package sim).
//
// The writer is only its data path, built on package sink/ledger, which
// keeps the books of the commit protocol: the fence, the epochs applied
// and recovery. A lane's Write and Stage and the Apply, Intact and
// Discard of staged rows take about 160 lines of sqlite.go; the same
// writer keeping its own books took 230.
//
//	go run ./examples/connector
//
// reads connector-data/in/*.ndjson (copies of sample/ when the directory
// is missing) into the SQLite database connector-data/out.db, a table per
// file, with its checkpoints under connector-data/checkpoints. Append
// lines to a file and run it again: only the new lines are added, as is
// the last line of the sample orders once it has its newline:
//
//	echo >> connector-data/in/orders.ndjson && go run ./examples/connector
//
// Query the tables with any SQLite client:
//
//	sqlite3 connector-data/out.db "SELECT data->>'$.total' FROM orders LIMIT 3"
//
// No servers, no C library: the SQLite driver is pure Go.
package main

import (
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "connector:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "connector-data", "directory of the input files (in/), the database and the checkpoints")
	flag.Parse()
	in := filepath.Join(*dir, "in")
	if err := sample(in); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := OpenDB(ctx, filepath.Join(*dir, "out.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := checkpoint.OpenDir(filepath.Join(*dir, "checkpoints"))
	if err != nil {
		return err
	}
	defer store.Close(context.Background())

	p, err := etl.NewPipeline("connector").From(&Files{Dir: in}).To(&SQLite{DB: db}).Checkpoints(store).Build()
	if err != nil {
		return err
	}
	res, err := p.Sync(ctx)
	if errors.Is(err, context.Canceled) {
		fmt.Println("interrupted: run it again to continue from the last checkpoint")
		return nil
	} else if err != nil {
		return err
	}
	fmt.Printf("%s/*.ndjson → %s: %d epoch(s) committed, up to epoch %d\n", in, filepath.Join(*dir, "out.db"), res.Epochs, res.Epoch)
	for _, stream := range slices.Sorted(maps.Keys(res.Totals)) {
		var rows int
		var last Row
		if err := ReadTable(ctx, db, stream, func(r Row) { rows, last = rows+1, r }); err != nil {
			return err
		}
		fmt.Printf("  table %-10s %4d rows (%d added now, %d quarantined in all), the last: %v\n",
			stream, rows, res.Streams[stream].Written, res.Totals[stream].Quarantined, last.Values)
	}
	fmt.Printf("quarantined records, with the reason: %s\n", filepath.Join(*dir, "checkpoints", "connector", "_quarantine"))
	return nil
}

// samples are the input files the first run starts with (the tests read
// them too): lines of JSON documents, blank lines, one that is not JSON,
// and a last line of orders that has no newline yet.
//
//go:embed sample/*.ndjson
var samples embed.FS

// sample copies the sample files into dir when it does not exist.
func sample(dir string) error {
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	sub, err := fs.Sub(samples, "sample")
	if err != nil {
		return err
	}
	return os.CopyFS(dir, sub)
}
