package iceberg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// TestConformancePatchesV3 runs the suite's patch check on format v3
// tables, where the patched rows' old positions are deleted by deletion
// vectors; TestConformance runs it on v2 (position deletes).
func TestConformancePatchesV3(t *testing.T) {
	wh := newWarehouse(t)
	skip := map[string]string{}
	for _, c := range []string{sinktest.CheckRecoverNil, sinktest.CheckInvisible, sinktest.CheckCommit, sinktest.CheckCommitTwice,
		sinktest.CheckEmptyEpoch, sinktest.CheckWidenSchema, sinktest.CheckCrash, sinktest.CheckZombie, sinktest.CheckConcurrent,
		sinktest.CheckLanes, sinktest.CheckCloseDiscards, sinktest.CheckAhead, sinktest.CheckFinish, sinktest.CheckMerge,
		sinktest.CheckMergeReplay, sinktest.CheckHardDeletes, sinktest.CheckOverwrite, sinktest.CheckOverwriteEmpty} {
		skip[c] = "TestConformance runs it"
	}
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, wh.cat, iceberg.Config{Properties: map[string]string{"format-version": "3"}})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return scan(ctx, wh.cat, iceberg.DefaultNamespace, stream)
		},
		Skip: skip,
	})
}

// narrowed is the Iceberg destination as a version that can't take
// float64 columns would be: the engine holds their values back.
type narrowed struct{ *iceberg.Destination }

func (d narrowed) Capabilities() sink.Capabilities {
	c := d.Destination.Capabilities()
	c.Unsupported = append(slices.Clone(c.Unsupported), "float64")
	return c
}

const releaseRows = 2000

// readRelease reads the pipeline's tables with pyiceberg.
func readRelease(t *testing.T, wh *warehouse) map[string]*testutil.IcebergTable {
	t.Helper()
	return testutil.ReadIcebergTables(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)
}

// pyRow is one row pyiceberg read: id, seq and column's value as JSON.
type pyRow struct {
	id    string
	seq   int64
	value string
}

func pyRows(t *testing.T, tb *testutil.IcebergTable, column string) []pyRow {
	t.Helper()
	if tb == nil {
		t.Fatal("table not read")
	}
	out := make([]pyRow, 0, len(tb.Data))
	for _, r := range tb.Data {
		id, _ := r[sink.ColumnID].(string)
		seq, err := strconv.ParseInt(fmt.Sprint(r[sink.ColumnSeq]), 10, 64)
		if id == "" || err != nil {
			t.Fatalf("row without %s or %s: %v", sink.ColumnID, sink.ColumnSeq, r)
		}
		v, err := json.Marshal(r[column])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pyRow{id: id, seq: seq, value: string(v)})
	}
	return out
}

// checkPatched checks the rows at or below seq maxSeq against the held
// values (testutil.CheckReleased).
func checkPatched(t *testing.T, what string, rows []pyRow, maxSeq int64, held map[string]string) (n, matched int) {
	t.Helper()
	var rs []testutil.ReleasedRow
	for _, r := range rows {
		if r.seq <= maxSeq {
			rs = append(rs, testutil.ReleasedRow{ID: r.id, Value: r.value})
		}
	}
	return testutil.CheckReleased(t, what, rs, held, nil, "null")
}

// idsSeqs is rows' ids and seqs at or below maxSeq, sorted.
func idsSeqs(rows []pyRow, maxSeq int64) []string {
	var out []string
	for _, r := range rows {
		if r.seq <= maxSeq {
			out = append(out, r.id+"/"+strconv.FormatInt(r.seq, 10))
		}
	}
	slices.Sort(out)
	return out
}

