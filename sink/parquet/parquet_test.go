package parquet_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

func TestNew(t *testing.T) {
	if _, err := parquet.New(parquet.Config{}); err == nil {
		t.Error("New without a bucket: no error")
	}
	b := buckets[0].open(t)
	if _, err := parquet.New(parquet.Config{Bucket: b, Compression: 99}); err == nil {
		t.Error("New with an unknown codec: no error")
	}
	if _, err := parquet.New(parquet.Config{Bucket: b, RowGroupRows: -1}); err == nil {
		t.Error("New with negative RowGroupRows: no error")
	}
	d := newDest(t, b, parquet.Config{})
	if d.Class() != sink.StageAndApply {
		t.Errorf("Class = %v", d.Class())
	}
	if !reflect.DeepEqual(d.Capabilities(), sink.Capabilities{Unsupported: []string{"interval", "duration"}, Patches: true}) {
		t.Errorf("Capabilities = %+v", d.Capabilities())
	}
	for _, bad := range []string{"", "a/b", "..", "."} {
		if _, err := d.Writer(context.Background(), sink.WriterConfig{Pipeline: bad}); err == nil {
			t.Errorf("Writer(pipeline %q): no error", bad)
		}
	}
	w := newWriter(t, d, "p", 0)
	rec := batch(t, 0, 1, false)
	defer rec.Release()
	for _, bad := range []string{"", "a/b", "_staging", "_openetl"} {
		if err := w.Write(context.Background(), bad, rec); err == nil {
			t.Errorf("Write(stream %q): no error", bad)
		}
	}
}

// Two lanes, two streams, three epochs: every row read back once, with its
// values, from the files the manifests list.
func TestWriteCommitRead(t *testing.T) {
	for _, prefix := range []string{"", "lake/x"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
				d := newDest(t, b, parquet.Config{Prefix: prefix, RowGroupRows: 100})
				w0, w1 := newWriter(t, d, "p", 0), newWriter(t, d, "p", 1)
				if out := recoverGen(t, w0, 1, nil); out != sink.Applied {
					t.Fatalf("Recover(nil) = %v", out)
				}
				var nOrders, nUsers int64
				for epoch := uint64(1); epoch <= 3; epoch++ {
					for i := 0; i < 3; i++ {
						write(t, w0, "orders", nOrders, 150, false)
						write(t, w1, "orders", nOrders+150, 50, false)
						nOrders += 200
					}
					if epoch != 2 { // epoch 2 has no users
						write(t, w1, "users", nUsers, 77, false)
						nUsers += 77
					}
					c0, c1 := preCommit(t, w0, epoch), preCommit(t, w1, epoch)
					commit(t, w0, epoch, c0, c1)
					m := manifest(t, b, prefix, "orders")
					if m.Epoch != epoch || m.Version != epoch || m.Pipeline != "p" || m.Generation != 1 {
						t.Errorf("epoch %d: orders manifest %+v", epoch, m)
					}
				}
				ids, _ := readStream(t, b, norm(prefix), "orders")
				wantIDs(t, ids, nOrders)
				ids, _ = readStream(t, b, norm(prefix), "users")
				wantIDs(t, ids, nUsers)
				m := manifest(t, b, prefix, "users")
				if m.Epoch != 3 || m.Version != 2 || len(m.Files) != 2 || m.Files[0].Epoch != 1 || m.Files[1].Epoch != 3 {
					t.Errorf("users manifest %+v", m)
				}
				if got := keys(t, b, norm(prefix)+"_staging/"); len(got) != 0 {
					t.Errorf("staged files left after Commit: %v", got)
				}
				streams, err := parquet.Streams(context.Background(), b, prefix)
				if err != nil || strings.Join(streams, ",") != "orders,users" {
					t.Errorf("Streams = %v, %v", streams, err)
				}
			})
		})
	}
}

