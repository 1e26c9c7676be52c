package clickhouse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// narrowed is the ClickHouse destination as a version that can't take
// float64 columns would be: the engine holds their values back.
type narrowed struct{ *clickhouse.Destination }

func (d narrowed) Capabilities() sink.Capabilities {
	c := d.Destination.Capabilities()
	c.Unsupported = append(slices.Clone(c.Unsupported), "float64")
	return c
}

const releaseRows = 2000

// checkPatched reads column of db.from (a table, perhaps with FINAL and
// a WHERE) with clickhouse-client and checks each row's value against
// the held values (testutil.CheckReleased). It returns the rows read and
// how many had a held value.
func checkPatched(t *testing.T, db, from, column string, held map[string]string) (rows, matched int) {
	t.Helper()
	out := strings.TrimSpace(clientQuery(t, fmt.Sprintf("SELECT _openetl_id, toString(%s) FROM %s.%s", column, db, from)))
	var rs []testutil.ReleasedRow
	for l := range strings.SplitSeq(out, "\n") {
		if l != "" {
			id, got, _ := strings.Cut(l, "\t")
			rs = append(rs, testutil.ReleasedRow{ID: id, Value: got})
		}
	}
	return testutil.CheckReleased(t, from+" "+column, rs, held, nil, `\N`)
}

