package parquet_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// held is a CollectRequest.Held that reports the pipeline held.
func held(context.Context) error { return nil }

// Collect removes the staged files no record names, keeps those HEAD
// names, removes nothing when the generation no longer holds the
// pipeline, and does it again without error (idempotent).
func TestCollectStaged(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		d := newDest(t, b, parquet.Config{})
		// Generation 1 commits epoch 1, stages epoch 2 and dies before
		// its record: epoch 2's files are garbage.
		w1 := newWriter(t, d, "p", 0)
		recoverGen(t, w1, 1, nil)
		write(t, w1, "s", 0, 10, false)
		c1 := preCommit(t, w1, 1)
		commit(t, w1, 1, c1)
		write(t, w1, "s", 10, 10, false)
		write(t, w1, "t", 0, 5, false)
		preCommit(t, w1, 2)
		// Generation 2 stages epoch 2 and records it, but dies before
		// Commit: HEAD names its files, which stay.
		w2 := newWriter(t, d, "p", 0)
		recoverGen(t, w2, 2, record("p", 1, 1, c1))
		write(t, w2, "s", 10, 10, false)
		c2 := preCommit(t, w2, 2)
		head := record("p", 2, 2, c2)
		staged := keys(t, b, "_staging/p/")
		if len(staged) != 3 {
			t.Fatalf("staged before Collect: %v, want 3 files (2 of the lost epoch, 1 of HEAD's)", staged)
		}

		fenced := fmt0Err("a newer generation holds it")
		out, err := d.Collect(ctx, sink.CollectRequest{Pipeline: "p", Generation: 3, Head: head,
			Held: func(context.Context) error { return fenced }})
		if !errors.Is(err, fenced) || out.Removed != 0 {
			t.Fatalf("Collect by a generation that no longer holds the pipeline: %+v, %v; want nothing removed and its error", out, err)
		}
		if got := keys(t, b, "_staging/p/"); len(got) != 3 {
			t.Fatalf("staged after a refused Collect: %v, want all 3", got)
		}

		out, err = d.Collect(ctx, sink.CollectRequest{Pipeline: "p", Generation: 3, Head: head, Held: held})
		if err != nil || out.Removed != 2 || out.Kept != 1 || out.Bytes <= 0 {
			t.Fatalf("Collect: %+v, %v; want 2 removed (with their bytes), 1 kept", out, err)
		}
		left := keys(t, b, "_staging/p/")
		if len(left) != 1 || !strings.Contains(string(c2), left[0]) {
			t.Fatalf("staged after Collect: %v, want only HEAD's file", left)
		}
		if out, err := d.Collect(ctx, sink.CollectRequest{Pipeline: "p", Generation: 3, Head: head, Held: held}); err != nil ||
			out.Removed != 0 || out.Kept != 1 {
			t.Fatalf("Collect again: %+v, %v; want nothing more removed", out, err)
		}
		// HEAD's epoch is still recoverable and applies whole.
		w3 := newWriter(t, d, "p", 0)
		if o := recoverGen(t, w3, 3, head); o != sink.Recoverable {
			t.Fatalf("Recover after Collect: %v, want recoverable", o)
		}
		commit(t, w3, 2, c2)
		ids, _ := readStream(t, b, "", "s")
		wantIDs(t, ids, 20)
		if got := keys(t, b, "_staging/"); len(got) != 0 {
			t.Errorf("staged after HEAD's Commit: %v, want none", got)
		}
	})
}

type fmt0Err string

func (e fmt0Err) Error() string { return string(e) }

// The manifests keep the current version and ManifestHistory before it:
// each Commit removes the one that falls out, and Collect removes what
// a destination that kept every version left. A reader following the
// current manifest reads every row.
func TestManifestHistory(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		versions := func() []string {
			t.Helper()
			return keys(t, b, "s/_manifest/")
		}
		all := newDest(t, b, parquet.Config{ManifestHistory: -1})
		w := newWriter(t, all, "p", 0)
		recoverGen(t, w, 1, nil)
		for e := uint64(1); e <= 6; e++ {
			write(t, w, "s", int64(e-1)*10, 10, false)
			commit(t, w, e, preCommit(t, w, e))
		}
		if v := versions(); len(v) != 6 {
			t.Fatalf("versions with ManifestHistory -1: %v, want 6", v)
		}
		two := newDest(t, b, parquet.Config{ManifestHistory: 2})
		out, err := two.Collect(ctx, sink.CollectRequest{Pipeline: "p", Generation: 2, Held: held})
		if err != nil || out.Versions != 3 {
			t.Fatalf("Collect with ManifestHistory 2: %+v, %v; want 3 versions removed", out, err)
		}
		if v := versions(); len(v) != 3 || !strings.HasSuffix(v[0], "00000000000000000004.json") {
			t.Fatalf("versions after Collect: %v, want 4, 5, 6", v)
		}
		w2 := newWriter(t, two, "p", 0)
		recoverGen(t, w2, 2, record("p", 6, 1))
		for e := uint64(7); e <= 9; e++ {
			write(t, w2, "s", int64(e-1)*10, 10, false)
			commit(t, w2, e, preCommit(t, w2, e))
		}
		if v := versions(); len(v) != 3 || !strings.HasSuffix(v[0], "00000000000000000007.json") {
			t.Fatalf("versions after 3 more commits: %v, want 7, 8, 9", v)
		}
		m := manifest(t, b, "", "s")
		if m.Version != 9 || len(m.Files) != 9 {
			t.Fatalf("current manifest: version %d with %d files, want 9 with 9", m.Version, len(m.Files))
		}
		ids, _ := readStream(t, b, "", "s")
		wantIDs(t, ids, 90)
		if _, err := parquet.New(parquet.Config{Bucket: b, ManifestHistory: -2}); err == nil {
			t.Error("New with ManifestHistory -2: no error")
		}
	})
}