func TestStagedInvisibleBeforeCommit(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		write(t, w, "orders", 0, 10, false)
		c := preCommit(t, w, 1)
		if got := keys(t, b, "orders/"); !slices.Equal(got, []string{"orders/_owner.json"}) {
			t.Errorf("before Commit, orders/ holds %v, want only the owner marker", got)
		}
		if got := keys(t, b, "_staging/p/orders/"); len(got) != 1 {
			t.Errorf("staged: %v, want 1 file", got)
		}
		if _, err := parquet.ReadManifest(context.Background(), b, "", "orders"); !errors.Is(err, parquet.ErrNoManifest) {
			t.Errorf("ReadManifest before Commit: %v, want ErrNoManifest", err)
		}
		if s, err := parquet.Streams(context.Background(), b, ""); err != nil || len(s) != 0 {
			t.Errorf("Streams before Commit = %v, %v", s, err)
		}
		var parsed struct {
			Files []struct{ Stream, Staged, Final string }
		}
		if err := json.Unmarshal(c, &parsed); err != nil || len(parsed.Files) != 1 ||
			!strings.HasPrefix(parsed.Files[0].Final, "orders/data/00000000000000000001-l0-") {
			t.Errorf("committable %s (%v)", c, err)
		}
		commit(t, w, 1, c)
		ids, _ := readStream(t, b, "", "orders")
		wantIDs(t, ids, 10)
	})
}

func TestEmptyEpoch(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		c := preCommit(t, w, 1)
		var parsed struct{ Files []any }
		if err := json.Unmarshal(c, &parsed); err != nil || len(parsed.Files) != 0 {
			t.Errorf("empty epoch committable %s (%v)", c, err)
		}
		commit(t, w, 1, c)
		if out := recoverGen(t, w, 1, record("p", 1, 1, c)); out != sink.Applied {
			t.Errorf("Recover of an empty epoch = %v", out)
		}
		if got := keys(t, b, ""); len(got) != 1 || !strings.HasPrefix(got[0], "_openetl/p/fence/") {
			t.Errorf("an empty epoch wrote %v", got)
		}
	})
}

// Commit again, from the same writer and from a writer of a later attempt
// (as after a crash between Commit and the next checkpoint), changes
// nothing.
func TestCommitIdempotent(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		write(t, w, "orders", 0, 10, false)
		write(t, w, "users", 0, 5, false)
		c := preCommit(t, w, 1)
		commit(t, w, 1, c)
		commit(t, w, 1, c)

		w2 := newWriter(t, newDest(t, b, parquet.Config{}), "p", 0)
		if out := recoverGen(t, w2, 2, record("p", 1, 1, c)); out != sink.Applied {
			t.Errorf("Recover after Commit = %v, want applied", out)
		}
		commit(t, w2, 1, c)
		for _, s := range []string{"orders", "users"} {
			m := manifest(t, b, "", s)
			if m.Version != 1 || len(m.Files) != 1 || m.Generation != 1 {
				t.Errorf("%s manifest after repeated Commits: %+v", s, m)
			}
		}
		ids, _ := readStream(t, b, "", "orders")
		wantIDs(t, ids, 10)
	})
}

// A crash after the files were copied and one stream's manifest was
// written but before the staged copies of the others were applied: the
// next attempt's Recover says recoverable and its Commit finishes the job
// without a duplicate.
func TestCommitResumesPartialApply(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		write(t, w, "a", 0, 10, false)
		write(t, w, "b", 0, 10, false)
		c := preCommit(t, w, 1)
		// Apply only stream a, as a Commit that died half way would.
		var cm map[string]any
		if err := json.Unmarshal(c, &cm); err != nil {
			t.Fatal(err)
		}
		files := cm["files"].([]any)
		var onlyA []any
		for _, f := range files {
			if f.(map[string]any)["stream"] == "a" {
				onlyA = append(onlyA, f)
			}
		}
		cm["files"] = onlyA
		partial, _ := json.Marshal(cm)
		commit(t, w, 1, partial)

		w2 := newWriter(t, d, "p", 0)
		if out := recoverGen(t, w2, 2, record("p", 1, 1, c)); out != sink.Recoverable {
			t.Fatalf("Recover = %v, want recoverable", out)
		}
		commit(t, w2, 1, c)
		for _, s := range []string{"a", "b"} {
			ids, _ := readStream(t, b, "", s)
			wantIDs(t, ids, 10)
		}
		if m := manifest(t, b, "", "a"); m.Version != 1 {
			t.Errorf("a re-applied: %+v", m)
		}
	})
}

