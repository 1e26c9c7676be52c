package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
	"github.com/openetl/etl/source/sourcetest"
)

// narrowed is the Postgres destination as a version that can't take
// float64 columns would be: the engine holds their values back.
type narrowed struct{ *postgres.Destination }

func (d narrowed) Capabilities() sink.Capabilities {
	c := d.Destination.Capabilities()
	c.Unsupported = append(slices.Clone(c.Unsupported), "float64")
	return c
}

const releaseRows = 3000

// stripIDs rewrites stream's published held files without the rows'
// ids, as versions that didn't keep them wrote the engine's lines.
func stripIDs(t *testing.T, dir, stream string) {
	t.Helper()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	names, err := store.(checkpoint.FileLister).ListFiles(t.Context(), "release", "_held/"+stream+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		b, err := store.ReadFile(t.Context(), "release", name)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for line := range bytes.Lines(b) {
			var l map[string]any
			if err := json.Unmarshal(line, &l); err != nil {
				t.Fatal(err)
			}
			delete(l, "id")
			nl, _ := json.Marshal(l)
			out = append(append(out, nl...), '\n')
		}
		if err := store.WriteFile(t.Context(), "release", name, out); err != nil {
			t.Fatal(err)
		}
	}
}

// spoil rewrites the first n held values of stream's column as text no
// type takes, and returns their rows' ids.
func spoil(t *testing.T, dir, stream, column string, n int) []string {
	t.Helper()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	names, err := store.(checkpoint.FileLister).ListFiles(t.Context(), "release", "_held/"+stream+"/")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range names {
		b, err := store.ReadFile(t.Context(), "release", name)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for line := range bytes.Lines(b) {
			var l map[string]any
			if err := json.Unmarshal(line, &l); err != nil {
				t.Fatal(err)
			}
			if len(ids) < n && l["column"] == column {
				l["value"] = "not a number"
				ids = append(ids, l["id"].(string))
			}
			nl, _ := json.Marshal(l)
			out = append(append(out, nl...), '\n')
		}
		if err := store.WriteFile(t.Context(), "release", name, out); err != nil {
			t.Fatal(err)
		}
		if len(ids) == n {
			break
		}
	}
	return ids
}

// checkPatched reads column of table with psql and checks each row's
// value against the held values (testutil.CheckReleased): a row without
// one has a null or, for the ids in keep, the value given. It returns
// the table's rows and how many have a held value.
func (e *env) checkPatched(t *testing.T, table, column, where string, held map[string]string, keep map[string]string) (rows, matched int) {
	t.Helper()
	out := psql(t, `SELECT _openetl_id || ' ' || coalesce(`+column+`::text, 'NULL') FROM `+e.schema+`.`+table+` `+where)
	var rs []testutil.ReleasedRow
	for l := range strings.SplitSeq(out, "\n") {
		id, got, _ := strings.Cut(l, " ")
		rs = append(rs, testutil.ReleasedRow{ID: id, Value: got})
	}
	return testutil.CheckReleased(t, table+" "+column, rs, held, keep, "NULL")
}

// hasColumn reports whether table has column, per psql.
func (e *env) hasColumn(t *testing.T, table, column string) bool {
	t.Helper()
	return psql(t, `SELECT count(*) FROM information_schema.columns WHERE table_schema = '`+e.schema+
		`' AND table_name = '`+table+`' AND column_name = '`+column+`'`) == "1"
}

