package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
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

// dropLog is a slog.Handler that sums the dropped counts of Recover's
// "dropping the staging tables" lines.
type dropLog struct {
	mu      sync.Mutex
	dropped int
}

func (h *dropLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *dropLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *dropLog) WithGroup(string) slog.Handler            { return h }

func (h *dropLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "dropping the staging tables") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "dropped" {
			h.mu.Lock()
			h.dropped += int(a.Value.Int64())
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// take returns the sum since the last take.
func (h *dropLog) take() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.dropped
	h.dropped = 0
	return n
}

// stagedTable is a staging table as the catalog and the registry see it.
type stagedTable struct {
	name       string
	registered bool // a row of _openetl_staged names it
	rows       int
}

// stagedTables lists every table of schema's staging schema but the
// registry, with its rows, and the registry rows naming no table.
func (e *env) stagedTables(t *testing.T) (tables []stagedTable, orphans []string) {
	t.Helper()
	ctx := context.Background()
	stg := "_openetl_staging_" + e.schema
	rs, err := e.pool.Query(ctx, `SELECT c.relname, EXISTS (SELECT 1 FROM "`+stg+`"._openetl_staged r WHERE r.staging = c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> '_openetl_staged' ORDER BY c.relname`, stg)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var s stagedTable
		if err := rs.Scan(&s.name, &s.registered); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, s)
	}
	if rs.Close(); rs.Err() != nil {
		t.Fatal(rs.Err())
	}
	for i := range tables {
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM "`+stg+`"."`+tables[i].name+`"`).Scan(&tables[i].rows); err != nil {
			t.Fatal(err)
		}
	}
	rs, err = e.pool.Query(ctx, `SELECT staging FROM "`+stg+`"._openetl_staged r
		WHERE to_regclass(quote_ident($1) || '.' || quote_ident(r.staging)) IS NULL ORDER BY staging`, stg)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var n string
		if err := rs.Scan(&n); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, n)
	}
	if rs.Err() != nil {
		t.Fatal(rs.Err())
	}
	return tables, orphans
}

// headNames returns the staging tables the committables of pipeline's
// HEAD record name (none without one): the package ledger envelope's
// data is the destination's reference, {"tables":[{"staging":...}]}.
func headNames(t *testing.T, store checkpoint.Store, pipeline string) []string {
	t.Helper()
	_, rec, err := store.Head(context.Background(), pipeline)
	if err != nil {
		t.Fatal(err)
	}
	if rec == nil {
		return nil
	}
	var out []string
	for _, c := range rec.Committables {
		var env struct {
			Data []byte `json:"data"`
		}
		if err := json.Unmarshal(c, &env); err != nil {
			t.Fatalf("HEAD's committable %q: %v", c, err)
		}
		if len(env.Data) == 0 {
			continue
		}
		var ref struct {
			Tables []struct {
				Staging string `json:"staging"`
			} `json:"tables"`
		}
		if err := json.Unmarshal(env.Data, &ref); err != nil {
			t.Fatalf("HEAD's reference %q: %v", env.Data, err)
		}
		for _, tr := range ref.Tables {
			out = append(out, tr.Staging)
		}
	}
	slices.Sort(out)
	return out
}

// The destination needs no sink.Collector: what a failed attempt staged
// (whole staging tables, rows COPYed into them) stays until the next
// attempt's Recover, which drops every staging table of the pipeline
// but HEAD's, in the transaction that raises the ledger's fence (so a
// zombie's Recover drops nothing of a newer attempt's, and one that
// runs later is fenced before it looks). Syncs fail in turn at a Write
// (the rows COPYed), at PreCommit (the epoch staged), at the checkpoint
// write and at Commit (HEAD names the staging tables then); after each,
// the tables of the one before are gone, and after a clean Sync no
// staging table is left (HEAD is applied), the registry names none, and
// psql reads every version once.
func TestFailedAttemptsLeaveNothingStaged(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	inner, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close(ctx) })
	store := &failingStore{Store: inner}
	logs := &dropLog{}
	dst, err := postgres.New(ctx, postgres.Config{Pool: e.pool, Schema: e.schema, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	const (
		none = iota
		failWrite
		failPreCommit
		failCommit
	)
	var (
		mu        sync.Mutex
		fail      int
		writes    int
		collected []etl.Event
	)
	faulty := sinktest.WithFaults(dst, sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case fail == failWrite && c.Op == sinktest.FakeWrite:
			// The third batch: some rows are in, the epoch is not staged.
			if writes++; writes == 3 {
				return &sinktest.FakeFault{After: true}
			}
		case fail == failPreCommit && c.Op == sinktest.FakePreCommit:
			return &sinktest.FakeFault{After: true}
		case fail == failCommit && c.Op == sinktest.FakeCommit:
			return &sinktest.FakeFault{} // every try: the attempt gives up
		}
		return nil
	}})
	const rows = 3000
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("pggc").From(src).To(faulty).Checkpoints(store).Lanes(2).BatchSize(500, 0).
		Mode(delivery.Merge, faker.Customers).CommitRetries(1, time.Millisecond).
		OnEvent(func(ev etl.Event) {
			if ev.Kind == etl.EventStagingCollected {
				mu.Lock()
				collected = append(collected, ev)
				mu.Unlock()
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })
	set := func(f int) { mu.Lock(); fail = f; mu.Unlock() }

	var before []string // the staging tables the previous failed Sync left
	for _, step := range []struct {
		name string
		fail int
		arm  bool
		want error
	}{
		{"a Write", failWrite, false, sinktest.ErrFakeFault},
		{"PreCommit", failPreCommit, false, sinktest.ErrFakeFault},
		{"the checkpoint write", none, true, errStoreDown},
		{"Commit", failCommit, false, sinktest.ErrFakeFault},
	} {
		set(step.fail)
		if step.arm {
			store.arm()
		}
		if _, err := p.Sync(ctx); !errors.Is(err, step.want) {
			t.Fatalf("sync failing at %s: %v, want %v", step.name, err, step.want)
		}
		set(none)
		left, orphans := e.stagedTables(t)
		var names []string
		staged := 0
		for _, s := range left {
			if !s.registered {
				t.Errorf("after failing at %s: staging table %s is not in the registry: no Recover would drop it", step.name, s.name)
			}
			if slices.Contains(before, s.name) {
				t.Errorf("after failing at %s: staging table %s of the Sync before is still there", step.name, s.name)
			}
			names = append(names, s.name)
			staged += s.rows
		}
		if len(orphans) > 0 {
			t.Errorf("after failing at %s: registry rows without a table: %v", step.name, orphans)
		}
		if staged == 0 {
			t.Fatalf("after failing at %s: nothing staged, want the failed attempt's rows (tables %v)", step.name, left)
		}
		head := headNames(t, store, "pggc")
		if step.fail == failCommit {
			// HEAD names this epoch's staging tables: the next Recover
			// keeps and applies them.
			if len(head) == 0 || !slices.Equal(head, names) {
				t.Fatalf("after failing at Commit: HEAD names %v, staged are %v; want the same, some", head, names)
			}
		} else if len(head) != 0 {
			t.Fatalf("after failing at %s: HEAD names %v, want none (no epoch was recorded)", step.name, head)
		}
		t.Logf("failing at %s left %d staging tables, %d rows staged", step.name, len(left), staged)
		// At least the Sync before's: a statement its cancel cut off may
		// still land on the server after it returned (seen: a staging
		// table created after the Sync failing at a Write returned, before
		// the next Recover, which dropped it too).
		if got, want := logs.take(), len(before); got < want {
			t.Errorf("the Recover of the Sync failing at %s logged %d staging tables dropped, want at least %d (the Sync before's)", step.name, got, want)
		}
		before = names
	}

	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.take(); got != 0 {
		t.Errorf("the clean Sync's Recover logged %d staging tables dropped, want 0 (HEAD's are kept, then applied)", got)
	}
	left, orphans := e.stagedTables(t)
	if len(left) != 0 || len(orphans) != 0 {
		t.Errorf("after the clean Sync: staging tables %v, registry rows without a table %v; want none (HEAD is applied)", left, orphans)
	}
	if n := psql(t, `SELECT count(*) FROM "_openetl_staging_`+e.schema+`"._openetl_staged`); n != "0" {
		t.Errorf("after the clean Sync: %s registry rows, want 0", n)
	}
	if got := psql(t, `SELECT count(*) FROM `+e.schema+`._openetl_ledger WHERE pipeline = 'pggc' AND fence = generation`); got != "1" {
		t.Errorf("ledger rows of pggc applied by the generation holding the fence: %s, want 1", got)
	}
	verifyFaker(t, e.schema, rows)
	mu.Lock()
	defer mu.Unlock()
	// Recover drops the leftovers, not a Collect: the runner finds nothing
	// of the destination's to collect, and has no side files here.
	for _, ev := range collected {
		if ev.Collected != (sink.Collected{}) {
			t.Errorf("staging.collected event %+v: the destination is no sink.Collector, want no counts of its own", ev)
		}
	}
}

// Recover drops what older attempts staged, never what a newer one
// stages: a zombie's Recover after the newer generation's is fenced
// before it looks, so the newer lane's staging table keeps its rows and
// commits; what the zombie stages after the newer Recover (it can never
// commit it) stays until the Recover after, which drops it.
func TestRecoverKeepsNewerStaging(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	cfg := sink.WriterConfig{Pipeline: "gen", Streams: []sink.StreamSpec{{Stream: "g", Table: "g"}}}
	writer := func(gen checkpoint.Generation, head *checkpoint.Record) sink.Writer {
		t.Helper()
		w, err := e.open(t).Writer(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close(context.Background()) })
		if _, err := w.Recover(ctx, gen, head); err != nil {
			t.Fatalf("Recover of generation %d: %v", gen, err)
		}
		return w
	}
	names := func() []string {
		t.Helper()
		tables, orphans := e.stagedTables(t)
		if len(orphans) > 0 {
			t.Fatalf("registry rows without a table: %v", orphans)
		}
		var out []string
		for _, s := range tables {
			out = append(out, fmt.Sprintf("%s:%d", s.name[:1], s.rows))
		}
		return out
	}
	zombie := writer(2, nil)
	newer := writer(3, nil)
	if err := newer.Write(ctx, "g", batch(t, row{id: 1, value: "newer", seq: 1}, row{id: 2, value: "newer", seq: 2})); err != nil {
		t.Fatal(err)
	}
	if _, err := zombie.Recover(ctx, 2, nil); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("the zombie's Recover after generation 3's: %v, want sink.ErrFenced", err)
	}
	if err := zombie.Write(ctx, "g", batch(t, row{id: 9, value: "zombie", seq: 9})); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, []string{"g:1", "g:2"}) && !slices.Equal(got, []string{"g:2", "g:1"}) {
		t.Fatalf("staged after the fenced Recover and the zombie's Write: %v, want the newer lane's 2 rows and the zombie's 1", got)
	}
	c, err := newer.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := newer.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	if got := psql(t, `SELECT string_agg(id::text || value, ',' ORDER BY id) FROM `+e.schema+`.g`); got != "1newer,2newer" {
		t.Errorf("g = %q, want the newer generation's 2 rows", got)
	}
	if got := names(); !slices.Equal(got, []string{"g:1"}) {
		t.Fatalf("staged after the newer Commit: %v, want only the zombie's row", got)
	}
	writer(4, &checkpoint.Record{Pipeline: "gen", Epoch: 1, Generation: 3, Committables: [][]byte{c}})
	if got := names(); len(got) != 0 {
		t.Errorf("staged after generation 4's Recover: %v, want nothing", got)
	}
}

// DropStaged runs beside a pipeline's Commits and Recovers: each drop
// transaction locks a staging table's registry row before it reads or
// drops the table, so DropStaged never counts a table another
// transaction has just dropped (CI saw "relation ... does not exist"
// from its count) and never deadlocks with a Commit applying the same
// table. Syncs it cuts short fail and the next one reads again; after
// a last clean Sync every version is in once.
func TestDropStagedBesideCommits(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	store, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(ctx) })
	const rows = 4000
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("pgdrop").From(src).To(e.open(t)).Checkpoints(store).Lanes(2).BatchSize(100, 0).
		EpochEvery(time.Hour, 8<<10).Mode(delivery.Merge, faker.Customers).CommitRetries(1, time.Millisecond).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })
	dropper := e.open(t)
	stop := make(chan struct{})
	type dropResult struct {
		calls, rows int
		err         error
	}
	done := make(chan dropResult, 1)
	go func() {
		var r dropResult
		for {
			select {
			case <-stop:
				done <- r
				return
			default:
			}
			n, err := dropper.DropStaged(ctx)
			r.calls++
			r.rows += n
			if err != nil {
				r.err = err
				done <- r
				return
			}
		}
	}()
	failed := 0
	for range 3 {
		if _, err := p.Sync(ctx); err != nil {
			failed++
			t.Logf("a Sync beside DropStaged: %v", err)
			if strings.Contains(err.Error(), "40P01") {
				t.Errorf("a Sync beside DropStaged deadlocked with it: %v", err)
			}
		}
	}
	close(stop)
	r := testutil.Recv(t, "the DropStaged loop to end", done)
	if r.err != nil {
		t.Fatalf("DropStaged beside Commits, call %d: %v", r.calls, r.err)
	}
	t.Logf("%d DropStaged calls dropped %d rows; %d of 3 Syncs beside them failed", r.calls, r.rows, failed)
	if _, err := p.Sync(ctx); err != nil {
		t.Fatalf("the Sync after: %v", err)
	}
	verifyFaker(t, e.schema, rows)
}