func TestSchemaChangeMidEpoch(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		write(t, w, "orders", 0, 30, false)
		write(t, w, "orders", 30, 20, true) // the engine added a column
		write(t, w, "orders", 50, 10, true)
		commit(t, w, 1, preCommit(t, w, 1))
		m := manifest(t, b, "", "orders")
		if len(m.Files) != 2 || m.Files[0].Rows != 30 || m.Files[1].Rows != 30 {
			t.Fatalf("manifest %+v, want 2 files of 30 rows", m)
		}
		ids, schemas := readStream(t, b, "", "orders")
		wantIDs(t, ids, 60)
		if schemas[0].NumFields() != 4 || schemas[1].NumFields() != 5 {
			t.Errorf("schemas %v / %v", schemas[0], schemas[1])
		}
	})
}

func TestRollsPastTargetFileBytes(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{RowGroupRows: 50, TargetFileBytes: 5})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		for i := int64(0); i < 5; i++ {
			write(t, w, "orders", i*40, 40, false)
		}
		commit(t, w, 1, preCommit(t, w, 1))
		m := manifest(t, b, "", "orders")
		// A new file holds only the 4-byte magic, under 5 bytes; 40 rows fit
		// the first row group, the second write flushes it and the file
		// passes 5 bytes: files of 80, 80 and 40 rows.
		if len(m.Files) != 3 || m.Files[0].Rows != 80 || m.Files[1].Rows != 80 || m.Files[2].Rows != 40 {
			t.Errorf("%d files, want 3: %+v", len(m.Files), m.Files)
		}
		ids, _ := readStream(t, b, "", "orders")
		wantIDs(t, ids, 200)
	})
}

func TestRecoverOutcomes(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		w1 := newWriter(t, d, "p", 1)
		recoverGen(t, w, 1, nil)
		write(t, w, "orders", 0, 10, false)
		write(t, w1, "orders", 10, 10, false)
		c0, c1 := preCommit(t, w, 1), preCommit(t, w1, 1)
		head := record("p", 1, 1, c0, c1)

		next := func(gen int) sink.Writer { return newWriter(t, d, "p", 0) } // gen: for the reader
		if out := recoverGen(t, next(2), 2, head); out != sink.Recoverable {
			t.Errorf("before Commit: %v, want recoverable", out)
		}
		// A new attempt applies it from the committables.
		w3 := next(3)
		recoverGen(t, w3, 3, head)
		commit(t, w3, 1, c0, c1)
		if out := recoverGen(t, next(4), 4, head); out != sink.Applied {
			t.Errorf("after Commit: %v, want applied", out)
		}

		// Epoch 2: lose lane 1's staged file.
		w5 := next(5)
		recoverGen(t, w5, 5, head)
		write(t, w, "orders", 20, 10, false)
		write(t, w1, "orders", 30, 10, false)
		c0, c1 = preCommit(t, w, 2), preCommit(t, w1, 2)
		head = record("p", 2, 5, c0, c1)
		staged := keys(t, b, "_staging/p/orders/")
		if len(staged) != 2 {
			t.Fatalf("staged %v", staged)
		}
		if err := b.Delete(context.Background(), staged[1]); err != nil {
			t.Fatal(err)
		}
		w6 := next(6)
		if out := recoverGen(t, w6, 6, head); out != sink.Lost {
			t.Errorf("with a staged file gone: %v, want lost", out)
		}
		if err := w6.Commit(context.Background(), 2, []sink.Committable{c0, c1}); err == nil || errors.Is(err, sink.ErrFenced) {
			t.Errorf("Commit of a lost epoch: %v, want an error saying it is lost", err)
		}
		ids, _ := readStream(t, b, "", "orders")
		wantIDs(t, ids, 20)
	})
}