// TestReleaseHeldValues: a destination that can't take float64 gets the
// fake orders (appended) and customers (merged) without their amount and
// score, which are held; the next Sync, into one that takes float64 (a
// later writer version), writes every held value to its row, once: each
// appended row has its own version's amount, each live merged row its
// latest version's score (an older version's patch finds no row), no row
// is added, and a held.released event per column counts them as the
// Result does; 500 new records a stream land in the same epoch with their
// values (a customer updated there holds its new version's score). The
// orders' held lines are rewritten without the rows' ids first, as older
// versions wrote them: a keyed stream's id is found from the key and seq. A third Sync releases nothing more. The items
// column, a list of structs Postgres never takes, stays held.
func TestReleaseHeldValues(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	first := testutil.SyncRelease(t, dir, narrowed{e.open(t)}, releaseRows, true)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	orders, customers := first.Res.Streams[faker.Orders], first.Res.Streams[faker.Customers]
	if orders.Held == 0 || customers.Held == 0 {
		t.Fatalf("first Sync: counts %+v, %+v: want values held", orders, customers)
	}
	if e.hasColumn(t, faker.Orders, "amount") || e.hasColumn(t, faker.Customers, "score") {
		t.Fatal("a held column reached the tables")
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	scores := testutil.HeldValues(t, dir, faker.Customers, "score")
	if len(amounts) != int(orders.Written) {
		t.Fatalf("%d amounts held, %d orders written", len(amounts), orders.Written)
	}
	t.Logf("held: %d amounts of %d orders, %d scores of %d customer versions", len(amounts), orders.Written, len(scores), customers.Written)
	stripIDs(t, dir, faker.Orders)

	// The source has 500 more records a stream now: they land in the
	// same epoch as the patches, with their values.
	second := testutil.SyncRelease(t, dir, e.open(t), releaseRows+500, true)
	if second.Err != nil {
		t.Fatal(second.Err)
	}
	if r := second.Res.Streams[faker.Orders].Released; r != int64(len(amounts)) {
		t.Errorf("second Sync released %d amounts, want %d", r, len(amounts))
	}
	if r := second.Res.Streams[faker.Customers].Released; r != int64(len(scores)) {
		t.Errorf("second Sync released %d scores, want %d", r, len(scores))
	}
	want := []string{"customers.score " + strconv.Itoa(len(scores)), "orders.amount " + strconv.Itoa(len(amounts))}
	if got := second.Released(); !slices.Equal(got, want) {
		t.Errorf("held.released events %q, want %q", got, want)
	}
	old := fmt.Sprintf("_openetl_seq <= %d", releaseRows) // versions of the first Sync
	if got := psql(t, `SELECT (SELECT count(*) FROM `+e.schema+`.orders WHERE `+old+`) || ' ' || (SELECT count(*) FROM `+e.schema+`.orders)`); got != fmt.Sprintf("%d %d", orders.Written, orders.Written+500) {
		t.Errorf("orders (first Sync's, all) %s, want %d and %d: a patch added rows", got, orders.Written, orders.Written+500)
	}
	if n, m := e.checkPatched(t, faker.Orders, "amount", "WHERE "+old, amounts, nil); n != int(orders.Written) || m != len(amounts) {
		t.Errorf("%d orders, %d of them with a held amount; want %d and %d", n, m, orders.Written, len(amounts))
	}
	if n, m := e.checkPatched(t, faker.Customers, "score", "WHERE NOT _openetl_deleted AND "+old, scores, nil); n != m {
		t.Errorf("%d live customers at a first Sync version, %d of them with a held score: want all", n, m)
	}
	if got := psql(t, `SELECT (SELECT count(*) FROM `+e.schema+`.orders WHERE amount IS NULL) || ' ' || (SELECT count(*) FROM `+e.schema+`.customers WHERE NOT _openetl_deleted AND score IS NULL)`); got != "0 0" {
		t.Errorf("orders without an amount, live customers without a score: %s, want none", got)
	}
	if got := psql(t, `SELECT count(*) FROM `+e.schema+`.customers WHERE NOT _openetl_deleted AND score IS NULL`); got != "0" {
		t.Errorf("%s live customers without a score", got)
	}
	if e.hasColumn(t, faker.Orders, "items") && psql(t, `SELECT count(*) FROM `+e.schema+`.orders WHERE items IS NOT NULL`) != "0" {
		t.Error("items, which Postgres can't take, was released")
	}
	snapshot := psql(t, `SELECT md5(string_agg(_openetl_id || coalesce(amount::text, '-'), ',' ORDER BY _openetl_id)) FROM `+e.schema+`.orders`)

	third := testutil.SyncRelease(t, dir, e.open(t), releaseRows+500, true)
	if third.Err != nil {
		t.Fatal(third.Err)
	}
	if got := third.Released(); len(got) != 0 {
		t.Errorf("third Sync released %q again", got)
	}
	for _, s := range []string{faker.Orders, faker.Customers} {
		if c := third.Res.Streams[s]; c.Released != 0 {
			t.Errorf("third Sync: %s counts %+v, want nothing released", s, c)
		}
	}
	if got := third.Res.Totals[faker.Orders].Released; got != int64(len(amounts)) {
		t.Errorf("totals: %d amounts released, want %d", got, len(amounts))
	}
	if got := psql(t, `SELECT md5(string_agg(_openetl_id || coalesce(amount::text, '-'), ',' ORDER BY _openetl_id)) FROM `+e.schema+`.orders`); got != snapshot {
		t.Error("the third Sync changed the orders")
	}
}

// TestReleaseSchemaChecked: the host created the orders table with an
// amount column of another type (numeric), which CheckSchema names, so
// the amounts are held (as Arrow's text of them); once the host changes
// the column to double precision the next Sync writes each held amount
// to its row, except where the host has set one meanwhile, and except
// three whose text was spoilt: the column's type can't take them, so
// they stay held, with one schema.blocked event, and a later Sync
// passes their file by.
func TestReleaseSchemaChecked(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	dst := e.open(t)
	psql(t, `CREATE TABLE `+e.schema+`.orders (amount numeric(10,2))`)
	first := testutil.SyncRelease(t, dir, dst, releaseRows, true, faker.Orders)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	if c := first.Res.Streams[faker.Orders]; c.Held == 0 {
		t.Fatalf("counts %+v: want amounts held", c)
	}
	if got := psql(t, `SELECT count(*) FROM `+e.schema+`.orders WHERE amount IS NOT NULL`); got != "0" {
		t.Fatalf("%s amounts written into the numeric column", got)
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	t.Logf("held: %d amounts", len(amounts))

	// Still numeric: nothing is released.
	again := testutil.SyncRelease(t, dir, dst, releaseRows, true, faker.Orders)
	if again.Err != nil {
		t.Fatal(again.Err)
	}
	if got := again.Released(); len(got) != 0 {
		t.Fatalf("released %q into a column of another type", got)
	}

	psql(t, `ALTER TABLE `+e.schema+`.orders ALTER COLUMN amount TYPE double precision`)
	kept := psql(t, `SELECT min(_openetl_id) FROM `+e.schema+`.orders`)
	psql(t, `UPDATE `+e.schema+`.orders SET amount = -1 WHERE _openetl_id = '`+kept+`'`)
	// Three held lines whose text the column's type can't take: they
	// stay held, with an event, and their rows keep a null.
	spoilt := spoil(t, dir, faker.Orders, "amount", 3)
	for _, id := range spoilt {
		delete(amounts, id)
	}
	second := testutil.SyncRelease(t, dir, dst, releaseRows, true, faker.Orders)
	if second.Err != nil {
		t.Fatal(second.Err)
	}
	if r := second.Res.Streams[faker.Orders].Released; r != int64(len(amounts)) {
		t.Errorf("released %d amounts, want %d", r, len(amounts))
	}
	if n, m := e.checkPatched(t, faker.Orders, "amount", "", amounts, map[string]string{kept: "-1"}); n != len(amounts)+3 || m != len(amounts) {
		t.Errorf("%d orders, %d of them with a held amount; want %d and %d", n, m, len(amounts)+3, len(amounts))
	}
	blocked := func(run testutil.ReleaseRun) []string {
		var out []string
		for _, ev := range run.Events {
			if ev.Kind == etl.EventSchemaBlocked {
				out = append(out, ev.Stream+"."+ev.Column+": "+ev.Detail)
			}
		}
		return out
	}
	if got := blocked(second); len(got) != 1 || !strings.HasPrefix(got[0], "orders.amount: 3 held values stay held: the column's current type can't take them") {
		t.Errorf("schema.blocked events %q, want one for the 3 amounts that can't be typed", got)
	}
	// Settled: the next Sync neither reads them again nor says it again.
	third := testutil.SyncRelease(t, dir, dst, releaseRows, true, faker.Orders)
	if third.Err != nil {
		t.Fatal(third.Err)
	}
	if got := blocked(third); len(got) != 0 || len(third.Released()) != 0 {
		t.Errorf("third Sync: schema.blocked %q, released %q; want neither", got, third.Released())
	}
}

// TestReleaseCrash: an attempt that staged its patches and crashed
// before its commit point released nothing, and the next releases all;
// one that crashed after its commit point, before the destination's
// Commit, released them: the next attempt's recovery applies them and
// it releases nothing again. The Totals count each value once, and
// psql reads each value on its row.
func TestReleaseCrash(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	first := testutil.SyncRelease(t, dir, narrowed{e.open(t)}, releaseRows, true, faker.Orders)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	if len(amounts) == 0 {
		t.Fatal("no amounts held")
	}
	crashAt := func(op sinktest.FakeDestOp, epoch uint64, after bool) *sinktest.FaultyDestination {
		return sinktest.WithFaults(e.open(t), sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == op && c.Epoch == epoch {
				return &sinktest.FakeFault{After: after, Crash: true}
			}
			return nil
		}})
	}
	// The first epoch's PreCommit stages its rows (the patches) and the
	// process dies before the record.
	epoch := first.Res.Epoch + 1
	staged := testutil.SyncRelease(t, dir, crashAt(sinktest.FakePreCommit, epoch, true), releaseRows, true, faker.Orders)
	if !errors.Is(staged.Err, sinktest.ErrFakeFault) && !errors.Is(staged.Err, sinktest.ErrFakeKilled) {
		t.Fatalf("Sync: %v, want the injected crash", staged.Err)
	}
	if got := staged.Released(); len(got) != 0 {
		t.Fatalf("released %q before the commit point", got)
	}
	if e.hasColumn(t, faker.Orders, "amount") {
		t.Fatal("amount reached the table before the commit point")
	}
	// Again, and this time the process dies after the record, before
	// Commit applies the epoch.
	committed := testutil.SyncRelease(t, dir, crashAt(sinktest.FakeCommit, epoch, false), releaseRows, true, faker.Orders)
	if committed.Err == nil {
		t.Fatal("Sync succeeded through the injected crash")
	}
	if r := committed.Res.Streams[faker.Orders].Released; r != int64(len(amounts)) {
		t.Errorf("the committed epoch released %d amounts, want %d", r, len(amounts))
	}
	last := testutil.SyncRelease(t, dir, e.open(t), releaseRows, true, faker.Orders)
	if last.Err != nil {
		t.Fatal(last.Err)
	}
	if got := last.Released(); len(got) != 0 {
		t.Errorf("released %q again after the commit point", got)
	}
	if got := last.Res.Totals[faker.Orders].Released; got != int64(len(amounts)) {
		t.Errorf("totals: %d amounts released, want %d", got, len(amounts))
	}
	if n, m := e.checkPatched(t, faker.Orders, "amount", "", amounts, nil); n != int(first.Res.Streams[faker.Orders].Written) || m != len(amounts) {
		t.Errorf("%d orders, %d of them with a held amount; want %d and %d", n, m, first.Res.Streams[faker.Orders].Written, len(amounts))
	}
}