// TestReleaseHeldValues: a destination that can't take float64 gets
// the fake orders (appended) and customers (merged) without their
// amount and score, which are held; the next Sync, into one that takes
// float64 (a later writer version), adds the columns and releases the
// values: in the epoch's commit each row that had one is copied with it
// into a new data file and its old position deleted. Read back with
// pyiceberg, every live row of the first Sync has its own held value,
// with its _openetl_id and _openetl_seq, and appears once; 500 new
// records a stream land in the same epoch with their values; the
// held.released events and the Result count the values. A third Sync
// releases nothing and adds no snapshot.
func TestReleaseHeldValues(t *testing.T) {
	for _, v := range []string{"2", "3"} {
		t.Run("v"+v, func(t *testing.T) {
			wh, dir := newWarehouse(t), t.TempDir()
			dest := func() *iceberg.Destination {
				return newDest(t, wh.cat, iceberg.Config{Properties: map[string]string{"format-version": v}})
			}
			first := testutil.SyncRelease(t, dir, narrowed{dest()}, releaseRows, true)
			if first.Err != nil {
				t.Fatal(first.Err)
			}
			orders := first.Res.Streams[faker.Orders]
			amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
			items := testutil.HeldValues(t, dir, faker.Orders, "items")
			scores := testutil.HeldValues(t, dir, faker.Customers, "score")
			if len(amounts) != int(orders.Written) || len(items) != int(orders.Written) || len(scores) == 0 {
				t.Fatalf("held %d amounts, %d items and %d scores of %d orders written", len(amounts), len(items), len(scores), orders.Written)
			}
			got := readRelease(t, wh)
			before := pyRows(t, got[faker.Orders], "amount")
			if n, m := checkPatched(t, "orders before", before, releaseRows, nil); n != int(orders.Written) || m != 0 {
				t.Fatalf("first Sync: %d orders read, %d with a value; want %d and none", n, m, orders.Written)
			}
			custBefore := pyRows(t, got[faker.Customers], "score")
			itemsBefore := pyRows(t, got[faker.Orders], "items")

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
			got = readRelease(t, wh)
			ot := got[faker.Orders]
			after := pyRows(t, ot, "amount")
			if !slices.Equal(idsSeqs(after, releaseRows), idsSeqs(before, releaseRows)) {
				t.Error("the first Sync's orders (ids and seqs) changed: a row was lost, doubled or renumbered")
			}
			if len(after) != int(orders.Written)+500 || ot.DistinctIDs != int64(len(after)) {
				t.Errorf("%d orders read (%d distinct ids), want %d", len(after), ot.DistinctIDs, orders.Written+500)
			}
			if n, m := checkPatched(t, "orders", after, releaseRows, amounts); n != int(orders.Written) || m != len(amounts) {
				t.Errorf("%d orders, %d with a held amount; want %d and %d", n, m, orders.Written, len(amounts))
			}
			for _, r := range after {
				if r.seq > releaseRows && r.value == "null" {
					t.Fatalf("order %s of the second Sync has no amount", r.id)
				}
			}
			// items was written without the part that was held (each
			// struct's price): its rows have a value, which the release
			// leaves as it is (the price the second Sync added to the
			// struct reads as null).
			itemsOf := func(rows []pyRow) map[string]string {
				m := map[string]string{}
				for _, r := range rows {
					if r.seq <= releaseRows {
						m[r.id] = r.value
					}
				}
				return m
			}
			if ib, ia := itemsOf(itemsBefore), itemsOf(pyRows(t, ot, "items")); !maps.Equal(ib, ia) {
				for id, v := range ib {
					if ia[id] != strings.ReplaceAll(v, "}", ", 'price': None}") {
						t.Fatalf("the release changed the orders' items, which every row has: row %s: %s, then %s", id, v, ia[id])
					}
				}
			}
			if ot.DeleteFiles == 0 {
				t.Errorf("orders: no delete files after the release (format v%s)", v)
			}
			// Customers: each first-Sync version still live has its
			// score; the live versions of the first Sync are those
			// before, less those the second Sync's records replaced.
			ct := got[faker.Customers]
			cust := pyRows(t, ct, "score")
			if ct.DistinctIDs != int64(len(cust)) {
				t.Errorf("customers: %d rows, %d distinct ids", len(cust), ct.DistinctIDs)
			}
			live := map[string]bool{}
			for _, s := range idsSeqs(cust, releaseRows) {
				live[s] = true
			}
			for _, s := range idsSeqs(custBefore, releaseRows) {
				delete(live, s)
			}
			if len(live) != 0 {
				t.Errorf("customers: %d first-Sync versions live now that were not before", len(live))
			}
			heldLive := 0
			for _, r := range cust {
				if _, ok := scores[r.id]; ok && r.seq <= releaseRows {
					heldLive++
				}
			}
			if n, m := checkPatched(t, "customers", cust, releaseRows, scores); m != heldLive || m == 0 || n == 0 {
				t.Errorf("customers: %d first-Sync versions, %d with a held score (%d live with one held)", n, m, heldLive)
			}
			snaps := map[string]int{faker.Orders: ot.Snapshots, faker.Customers: ct.Snapshots}

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
			got = readRelease(t, wh)
			for name, n := range snaps {
				if got[name].Snapshots != n {
					t.Errorf("%s: the third Sync took %d snapshots to %d", name, n, got[name].Snapshots)
				}
			}
		})
	}
}