func TestFencing(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{})
		zombie := newWriter(t, d, "p", 0)
		recoverGen(t, zombie, 1, nil)
		write(t, zombie, "orders", 0, 10, false)
		c := preCommit(t, zombie, 1)

		w2 := newWriter(t, d, "p", 0)
		recoverGen(t, w2, 2, nil)
		err := zombie.Commit(context.Background(), 1, []sink.Committable{c})
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("zombie Commit: %v, want ErrFenced", err)
		}
		if _, err := parquet.ReadManifest(context.Background(), b, "", "orders"); !errors.Is(err, parquet.ErrNoManifest) {
			t.Errorf("zombie's Commit left a manifest (%v)", err)
		}
		// The fence never goes down.
		if _, err := zombie.Recover(context.Background(), 1, nil); !errors.Is(err, sink.ErrFenced) {
			t.Errorf("Recover(1) after Recover(2): %v, want ErrFenced", err)
		}
		// Recovering the same generation again is fine, and another
		// pipeline has a fence of its own.
		recoverGen(t, w2, 2, nil)
		recoverGen(t, newWriter(t, d, "other", 0), 1, nil)
		// The new attempt applies the committed epoch.
		commit(t, w2, 1, c)
		ids, _ := readStream(t, b, "", "orders")
		wantIDs(t, ids, 10)
		if got := keys(t, b, "_openetl/p/fence/"); len(got) != 1 {
			t.Errorf("fence markers %v, want only the newest", got)
		}
	})
}

// The commit goroutine applies epoch N while the lane writes epoch N+1.
func TestCommitWhileWriting(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{RowGroupRows: 64})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		const epochs, perEpoch = 8, 500
		commits := make(chan struct {
			epoch uint64
			c     sink.Committable
		}, epochs)
		var wg sync.WaitGroup
		var commitErr error
		wg.Go(func() {
			for e := range commits {
				if err := w.Commit(context.Background(), e.epoch, []sink.Committable{e.c}); err != nil && commitErr == nil {
					commitErr = err
				}
			}
		})
		var n int64
		for epoch := uint64(1); epoch <= epochs; epoch++ {
			for i := 0; i < 5; i++ {
				write(t, w, "orders", n, perEpoch/5, false)
				write(t, w, "users", n, perEpoch/5, false)
				n += perEpoch / 5
			}
			commits <- struct {
				epoch uint64
				c     sink.Committable
			}{epoch, preCommit(t, w, epoch)}
		}
		close(commits)
		wg.Wait()
		if commitErr != nil {
			t.Fatal(commitErr)
		}
		for _, s := range []string{"orders", "users"} {
			ids, _ := readStream(t, b, "", s)
			wantIDs(t, ids, n)
			if m := manifest(t, b, "", s); m.Epoch != epochs || m.Version != epochs {
				t.Errorf("%s manifest epoch %d version %d", s, m.Epoch, m.Version)
			}
		}
	})
}

func TestCloseDiscardsUnflushed(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		d := newDest(t, b, parquet.Config{RowGroupRows: 10, TargetFileBytes: 1})
		w, err := d.Writer(context.Background(), sink.WriterConfig{Pipeline: "p"})
		if err != nil {
			t.Fatal(err)
		}
		recoverGen(t, w, 1, nil)
		write(t, w, "orders", 0, 10, false)
		commit(t, w, 1, preCommit(t, w, 1))
		write(t, w, "orders", 10, 25, false) // rolls: one staged file, one open
		if got := keys(t, b, "_staging/"); len(got) == 0 {
			t.Fatal("no file rolled before Close")
		}
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := keys(t, b, "_staging/"); len(got) != 0 {
			t.Errorf("Close left %v", got)
		}
		ids, _ := readStream(t, b, "", "orders")
		wantIDs(t, ids, 10)
		if err := w.Write(context.Background(), "orders", batch(t, 0, 1, false)); err == nil {
			t.Error("Write after Close: no error")
		}
	})
}

// Two pipelines on one prefix: the second one's first Write of a
// stream the first one writes fails (an *OwnerError naming both),
// before it stages anything, on every backend; a stream of its own is
// fine.
func TestOtherPipelineSameStream(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) { testOtherPipeline(t, b, "") })
}