// failingStore fails its next Commit (a checkpoint write) when armed,
// before writing anything, as a store outage would.
type failingStore struct {
	checkpoint.Store
	mu   sync.Mutex
	fail bool
}

var errStoreDown = errors.New("injected: checkpoint store unreachable")

func (s *failingStore) arm() { s.mu.Lock(); s.fail = true; s.mu.Unlock() }

func (s *failingStore) Commit(ctx context.Context, gen checkpoint.Generation, rec *checkpoint.Record) error {
	s.mu.Lock()
	fail := s.fail
	s.fail = false
	s.mu.Unlock()
	if fail {
		return errStoreDown
	}
	return s.Store.Commit(ctx, gen, rec)
}

func (s *failingStore) ListFiles(ctx context.Context, pipeline, prefix string) ([]string, error) {
	return s.Store.(checkpoint.FileLister).ListFiles(ctx, pipeline, prefix)
}

func (s *failingStore) DeleteFile(ctx context.Context, pipeline, name string) error {
	return s.Store.(checkpoint.FileDeleter).DeleteFile(ctx, pipeline, name)
}

// After syncs that fail at the staging step (PreCommit's response lost:
// the files are staged, the attempt fails) and at the checkpoint step
// (the record's write fails after every lane staged), the next Sync
// removes what they staged: _staging/ then holds only what HEAD names
// (nothing, HEAD being applied), the event counts the files removed,
// and the stream holds every row once.
func TestCollectAfterFailedSyncs(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		b, err := parquet.OpenDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		testCollectAfterFailedSyncs(t, b, "")
	})
	t.Run("s3", func(t *testing.T) {
		b, prefix := s3Bucket(t)
		testCollectAfterFailedSyncs(t, b, prefix)
	})
}

func testCollectAfterFailedSyncs(t *testing.T, b *blob.Bucket, prefix string) {
	ctx := context.Background()
	inner, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close(ctx) })
	store := &failingStore{Store: inner}
	dst, err := parquet.New(parquet.Config{Bucket: b, Prefix: prefix, RowGroupRows: 16})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		preFail   bool
		collected []etl.Event
	)
	faulty := sinktest.WithFaults(dst, sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
		mu.Lock()
		defer mu.Unlock()
		if c.Op == sinktest.FakePreCommit && preFail {
			return &sinktest.FakeFault{After: true}
		}
		return nil
	}})
	const rows = 200
	src, err := faker.New(faker.Config{Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("gc").From(src).To(faulty).Checkpoints(store).Lanes(2).
		OnEvent(func(e etl.Event) {
			if e.Kind == etl.EventStagingCollected {
				mu.Lock()
				collected = append(collected, e)
				mu.Unlock()
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })
	stagingDir := norm(prefix) + "_staging/gc/"

	mu.Lock()
	preFail = true
	mu.Unlock()
	if _, err := p.Sync(ctx); !errors.Is(err, sinktest.ErrFakeFault) {
		t.Fatalf("sync with PreCommit failing: %v, want the injected fault", err)
	}
	afterStaging := len(keys(t, b, stagingDir))
	mu.Lock()
	preFail = false
	mu.Unlock()
	store.arm()
	if _, err := p.Sync(ctx); !errors.Is(err, errStoreDown) {
		t.Fatalf("sync with the checkpoint write failing: %v, want the injected store error", err)
	}
	// The second sync removed what the first left before it staged
	// files of its own.
	left := keys(t, b, stagingDir)
	if afterStaging == 0 || len(left) == 0 {
		t.Fatalf("staged after the failed syncs: %d, then %d files; want some from each", afterStaging, len(left))
	}
	t.Logf("staged files left by the staging failure: %d, by the checkpoint failure: %d", afterStaging, len(left))

	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, b, stagingDir); len(got) != 0 {
		t.Errorf("staged after the clean sync: %v, want none (HEAD is applied)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	// On S3 an upload the failed first Sync cancelled can still land after
	// Sync returned (the server had its body): the collection then counts
	// it too. On a directory a cancelled write leaves nothing.
	first := len(collected) > 0 && (collected[0].Collected.Removed == afterStaging ||
		prefix != "" && collected[0].Collected.Removed > afterStaging)
	if len(collected) != 2 || !first || collected[1].Collected.Removed != len(left) ||
		collected[1].Collected.Bytes <= 0 || collected[1].Generation != 3 {
		t.Fatalf("staging.collected events: %+v, want two, counting %d and %d files removed", collected, afterStaging, len(left))
	}
	streams, err := parquet.Streams(ctx, b, prefix)
	if err != nil || len(streams) == 0 {
		t.Fatalf("streams: %v, %v", streams, err)
	}
	var n int64
	for _, s := range streams {
		for _, f := range manifest(t, b, prefix, s).Files {
			n += f.Rows
		}
	}
	if n != rows*int64(len(streams)) {
		t.Errorf("rows in the manifests: %d, want %d per stream (%d streams)", n, rows, len(streams))
	}
}