// TestReleaseHeldValues: a destination that can't take float64 gets the
// fake orders (appended: a MergeTree) and customers (merged: a
// ReplacingMergeTree) without their amount and score, which are held;
// the next Sync, into one that takes float64 (a later writer version),
// writes every held value to its row, once, read back with
// clickhouse-client: each appended row has its own version's amount and
// items (a list of structs with a float64 field, held with them: an
// Array column, where a row without a value holds an empty array),
// each live merged row (FINAL) its latest version's score, no row is
// added and each keeps its _openetl_id and _openetl_seq, and a
// held.released event per column counts them as the Result does; 500
// new records a stream land in the same epoch with their values. A
// third Sync releases nothing and changes nothing.
func TestReleaseHeldValues(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	dir := t.TempDir()
	dest := func() *clickhouse.Destination { return newDest(t, clickhouse.Config{Conn: conn, Database: db}) }
	first := testutil.SyncRelease(t, dir, narrowed{dest()}, releaseRows, true)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	orders, customers := first.Res.Streams[faker.Orders], first.Res.Streams[faker.Customers]
	if orders.Held == 0 || customers.Held == 0 {
		t.Fatalf("first Sync: counts %+v, %+v: want values held", orders, customers)
	}
	cols := func(table string) []string {
		c, err := columnsOf(t.Context(), conn, db, table)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if slices.Contains(cols(faker.Orders), "amount") || slices.Contains(cols(faker.Customers), "score") {
		t.Fatal("a held column reached the tables")
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	items := testutil.HeldValues(t, dir, faker.Orders, "items")
	scores := testutil.HeldValues(t, dir, faker.Customers, "score")
	if len(amounts) != int(orders.Written) || len(items) != int(orders.Written) {
		t.Fatalf("%d amounts and %d items held, %d orders written", len(amounts), len(items), orders.Written)
	}
	t.Logf("held: %d amounts of %d orders, %d scores of %d customer versions", len(amounts), orders.Written, len(scores), customers.Written)
	// The rows' ids and seqs before the release: the release keeps them.
	idsSeqs := func(where string) string {
		return clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(_openetl_id), groupBitXor(cityHash64(_openetl_id, _openetl_seq)) FROM %s.orders WHERE %s", db, where))
	}
	old := fmt.Sprintf("_openetl_seq <= %d", releaseRows)
	before := idsSeqs(old)

	second := testutil.SyncRelease(t, dir, dest(), releaseRows+500, true)
	if second.Err != nil {
		t.Fatal(second.Err)
	}
	if r := second.Res.Streams[faker.Orders].Released; r != int64(len(amounts)+len(items)) {
		t.Errorf("second Sync released %d amounts and items, want %d", r, len(amounts)+len(items))
	}
	if r := second.Res.Streams[faker.Customers].Released; r != int64(len(scores)) {
		t.Errorf("second Sync released %d scores, want %d", r, len(scores))
	}
	want := []string{"customers.score " + strconv.Itoa(len(scores)), "orders.amount " + strconv.Itoa(len(amounts)), "orders.items " + strconv.Itoa(len(items))}
	if got := second.Released(); !slices.Equal(got, want) {
		t.Errorf("held.released events %q, want %q", got, want)
	}
	if got := idsSeqs(old); got != before {
		t.Errorf("the first Sync's orders (count, distinct ids, hash of ids and seqs) were %q, are %q: the release changed rows", before, got)
	}
	if got := strings.Fields(clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(_openetl_id) FROM %s.orders", db))); !slices.Equal(got, []string{fmt.Sprint(orders.Written + 500), fmt.Sprint(orders.Written + 500)}) {
		t.Errorf("orders: count and distinct ids %v, want %d each: a patch added rows", got, orders.Written+500)
	}
	if n, m := checkPatched(t, db, "orders WHERE "+old, "amount", amounts); n != int(orders.Written) || m != len(amounts) {
		t.Errorf("%d orders, %d of them with a held amount; want %d and %d", n, m, orders.Written, len(amounts))
	}
	// items: each row's list has the held list's length, and its first
	// struct's sku.
	wantItems := map[string]string{}
	for id, v := range items {
		var l []struct{ SKU string }
		if err := json.Unmarshal([]byte(v), &l); err != nil || len(l) == 0 {
			t.Fatalf("held items of %s: %q: want a list (%v)", id, v, err)
		}
		wantItems[id] = fmt.Sprintf("%d %s", len(l), l[0].SKU)
	}
	if n, m := checkPatched(t, db, "orders WHERE "+old, "concat(toString(length(items)), ' ', visitParamExtractString(items[1], 'sku'))", wantItems); n != int(orders.Written) || m != len(items) {
		t.Errorf("%d orders, %d of them with the held items; want %d and %d", n, m, orders.Written, len(items))
	}
	if n, m := checkPatched(t, db, "customers FINAL WHERE _openetl_deleted = 0 AND "+old, "score", scores); n != m {
		t.Errorf("%d live customers at a first Sync version, %d of them with a held score: want all", n, m)
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT (SELECT count() FROM %s.orders WHERE isNull(amount)), (SELECT count() FROM %s.customers FINAL WHERE _openetl_deleted = 0 AND isNull(score))", db, db)); got != "0\t0\n" {
		t.Errorf("orders without an amount, live customers without a score: %q, want none", got)
	}
	snapshot := clientQuery(t, fmt.Sprintf("SELECT groupBitXor(cityHash64(_openetl_id, _openetl_seq, toString(amount), toString(items))) FROM %s.orders", db))

	third := testutil.SyncRelease(t, dir, dest(), releaseRows+500, true)
	if third.Err != nil {
		t.Fatal(third.Err)
	}
	if got := third.Released(); len(got) != 0 {
		t.Errorf("third Sync released %q again", got)
	}
	if got := third.Res.Totals[faker.Orders].Released; got != int64(len(amounts)+len(items)) {
		t.Errorf("totals: %d amounts and items released, want %d", got, len(amounts)+len(items))
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT groupBitXor(cityHash64(_openetl_id, _openetl_seq, toString(amount), toString(items))) FROM %s.orders", db)); got != snapshot {
		t.Error("the third Sync changed the orders")
	}
}

// TestReleaseCrash: an attempt that staged its patches and crashed
// before its commit point released nothing; one that crashed after its
// commit point, before the destination's Commit, released them, and the
// next attempt's recovery applies them. Read back with
// clickhouse-client, each held amount is on its row, no row is added,
// and the Totals count each value once.
func TestReleaseCrash(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	dir := t.TempDir()
	dest := func() *clickhouse.Destination { return newDest(t, clickhouse.Config{Conn: conn, Database: db}) }
	first := testutil.SyncRelease(t, dir, narrowed{dest()}, releaseRows, true, faker.Orders)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	if len(amounts) == 0 {
		t.Fatal("no amounts held")
	}
	crashAt := func(op sinktest.FakeDestOp, epoch uint64, after bool) *sinktest.FaultyDestination {
		return sinktest.WithFaults(dest(), sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == op && c.Epoch == epoch {
				return &sinktest.FakeFault{After: after, Crash: true}
			}
			return nil
		}})
	}
	epoch := first.Res.Epoch + 1
	staged := testutil.SyncRelease(t, dir, crashAt(sinktest.FakePreCommit, epoch, true), releaseRows, true, faker.Orders)
	if !errors.Is(staged.Err, sinktest.ErrFakeFault) && !errors.Is(staged.Err, sinktest.ErrFakeKilled) {
		t.Fatalf("Sync: %v, want the injected crash", staged.Err)
	}
	if got := staged.Released(); len(got) != 0 {
		t.Fatalf("released %q before the commit point", got)
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT count() FROM system.columns WHERE database = '%s' AND table = 'orders' AND name = 'amount'", db)); got == "1\n" {
		if n := clientQuery(t, fmt.Sprintf("SELECT count() FROM %s.orders WHERE isNotNull(amount)", db)); n != "0\n" {
			t.Fatalf("%s amounts reached the table before the commit point", strings.TrimSpace(n))
		}
	}
	// The process dies after the record, before Commit: the next
	// attempt's Recover finds the epoch Recoverable and applies it.
	committed := testutil.SyncRelease(t, dir, crashAt(sinktest.FakeCommit, epoch, false), releaseRows, true, faker.Orders)
	if committed.Err == nil {
		t.Fatal("Sync succeeded through the injected crash")
	}
	if r := committed.Res.Streams[faker.Orders].Released; r != 2*int64(len(amounts)) {
		t.Errorf("the committed epoch released %d amounts and items, want %d", r, 2*len(amounts))
	}
	last := testutil.SyncRelease(t, dir, dest(), releaseRows, true, faker.Orders)
	if last.Err != nil {
		t.Fatal(last.Err)
	}
	if got := last.Released(); len(got) != 0 {
		t.Errorf("released %q again after the commit point", got)
	}
	if got := last.Res.Totals[faker.Orders].Released; got != 2*int64(len(amounts)) {
		t.Errorf("totals: %d amounts and items released, want %d", got, 2*len(amounts))
	}
	written := int(first.Res.Streams[faker.Orders].Written)
	if n, m := checkPatched(t, db, "orders", "amount", amounts); n != written || m != len(amounts) {
		t.Errorf("%d orders, %d of them with a held amount; want %d and %d", n, m, written, len(amounts))
	}
	if got := strings.Fields(clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(_openetl_id), uniqExact(_openetl_seq) FROM %s.orders", db))); !slices.Equal(got, []string{fmt.Sprint(written), fmt.Sprint(written), fmt.Sprint(written)}) {
		t.Errorf("orders: count, distinct ids and seqs %v, want %d each", got, written)
	}
}