func testOtherPipeline(t *testing.T, b *blob.Bucket, prefix string) {
	ctx := context.Background()
	d := newDest(t, b, parquet.Config{Prefix: prefix})
	p := newWriter(t, d, "p", 0)
	recoverGen(t, p, 1, nil)
	write(t, p, "orders", 0, 1, false)
	q := newWriter(t, d, "q", 0)
	recoverGen(t, q, 1, nil)
	rec := batch(t, 0, 1, false)
	defer rec.Release()
	err := q.Write(ctx, "orders", rec)
	var oe *parquet.OwnerError
	if !errors.As(err, &oe) || !errors.Is(err, parquet.ErrOwned) || oe.Owner != "p" || oe.Pipeline != "q" || oe.Stream != "orders" ||
		!strings.Contains(err.Error(), `"p"`) || !strings.Contains(err.Error(), `"q"`) {
		t.Fatalf("Write of p's stream by q: %v, want an *OwnerError naming both", err)
	}
	t.Log(err)
	if got := keys(t, b, norm(prefix)+"_staging/q/"); len(got) != 0 {
		t.Errorf("q staged %v", got)
	}
	// p goes on; q writes a stream of its own under the same prefix.
	commit(t, p, 1, preCommit(t, p, 1))
	write(t, q, "users", 0, 2, false)
	c := preCommit(t, q, 1)
	commit(t, q, 1, c)
	if m := manifest(t, b, prefix, "users"); m.Pipeline != "q" || len(m.Files) != 1 {
		t.Errorf("q's stream: manifest %+v", m)
	}
	// A new writer of q (a later attempt) is refused too, at once.
	q2 := newWriter(t, d, "q", 0)
	recoverGen(t, q2, 2, record("q", 1, 1, c))
	if err := q2.Write(ctx, "orders", rec); !errors.Is(err, parquet.ErrOwned) {
		t.Errorf("Write of p's stream by q's next attempt: %v, want ErrOwned", err)
	}
}

// A writer given its streams' specs claims them at Recover, before
// anything is read: another pipeline's Recover then fails for a stream
// the first one has, and claims none of its own streams.
func TestRecoverClaimsTheSpecsStreams(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		d := newDest(t, b, parquet.Config{})
		specs := func(tables ...string) []sink.StreamSpec {
			var out []sink.StreamSpec
			for _, tb := range tables {
				out = append(out, sink.StreamSpec{Stream: tb, Table: tb})
			}
			return out
		}
		p, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "p", Streams: specs("orders")})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(ctx)
		recoverGen(t, p, 1, nil)
		if got := keys(t, b, ""); !slices.Contains(got, "orders/_owner.json") {
			t.Fatalf("after p's Recover: %v, want orders/_owner.json", got)
		}
		q, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "q", Streams: specs("audit", "orders")})
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close(ctx)
		_, err = q.Recover(ctx, 1, nil)
		var oe *parquet.OwnerError
		if !errors.As(err, &oe) || oe.Stream != "orders" || oe.Owner != "p" || oe.Pipeline != "q" {
			t.Fatalf("q's Recover: %v, want an *OwnerError for orders, owned by p", err)
		}
		if got := keys(t, b, ""); slices.Contains(got, "audit/_owner.json") || slices.ContainsFunc(got, func(k string) bool {
			return strings.HasPrefix(k, "_openetl/q/")
		}) {
			t.Errorf("the refused Recover wrote %v", got)
		}
	})
}

// A stream written before owners were recorded (a manifest, no marker)
// belongs to the pipeline its manifest names.
func TestOwnerOfAnOlderStream(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		d := newDest(t, b, parquet.Config{})
		p := newWriter(t, d, "p", 0)
		recoverGen(t, p, 1, nil)
		write(t, p, "orders", 0, 1, false)
		c := preCommit(t, p, 1)
		commit(t, p, 1, c)
		if err := b.Delete(ctx, "orders/_owner.json"); err != nil {
			t.Fatal(err)
		}
		q := newWriter(t, d, "q", 0)
		recoverGen(t, q, 1, nil)
		rec := batch(t, 0, 1, false)
		defer rec.Release()
		var oe *parquet.OwnerError
		if err := q.Write(ctx, "orders", rec); !errors.As(err, &oe) || oe.Owner != "p" {
			t.Fatalf("Write of an older stream of p by q: %v, want an *OwnerError naming p", err)
		}
		if ok, _ := b.Exists(ctx, "orders/_owner.json"); ok {
			t.Error("the refused writer recorded an owner")
		}
		p2 := newWriter(t, d, "p", 0)
		recoverGen(t, p2, 2, record("p", 1, 1, c))
		write(t, p2, "orders", 1, 1, false) // p claims it now
		if ok, _ := b.Exists(ctx, "orders/_owner.json"); !ok {
			t.Error("p's writer recorded no owner")
		}
	})
}

func norm(prefix string) string {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return prefix + "/"
	}
	return prefix
}
