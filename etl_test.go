package etl_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

func TestBuildNamesEveryMissingPart(t *testing.T) {
	_, err := etl.NewPipeline("bad name!").Lanes(-2).Build()
	if err == nil {
		t.Fatal("Build succeeded without parts")
	}
	var be *etl.BuildError
	if !errors.As(err, &be) || be.Pipeline != "bad name!" {
		t.Fatalf("want a *BuildError for the pipeline, got %T %v", err, err)
	}
	for _, part := range []string{"name", "source", "destination", "checkpoints", "lanes"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not name %q", err, part)
		}
	}
}

// TestTwoAttemptsAtOnce runs a continuous attempt A and, while it runs, a
// sync B of the same pipeline on the same store. A must stop with a
// fenced error; after a final sync the output has every record once.
func TestTwoAttemptsAtOnce(t *testing.T) {
	dir := t.TempDir()
	tables, ckpts := filepath.Join(dir, "tables"), filepath.Join(dir, "checkpoints")
	const rows = 20_000
	// build makes the pipeline; with release set, its splits hold 1000
	// records in until release is closed.
	build := func(rate float64, release <-chan struct{}) *etl.Pipeline {
		t.Helper()
		fk, err := faker.New(faker.Config{Seed: 7, Rows: rows, Rate: rate})
		if err != nil {
			t.Fatal(err)
		}
		var src source.Source = fk
		if release != nil {
			src = testutil.HoldUntil(fk, 1000, release)
		}
		bucket, err := fileblob.OpenBucket(tables, &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bucket.Close() })
		dst, err := parquet.New(parquet.Config{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		store, err := checkpoint.OpenDir(ckpts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		p, err := etl.NewPipeline("twice").From(src).To(dst).Checkpoints(store).EpochEvery(50*time.Millisecond, 0).Build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// committed waits until p's attempt has committed an epoch: it has
	// claimed the pipeline and runs.
	committed := func(p *etl.Pipeline, failed <-chan error) bool {
		ok := true
		testutil.Until(t, p.Name()+" to commit an epoch", func() bool {
			select {
			case err := <-failed:
				t.Errorf("%s ended before it committed an epoch: %v", p.Name(), err)
				ok = false
				return true
			default:
			}
			return p.Status().Epochs > 0
		})
		return ok
	}
	// A, a Run, holds part way until B has committed: it has rows left
	// to read then, so it goes on to a HEAD write that finds B's claim
	// (a Run that had read everything would idle, never fenced).
	releaseA := make(chan struct{})
	a := build(5000, releaseA)
	errA := make(chan error, 1)
	go func() { errA <- a.Run(context.Background()) }()
	if !committed(a, errA) {
		t.FailNow()
	}

	// B runs until it committed an epoch of its own.
	b := build(5000, nil)
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(ctxB) }()
	if !committed(b, bDone) {
		t.FailNow()
	}
	cancelB()
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
	close(releaseA)
	if err := testutil.Recv(t, "A to stop after B claimed the pipeline", errA); !etl.IsFenced(err) {
		t.Fatalf("A: want a fenced error, got %v", err)
	}
	res, err := build(0, nil).Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Generation != 3 {
		t.Errorf("final sync generation %d, want 3", res.Generation)
	}
	got := testutil.ReadParquetTables(t, tables)
	for _, stream := range []string{faker.Customers, faker.Orders} {
		st := got[stream]
		if st == nil || st.Rows != rows || st.DistinctIDs != rows || st.DistinctSeqs != rows {
			t.Fatalf("stream %s: %+v, want %d rows, ids and seqs", stream, st, rows)
		}
		if st.Seqs[0] != 1 || st.Seqs[rows-1] != rows {
			t.Fatalf("stream %s: seqs from %d to %d", stream, st.Seqs[0], st.Seqs[rows-1])
		}
		if c := res.Totals[stream]; c.Read != rows || c.Written != rows {
			t.Errorf("stream %s totals %+v", stream, c)
		}
	}
}
