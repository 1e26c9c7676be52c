package iceberg_test

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// failingStore fails its next Commit (the checkpoint write) when armed,
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

// After a sync that fails at the staging step (PreCommit's response
// lost: the data files are written, the attempt fails) and one that
// fails at the checkpoint write, the next sync removes the data files
// they wrote: no snapshot-less data file is left in any table (HEAD is
// applied), the event counts the files removed, a data file another
// writer left is kept, and the tables hold every record once.
func TestCollectAfterFailedSyncs(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	inner, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close(ctx) })
	store := &failingStore{Store: inner}
	dst := newDest(t, wh.cat, iceberg.Config{Namespace: []string{"gc"}})
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
	const rows = 300
	src, err := faker.New(faker.Config{Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("icegc").From(src).To(faulty).Checkpoints(store).Lanes(2).
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
	// unreferenced lists the data files no snapshot of a table refers
	// to, by iceberg-go's own orphan scan.
	unreferenced := func() []string {
		t.Helper()
		var out []string
		for ident, err := range wh.cat.ListTables(ctx, table.Identifier{"gc"}) {
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := wh.cat.LoadTable(ctx, ident)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(0))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range plan.Files() {
				if strings.HasSuffix(f, ".parquet") && path.Base(path.Dir(f)) == "data" {
					out = append(out, f)
				}
			}
		}
		return out
	}

	mu.Lock()
	preFail = true
	mu.Unlock()
	if _, err := p.Sync(ctx); !errors.Is(err, sinktest.ErrFakeFault) {
		t.Fatalf("sync with PreCommit failing: %v, want the injected fault", err)
	}
	afterStaging := len(unreferenced())
	mu.Lock()
	preFail = false
	mu.Unlock()
	store.arm()
	if _, err := p.Sync(ctx); !errors.Is(err, errStoreDown) {
		t.Fatalf("sync with the checkpoint write failing: %v, want the injected store error", err)
	}
	left := unreferenced()
	if afterStaging == 0 || len(left) == 0 {
		t.Fatalf("unreferenced data files after the failed syncs: %d, then %d; want some from each", afterStaging, len(left))
	}
	t.Logf("data files left by the staging failure: %d, by the checkpoint failure: %d", afterStaging, len(left))
	// A file another writer left (a random version 4 UUID, as
	// compaction's are) is not the pipeline's to remove.
	other := strings.Replace(left[0], path.Base(left[0]), "00000-0-3f2b8a6e-1c4d-4e5f-9a7b-0123456789ab-00001.parquet", 1)
	copyFile(t, strings.TrimPrefix(left[0], "file://"), strings.TrimPrefix(other, "file://"))

	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := unreferenced(); len(got) != 1 || got[0] != other {
		t.Errorf("unreferenced data files after the clean sync: %v, want only the other writer's %s", got, other)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(collected) != 2 || collected[0].Collected.Removed != afterStaging || collected[1].Collected.Removed != len(left) ||
		collected[1].Collected.Bytes <= 0 {
		t.Fatalf("staging.collected events: %+v, want two, counting %d and %d files removed", collected, afterStaging, len(left))
	}
	for ident, err := range wh.cat.ListTables(ctx, table.Identifier{"gc"}) {
		if err != nil {
			t.Fatal(err)
		}
		got, err := scan(ctx, wh.cat, "gc", ident[len(ident)-1])
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, r := range got {
			ids[r.ID] = true
		}
		if len(got) != rows || len(ids) != rows {
			t.Errorf("table %v: %d rows, %d distinct ids; want %d each", ident, len(got), len(ids), rows)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