// noText is the Postgres destination as a version that can't take utf8
// columns would be.
type noText struct{ *postgres.Destination }

func (d noText) Capabilities() sink.Capabilities {
	c := d.Destination.Capabilities()
	c.Unsupported = append(slices.Clone(c.Unsupported), "utf8")
	return c
}

// TestReleaseKeyless: held values of streams without a key are released
// by the rows' ids their held lines carry; lines without one (as older
// versions wrote them) can't find their row and stay held, with a
// schema.blocked event saying why, while their stream's table stays
// without the column.
func TestReleaseKeyless(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Seed: 3, Replay: source.ReplayExact,
		Streams: []sourcetest.FakeStream{{Name: "loose", Unkeyed: true, Rows: 200}, {Name: "stripped", Unkeyed: true, Rows: 200}}})
	sync := func(dst sink.Destination) (etl.Result, []etl.Event) {
		t.Helper()
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		var mu sync.Mutex
		var events []etl.Event
		done := make(chan struct{})
		p, err := etl.NewPipeline("release").From(src).To(dst).Checkpoints(store).OnEvent(func(ev etl.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
			if ev.Kind == etl.EventSyncSucceeded || ev.Kind == etl.EventSyncFailed {
				close(done)
			}
		}, 0).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		testutil.Recv(t, "the sync.succeeded event", done)
		mu.Lock()
		defer mu.Unlock()
		return res, events
	}
	first, _ := sync(noText{e.open(t)})
	for _, s := range []string{"loose", "stripped"} {
		if c := first.Streams[s]; c.Held != 200 || c.Written != 200 {
			t.Fatalf("%s: counts %+v, want 200 written and 200 s values held", s, c)
		}
	}
	loose := testutil.HeldValues(t, dir, "loose", "s")
	stripIDs(t, dir, "stripped")

	second, events := sync(e.open(t))
	if c := second.Streams["loose"]; c.Released != 200 {
		t.Errorf("loose: counts %+v, want 200 released", c)
	}
	if c := second.Streams["stripped"]; c.Released != 0 {
		t.Errorf("stripped: counts %+v, want nothing released", c)
	}
	var blocked []string
	for _, ev := range events {
		if ev.Kind == etl.EventSchemaBlocked {
			blocked = append(blocked, ev.Stream+"."+ev.Column+": "+ev.Detail)
		}
	}
	if len(blocked) != 1 || !strings.HasPrefix(blocked[0], "stripped.s: 200 held values stay held") || !strings.Contains(blocked[0], "without a key") {
		t.Errorf("schema.blocked events %q, want one for stripped.s: 200 stay held, a stream without a key", blocked)
	}
	if n, m := e.checkPatched(t, "loose", "s", "", loose, nil); n != 200 || m != 200 {
		t.Errorf("loose: %d rows, %d of them with a held value; want 200 and 200", n, m)
	}
	if got := psql(t, `SELECT count(s) FROM `+e.schema+`.loose`); got != "200" {
		t.Errorf("loose: %s values of s, want 200", got)
	}
	if got := psql(t, `SELECT count(*) FROM `+e.schema+`.stripped`); got != "200" || e.hasColumn(t, "stripped", "s") {
		t.Errorf("stripped: %s rows, column s there: %v; want 200 rows without it", got, e.hasColumn(t, "stripped", "s"))
	}
}

