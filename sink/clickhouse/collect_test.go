package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/clickhouse"
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
// lost: the blocks are staged, the attempt fails) and one that fails at
// the checkpoint write, the next sync drops the blocks they staged: the
// staging tables then hold nothing (HEAD is applied), the event counts
// the blocks dropped, and the tables hold every record once.
func TestCollectAfterFailedSyncs(t *testing.T) {
	ctx := context.Background()
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	inner, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close(ctx) })
	store := &failingStore{Store: inner}
	dst := newDest(t, clickhouse.Config{Conn: conn, Database: db, BlockRows: 50})
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
	src, err := faker.New(faker.Config{Seed: fakerSeed, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("chgc").From(src).To(faulty).Checkpoints(store).Lanes(2).
		Mode(delivery.Merge, faker.Customers).
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
	// staged counts the pipeline's blocks in every staging table.
	staged := func() int {
		t.Helper()
		tables := strings.Fields(clientQuery(t, fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND startsWith(name, '_openetl_stage_')", db)))
		n := 0
		for _, st := range tables {
			out := clientQuery(t, fmt.Sprintf("SELECT uniqExact(_openetl_batch) FROM %s.%s WHERE _openetl_stage_pipeline = 'chgc'", db, st))
			k, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				t.Fatalf("%s: %q", st, out)
			}
			n += k
		}
		return n
	}

	mu.Lock()
	preFail = true
	mu.Unlock()
	if _, err := p.Sync(ctx); !errors.Is(err, sinktest.ErrFakeFault) {
		t.Fatalf("sync with PreCommit failing: %v, want the injected fault", err)
	}
	afterStaging := staged()
	mu.Lock()
	preFail = false
	mu.Unlock()
	store.arm()
	if _, err := p.Sync(ctx); !errors.Is(err, errStoreDown) {
		t.Fatalf("sync with the checkpoint write failing: %v, want the injected store error", err)
	}
	left := staged()
	if afterStaging == 0 || left == 0 {
		t.Fatalf("staged blocks after the failed syncs: %d, then %d; want some from each", afterStaging, left)
	}
	t.Logf("blocks left staged by the staging failure: %d, by the checkpoint failure: %d", afterStaging, left)
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := staged(); n != 0 {
		t.Errorf("blocks staged after the clean sync: %d, want none (HEAD is applied)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(collected) != 2 || collected[0].Collected.Removed != afterStaging || collected[1].Collected.Removed != left {
		t.Fatalf("staging.collected events: %+v, want two, counting %d and %d blocks dropped", collected, afterStaging, left)
	}
	ords := strings.Fields(clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(_openetl_id) FROM %s.orders", db)))
	if strings.Join(ords, " ") != fmt.Sprintf("%d %d", rows, rows) {
		t.Errorf("orders: count and distinct ids %v, want %d each", ords, rows)
	}
}