// TestReleaseCrash: an attempt that staged its patches and crashed
// before its commit point released nothing (no snapshot was added);
// one that crashed after its commit point, before the destination's
// Commit, released them, and the next attempt's recovery applies them.
// Read back with pyiceberg, each held amount is on its row, each row
// once, and the Totals count each value once.
func TestReleaseCrash(t *testing.T) {
	wh, dir := newWarehouse(t), t.TempDir()
	dest := func() *iceberg.Destination { return newDest(t, wh.cat, iceberg.Config{}) }
	first := testutil.SyncRelease(t, dir, narrowed{dest()}, releaseRows, true)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	items := testutil.HeldValues(t, dir, faker.Orders, "items")
	scores := testutil.HeldValues(t, dir, faker.Customers, "score")
	snaps := readRelease(t, wh)[faker.Orders].Snapshots
	crashAt := func(op sinktest.FakeDestOp, epoch uint64, after bool) *sinktest.FaultyDestination {
		return sinktest.WithFaults(dest(), sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == op && c.Epoch == epoch {
				return &sinktest.FakeFault{After: after, Crash: true}
			}
			return nil
		}})
	}
	epoch := first.Res.Epoch + 1
	staged := testutil.SyncRelease(t, dir, crashAt(sinktest.FakePreCommit, epoch, true), releaseRows, true)
	if !errors.Is(staged.Err, sinktest.ErrFakeFault) && !errors.Is(staged.Err, sinktest.ErrFakeKilled) {
		t.Fatalf("Sync: %v, want the injected crash", staged.Err)
	}
	if got := staged.Released(); len(got) != 0 {
		t.Fatalf("released %q before the commit point", got)
	}
	if got := readRelease(t, wh)[faker.Orders].Snapshots; got != snaps {
		t.Fatalf("the orders went from %d snapshots to %d before the commit point", snaps, got)
	}
	committed := testutil.SyncRelease(t, dir, crashAt(sinktest.FakeCommit, epoch, false), releaseRows, true)
	if committed.Err == nil {
		t.Fatal("Sync succeeded through the injected crash")
	}
	all := int64(len(amounts) + len(items) + len(scores))
	if r := committed.Res.Streams[faker.Orders].Released + committed.Res.Streams[faker.Customers].Released; r != all {
		t.Errorf("the committed epoch released %d values, want %d", r, all)
	}
	last := testutil.SyncRelease(t, dir, dest(), releaseRows, true)
	if last.Err != nil {
		t.Fatal(last.Err)
	}
	if got := last.Released(); len(got) != 0 {
		t.Errorf("released %q again after the commit point", got)
	}
	if got := last.Res.Totals[faker.Orders].Released + last.Res.Totals[faker.Customers].Released; got != all {
		t.Errorf("totals: %d values released, want %d", got, all)
	}
	ot := readRelease(t, wh)[faker.Orders]
	rows := pyRows(t, ot, "amount")
	written := int(first.Res.Streams[faker.Orders].Written)
	if n, m := checkPatched(t, "orders", rows, releaseRows, amounts); n != written || m != len(amounts) {
		t.Errorf("%d orders, %d with a held amount; want %d and %d", n, m, written, len(amounts))
	}
	if ids := idsSeqs(rows, releaseRows); len(slices.Compact(slices.Clone(ids))) != written || len(ids) != written {
		t.Errorf("%d orders read, %d distinct; want %d each", len(ids), len(slices.Compact(slices.Clone(ids))), written)
	}
	if ot.Snapshots != snaps+1 {
		t.Errorf("orders: %d snapshots, want %d (one for the release)", ot.Snapshots, snaps+1)
	}
}