// TestReleaseRun: a Run whose source has nothing new still commits the
// held values it releases (its first epoch is placed for them), reports
// them in a held.released event and in Status, and stops cleanly.
func TestReleaseRun(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	first := testutil.SyncRelease(t, dir, narrowed{e.open(t)}, releaseRows, true, faker.Orders)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	src, err := faker.New(faker.Config{Seed: 9, Rows: releaseRows, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	released := make(chan etl.Event, 1)
	p, err := etl.NewPipeline("release").From(src).To(e.open(t)).Checkpoints(store).EpochEvery(50*time.Millisecond, 0).
		OnEvent(func(ev etl.Event) {
			if ev.Kind == etl.EventHeldReleased {
				released <- ev
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	ev := testutil.Recv(t, "the held.released event", released)
	if ev.Stream != faker.Orders || ev.Column != "amount" || ev.Rows != int64(len(amounts)) {
		t.Errorf("held.released event %+v, want orders.amount, %d rows", ev, len(amounts))
	}
	if c := p.Status().Streams[faker.Orders].Committed; c.Released != int64(len(amounts)) || c.Read != 0 {
		t.Errorf("status: committed %+v, want %d released and nothing read", c, len(amounts))
	}
	cancel()
	if err := testutil.Recv(t, "Run's return", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n, m := e.checkPatched(t, faker.Orders, "amount", "", amounts, nil); n != len(amounts) || m != n {
		t.Errorf("%d orders, %d of them with a held amount; want %d and all", n, m, len(amounts))
	}
}

// TestReleaseNotTransformedOrOverwritten: the held values of a stream
// with a transform (its rows are the transform's) and of an overwrite
// stream (the next full refresh writes the column whole) are not
// released into a destination that takes their column now.
func TestReleaseNotTransformedOrOverwritten(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	sync := func(dst sink.Destination) etl.Result {
		t.Helper()
		src, err := faker.New(faker.Config{Seed: 9, Rows: 500})
		if err != nil {
			t.Fatal(err)
		}
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("release").From(src).To(dst).Checkpoints(store).
			Transform(func(_ context.Context, b etl.TransformBatch) error { b.Emit(b.Record()); return nil }, faker.Orders).
			Mode(delivery.Overwrite, faker.Customers).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := sync(narrowed{e.open(t)})
	for _, s := range []string{faker.Orders, faker.Customers} {
		if c := first.Streams[s]; c.Held == 0 {
			t.Fatalf("%s: counts %+v, want values held", s, c)
		}
	}
	second := sync(e.open(t))
	for _, s := range []string{faker.Orders, faker.Customers} {
		if c := second.Streams[s]; c.Released != 0 {
			t.Errorf("%s: counts %+v, want nothing released", s, c)
		}
	}
	if e.hasColumn(t, faker.Orders, "amount") && psql(t, `SELECT count(amount) FROM `+e.schema+`.orders WHERE _openetl_seq <= 500`) != "0" {
		t.Error("a transformed stream's held amounts were released")
	}
}
