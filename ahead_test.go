package etl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
	"github.com/openetl/etl/source/sourcetest"
)

// TestLostCheckpointStore syncs into sink/parquet in two attempts (the
// destination's fence ends at generation 2, its manifests at the second
// attempt's last epoch), loses the checkpoint store and syncs on with an
// empty one. Every sync of the new history, whatever generation it gets
// (below, at and above the fence), must fail with sink.ErrAhead before
// writing anything, not report rows written that never land, and must
// not look fenced. Restoring the store then carries on where it left
// off, with every record once.
func TestLostCheckpointStore(t *testing.T) {
	dir := t.TempDir()
	tables, ckpts, saved := filepath.Join(dir, "tables"), filepath.Join(dir, "checkpoints"), filepath.Join(dir, "saved")
	bucket, err := fileblob.OpenBucket(tables, &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	build := func(rows int64) *etl.Pipeline {
		t.Helper()
		src, err := faker.New(faker.Config{Seed: 3, Rows: rows})
		if err != nil {
			t.Fatal(err)
		}
		store, err := checkpoint.OpenDir(ckpts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(context.Background()) })
		p, err := etl.NewPipeline("lost").From(src).To(dst).Checkpoints(store).Build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	for _, rows := range []int64{5_000, 10_000} {
		if _, err := build(rows).Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := testutil.ReadParquetTables(t, tables)
	if err := os.CopyFS(saved, os.DirFS(ckpts)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ckpts); err != nil {
		t.Fatal(err)
	}

	// Generations 1 and 2 of the new log are at or below the
	// destination's fence, 3 and 4 above it.
	for gen := checkpoint.Generation(1); gen <= 4; gen++ {
		res, err := build(20_000).Sync(ctx)
		if !errors.Is(err, sink.ErrAhead) {
			t.Fatalf("sync %d with an empty checkpoint store: %v (result %+v), want an error wrapping sink.ErrAhead", gen, err, res)
		}
		var ae *sink.AheadError
		if !errors.As(err, &ae) || ae.Pipeline != "lost" {
			t.Errorf("sync %d: error %T %v is not a *sink.AheadError for pipeline \"lost\"", gen, err, err)
		}
		if etl.IsFenced(err) {
			t.Errorf("sync %d: %v: looks fenced, but nothing newer runs", gen, err)
		}
		if !etl.IsPermanent(err) || etl.IsRetryable(err) {
			t.Errorf("sync %d: %v: IsPermanent %v, IsRetryable %v; want a permanent error", gen, err, etl.IsPermanent(err), etl.IsRetryable(err))
		}
		for _, want := range []string{"checkpoint", "restore", "start over"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("sync %d: error %q does not say %q", gen, err, want)
			}
		}
		if res.Generation != gen || res.Epochs != 0 || len(res.Streams) != 0 {
			t.Errorf("sync %d: result %+v, want generation %d and nothing committed", gen, res, gen)
		}
	}
	after := testutil.ReadParquetTables(t, tables)
	for _, stream := range []string{faker.Customers, faker.Orders} {
		if b, a := before[stream], after[stream]; b == nil || a == nil || a.Rows != b.Rows || a.Rows != 10_000 {
			t.Fatalf("stream %s: %+v rows before the store was lost, %+v after the refused syncs, want 10000 both", stream, b, a)
		}
	}

	// Restoring the store carries on from its last epoch.
	if err := os.RemoveAll(ckpts); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(ckpts, os.DirFS(saved)); err != nil {
		t.Fatal(err)
	}
	res, err := build(20_000).Sync(ctx)
	if err != nil {
		t.Fatalf("sync after restoring the store: %v", err)
	}
	if res.Generation != 3 {
		t.Errorf("sync after restoring the store: generation %d, want 3", res.Generation)
	}
	got := testutil.ReadParquetTables(t, tables)
	for _, stream := range []string{faker.Customers, faker.Orders} {
		st := got[stream]
		if st == nil || st.Rows != 20_000 || st.DistinctIDs != 20_000 || st.DistinctSeqs != 20_000 {
			t.Fatalf("stream %s after the restored store's sync: %+v, want 20000 rows, ids and seqs", stream, st)
		}
		if c := res.Streams[stream]; c.Written != 10_000 {
			t.Errorf("stream %s: the restored store's sync wrote %d, want 10000", stream, c.Written)
		}
	}
}

// TestLostCheckpointStoreFakes loses the checkpoint store of a pipeline
// from a sourcetest fake into a sinktest fake. The correct fake refuses
// the new log's syncs; the one that skips the check (FakeSkipAhead) shows
// what the check prevents: once the new log's generation passes the
// fence, a sync reports its rows written while the destination skips
// them as applied.
func TestLostCheckpointStoreFakes(t *testing.T) {
	for _, broken := range []sinktest.FakeBroken{sinktest.FakeCorrect, sinktest.FakeSkipAhead} {
		t.Run(broken.String(), func(t *testing.T) {
			ctx := context.Background()
			src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Seed: 5, Live: true, Replay: source.ReplayExact,
				Streams: []sourcetest.FakeStream{{Name: "s", Rows: 300}}})
			dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Broken: broken})
			build := func(store checkpoint.Store) *etl.Pipeline {
				t.Helper()
				p, err := etl.NewPipeline("fakes").From(src).To(dst).Checkpoints(store).Build()
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			old := checkpoint.NewMem()
			for _, n := range []int{100, 200} {
				src.SetHorizon(n)
				if _, err := build(old).Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if f := dst.Fence("fakes"); f != 2 {
				t.Fatalf("fence %d after two syncs, want 2", f)
			}
			src.SetHorizon(300)
			lost := checkpoint.NewMem()
			for gen := checkpoint.Generation(1); gen <= 3; gen++ {
				res, err := build(lost).Sync(ctx)
				if res.Generation != gen {
					t.Errorf("sync %d of the new log: result generation %d", gen, res.Generation)
				}
				if broken == sinktest.FakeSkipAhead && gen > 1 {
					// Generation 1 is below the fence: the runner tells it
					// apart from a newer attempt whatever the destination.
					if err != nil {
						t.Fatalf("sync %d into the fake that skips the check: %v", gen, err)
					}
					if n, w := len(dst.Rows("s")), res.Streams["s"].Written; n != 200 || w != 300 {
						t.Fatalf("sync %d into the fake that skips the check: %d rows visible, %d reported written; want 200 and 300", gen, n, w)
					}
					return
				}
				if !errors.Is(err, sink.ErrAhead) || etl.IsFenced(err) {
					t.Fatalf("sync %d of the new log: %v, want sink.ErrAhead (and not fenced)", gen, err)
				}
			}
			if n := len(dst.Rows("s")); n != 200 {
				t.Errorf("%d rows visible after the refused syncs, want 200", n)
			}
			if f := dst.Fence("fakes"); f != 2 {
				t.Errorf("fence %d after the refused syncs, want 2 (not raised)", f)
			}
			res, err := build(old).Sync(ctx)
			if err != nil {
				t.Fatalf("sync with the old store: %v", err)
			}
			if n, w := len(dst.Rows("s")), res.Streams["s"].Written; n != 300 || w != 100 {
				t.Errorf("sync with the old store: %d rows visible, %d written; want 300 and 100", n, w)
			}
		})
	}
}
