package parquet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"gocloud.dev/blob"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// TestConformancePatchesS3 runs the suite's patch check on the S3
// server scripts/servers.sh starts (versitygw), where files are copied
// and rewritten through S3's API; TestConformance runs it on memory and
// file buckets.
func TestConformancePatchesS3(t *testing.T) {
	b, prefix := s3Bucket(t)
	skip := map[string]string{}
	for _, c := range []string{sinktest.CheckRecoverNil, sinktest.CheckInvisible, sinktest.CheckCommit, sinktest.CheckCommitTwice,
		sinktest.CheckEmptyEpoch, sinktest.CheckWidenSchema, sinktest.CheckCrash, sinktest.CheckZombie, sinktest.CheckConcurrent,
		sinktest.CheckLanes, sinktest.CheckCloseDiscards, sinktest.CheckAhead, sinktest.CheckFinish, sinktest.CheckMerge,
		sinktest.CheckMergeReplay, sinktest.CheckHardDeletes, sinktest.CheckOverwrite, sinktest.CheckOverwriteEmpty} {
		skip[c] = "TestConformance runs it on memory and file buckets"
	}
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, b, parquet.Config{Prefix: prefix, RowGroupRows: 16})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return visible(ctx, b, prefix, stream)
		},
		Skip: skip,
	})
}

// narrowed is the Parquet destination as a version that can't take
// float64 columns would be: the engine holds their values back.
type narrowed struct{ *parquet.Destination }

func (d narrowed) Capabilities() sink.Capabilities {
	c := d.Destination.Capabilities()
	c.Unsupported = append(slices.Clone(c.Unsupported), "float64")
	return c
}

const releaseRows = 2000

// pyRow is a row as pyarrow reads it: the column's value as JSON text
// (null for a null or a missing column).
type pyRow struct {
	ID    string `json:"id"`
	Seq   int64  `json:"seq"`
	Value string `json:"value"`
}

// readPyarrow reads column of stream's current manifest's files under
// the bucket directory root with pyarrow, the independent reader.
func readPyarrow(t *testing.T, root, stream, column string) []pyRow {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
root, stream, col = sys.argv[1:4]
d = os.path.join(root, stream, "_manifest")
m = sorted(f for f in os.listdir(d) if f.endswith(".json"))[-1]
for f in json.load(open(os.path.join(d, m)))["files"]:
    t = pq.read_table(os.path.join(root, f["key"]))
    assert t.num_rows == f["rows"], (f, t.num_rows)
    vals = t.column(col).to_pylist() if col in t.column_names else [None] * t.num_rows
    for i, s, v in zip(t.column("_openetl_id").to_pylist(), t.column("_openetl_seq").to_pylist(), vals):
        print(json.dumps({"id": i, "seq": s, "value": json.dumps(v, separators=(",", ":"))}))
`
	f := filepath.Join(t.TempDir(), "read.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, root, stream, column)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var rows []pyRow
	for l := range bytes.Lines(out) {
		var r pyRow
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("pyarrow's line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// checkPatched checks the rows (pyarrow's) at or below seq maxSeq
// against the held values (testutil.CheckReleased).
func checkPatched(t *testing.T, what string, rows []pyRow, maxSeq int64, held map[string]string) (n, matched int) {
	t.Helper()
	var rs []testutil.ReleasedRow
	for _, r := range rows {
		if r.Seq <= maxSeq {
			rs = append(rs, testutil.ReleasedRow{ID: r.ID, Value: r.Value})
		}
	}
	return testutil.CheckReleased(t, what, rs, held, nil, "null")
}

// idsSeqs is rows' ids and seqs, sorted, as one string per row.
func idsSeqs(rows []pyRow, maxSeq int64) []string {
	var out []string
	for _, r := range rows {
		if r.Seq <= maxSeq {
			out = append(out, r.ID+"/"+strconv.FormatInt(r.Seq, 10))
		}
	}
	slices.Sort(out)
	return out
}

// openRelease opens the file bucket at root.
func openRelease(t *testing.T, root string) *blob.Bucket {
	t.Helper()
	b, err := parquet.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestReleaseHeldValues: a destination that can't take float64 gets
// the fake orders and customers without their amount and score, which
// are held (and items, a list of structs, without each struct's price:
// its whole value is held, and released without a change, since every
// row has one); the next
// Sync, into one that takes float64 (a later writer version), rewrites
// each file that holds such a row with the values set and lists the
// copy in the stream's next manifest in place of the file (whose entry
// it keeps, File.Replaced). Read back with pyarrow through the
// manifest: every row of the first Sync has its own held values, with
// its _openetl_id and _openetl_seq, and appears once; 500 new records a
// stream land in the same epoch with their values; the held.released
// events and the Result count the values. A third Sync releases nothing
// and leaves the manifest's files as they were.
func TestReleaseHeldValues(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	b := openRelease(t, root)
	dest := func() *parquet.Destination { return newDest(t, b, parquet.Config{}) }
	first := testutil.SyncRelease(t, dir, narrowed{dest()}, releaseRows, false)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	orders, customers := first.Res.Streams[faker.Orders], first.Res.Streams[faker.Customers]
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	items := testutil.HeldValues(t, dir, faker.Orders, "items")
	scores := testutil.HeldValues(t, dir, faker.Customers, "score")
	if len(amounts) != int(orders.Written) || len(items) != int(orders.Written) || len(scores) == 0 {
		t.Fatalf("held %d amounts, %d items, %d scores of %d orders and %d customers written", len(amounts), len(items), len(scores), orders.Written, customers.Written)
	}
	before := readPyarrow(t, root, faker.Orders, "amount")
	if n, m := checkPatched(t, "orders before", before, releaseRows, nil); n != int(orders.Written) || m != 0 {
		t.Fatalf("first Sync: %d orders read, %d with a value; want %d and none", n, m, orders.Written)
	}
	oldFiles := manifest(t, b, "", faker.Orders).Files
	itemsBefore := readPyarrow(t, root, faker.Orders, "items")

	second := testutil.SyncRelease(t, dir, dest(), releaseRows+500, false)
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
	after := readPyarrow(t, root, faker.Orders, "amount")
	if !slices.Equal(idsSeqs(after, releaseRows), idsSeqs(before, releaseRows)) {
		t.Error("the first Sync's orders (ids and seqs) changed: a row was lost, doubled or renumbered")
	}
	if len(after) != int(orders.Written)+500 {
		t.Errorf("%d orders read, want %d", len(after), orders.Written+500)
	}
	if n, m := checkPatched(t, "orders", after, releaseRows, amounts); n != int(orders.Written) || m != len(amounts) {
		t.Errorf("%d orders, %d with a held amount; want %d and %d", n, m, orders.Written, len(amounts))
	}
	for _, r := range after {
		if r.Seq > releaseRows && r.Value == "null" {
			t.Fatalf("order %s of the second Sync has no amount", r.ID)
		}
	}
	// items was written without the part that was held (each struct's
	// price): its rows have a value, which the release leaves as it is.
	if got := readPyarrow(t, root, faker.Orders, "items"); !slices.Equal(got[:len(itemsBefore)], itemsBefore) {
		t.Error("the release changed the orders' items, which every row has")
	}
	if n, m := checkPatched(t, "customers", readPyarrow(t, root, faker.Customers, "score"), releaseRows, scores); n != int(customers.Written) || m != len(scores) {
		t.Errorf("%d customer versions, %d with a held score; want %d and %d (deletes have none)", n, m, customers.Written, len(scores))
	}
	// Each file of the first Sync is replaced by its rewritten copy.
	m := manifest(t, b, "", faker.Orders)
	replaced := map[string]bool{}
	for _, f := range m.Files {
		if f.Replaced != nil {
			if f.Patched != second.Res.Epoch && f.Patched == 0 {
				t.Errorf("file %s replaces %s but says no patch epoch", f.Key, f.Replaced.Key)
			}
			replaced[f.Replaced.Key] = true
		}
	}
	for _, f := range oldFiles {
		if !replaced[f.Key] {
			t.Errorf("file %s of the first Sync is not replaced by a patched copy", f.Key)
		}
	}

	third := testutil.SyncRelease(t, dir, dest(), releaseRows+500, false)
	if third.Err != nil {
		t.Fatal(third.Err)
	}
	if got := third.Released(); len(got) != 0 {
		t.Errorf("third Sync released %q again", got)
	}
	if got := third.Res.Totals[faker.Orders].Released; got != int64(len(amounts)+len(items)) {
		t.Errorf("totals: %d amounts and items released, want %d", got, len(amounts)+len(items))
	}
	if !slices.EqualFunc(manifest(t, b, "", faker.Orders).Files, m.Files, func(a, b parquet.File) bool { return a.Key == b.Key }) {
		t.Error("the third Sync changed the orders' files")
	}
}

// TestReleaseCrash: an attempt that staged its patches and crashed
// before its commit point released nothing (the manifest is as it
// was); one that crashed after its commit point, before the
// destination's Commit, released them, and the next attempt's recovery
// applies them. Read back with pyarrow, each held amount is on its row,
// each row once, and the Totals count each value once.
func TestReleaseCrash(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	b := openRelease(t, root)
	dest := func() *parquet.Destination { return newDest(t, b, parquet.Config{}) }
	first := testutil.SyncRelease(t, dir, narrowed{dest()}, releaseRows, false)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	items := testutil.HeldValues(t, dir, faker.Orders, "items")
	scores := testutil.HeldValues(t, dir, faker.Customers, "score")
	v := manifest(t, b, "", faker.Orders).Version
	crashAt := func(op sinktest.FakeDestOp, epoch uint64, after bool) *sinktest.FaultyDestination {
		return sinktest.WithFaults(dest(), sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == op && c.Epoch == epoch {
				return &sinktest.FakeFault{After: after, Crash: true}
			}
			return nil
		}})
	}
	epoch := first.Res.Epoch + 1
	staged := testutil.SyncRelease(t, dir, crashAt(sinktest.FakePreCommit, epoch, true), releaseRows, false)
	if !errors.Is(staged.Err, sinktest.ErrFakeFault) && !errors.Is(staged.Err, sinktest.ErrFakeKilled) {
		t.Fatalf("Sync: %v, want the injected crash", staged.Err)
	}
	if got := staged.Released(); len(got) != 0 {
		t.Fatalf("released %q before the commit point", got)
	}
	if got := manifest(t, b, "", faker.Orders).Version; got != v {
		t.Fatalf("the orders' manifest went from version %d to %d before the commit point", v, got)
	}
	committed := testutil.SyncRelease(t, dir, crashAt(sinktest.FakeCommit, epoch, false), releaseRows, false)
	if committed.Err == nil {
		t.Fatal("Sync succeeded through the injected crash")
	}
	all := int64(len(amounts) + len(items) + len(scores))
	if r := committed.Res.Streams[faker.Orders].Released + committed.Res.Streams[faker.Customers].Released; r != all {
		t.Errorf("the committed epoch released %d values, want %d", r, all)
	}
	last := testutil.SyncRelease(t, dir, dest(), releaseRows, false)
	if last.Err != nil {
		t.Fatal(last.Err)
	}
	if got := last.Released(); len(got) != 0 {
		t.Errorf("released %q again after the commit point", got)
	}
	if got := last.Res.Totals[faker.Orders].Released + last.Res.Totals[faker.Customers].Released; got != all {
		t.Errorf("totals: %d values released, want %d", got, all)
	}
	rows := readPyarrow(t, root, faker.Orders, "amount")
	written := int(first.Res.Streams[faker.Orders].Written)
	if n, m := checkPatched(t, "orders", rows, releaseRows, amounts); n != written || m != len(amounts) {
		t.Errorf("%d orders, %d with a held amount; want %d and %d", n, m, written, len(amounts))
	}
	if ids := idsSeqs(rows, releaseRows); len(slices.Compact(slices.Clone(ids))) != written || len(ids) != written {
		t.Errorf("%d orders read, %d distinct; want %d each", len(ids), len(slices.Compact(slices.Clone(ids))), written)
	}
	if strings.Contains(strings.Join(keys(t, b, ""), "\n"), "_staging/") {
		t.Errorf("staged files left: %q", keys(t, b, ""))
	}
}

// idRows builds rows of value (null where the map has none), keyed by
// _openetl_id "id-{i}", seq i, for i in [from, from+n); with patch, a
// patch batch (sink.PatchMetadataKey).
func idRows(t testing.TB, from, n int, value map[int]string, patch bool) arrow.RecordBatch {
	t.Helper()
	var md *arrow.Metadata
	if patch {
		m := arrow.NewMetadata([]string{sink.PatchMetadataKey}, []string{sink.PatchMetadataValue})
		md = &m
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "value", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	}, md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := from; i < from+n; i++ {
		if v, ok := value[i]; ok {
			b.Field(0).(*array.StringBuilder).Append(v)
		} else {
			b.Field(0).AppendNull()
		}
		b.Field(1).(*array.StringBuilder).Append("id-" + strconv.Itoa(i))
		b.Field(2).(*array.Int64Builder).Append(int64(i))
	}
	return b.NewRecordBatch()
}

// values reads stream's value column through its manifest, by id.
func values(t *testing.T, b *blob.Bucket, stream string) map[string]string {
	t.Helper()
	rows, err := visible(context.Background(), b, "", stream)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rows {
		if _, dup := out[r.ID]; dup {
			t.Fatalf("%s: row %s twice", stream, r.ID)
		}
		v, _ := r.Values["value"].(string)
		out[r.ID] = v
	}
	return out
}

// TestPatchedEpochTakenBack: an epoch whose patches were applied to
// stream a (its file rewritten and listed in place of the original) and
// whose Commit failed on stream b (its staged file gone) is Lost at the
// next Recover, and a gives it back: its manifest lists the original
// file again, whose rows have their nulls, and no row twice.
func TestPatchedEpochTakenBack(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		for _, s := range []string{"a", "b"} {
			rec := idRows(t, 0, 10, map[int]string{1: "one"}, false)
			if err := w.Write(ctx, s, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		commit(t, w, 1, preCommit(t, w, 1))
		orig := manifest(t, b, "", "a").Files

		patch := idRows(t, 0, 3, map[int]string{0: "zero", 1: "not set", 2: "two"}, true)
		if err := w.Write(ctx, "a", patch); err != nil {
			t.Fatal(err)
		}
		patch.Release()
		more := idRows(t, 10, 5, nil, false)
		if err := w.Write(ctx, "b", more); err != nil {
			t.Fatal(err)
		}
		more.Release()
		c2 := preCommit(t, w, 2)
		head2 := record("p", 2, 1, c2)
		staged := keys(t, b, "_staging/p/b/")
		if len(staged) != 1 {
			t.Fatalf("staged files of b: %v", staged)
		}
		if err := b.Delete(ctx, staged[0]); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, 2, []sink.Committable{c2}); err == nil {
			t.Fatal("Commit with b's staged file gone succeeded")
		}
		m := manifest(t, b, "", "a")
		if m.Epoch != 2 || len(m.Files) != 1 || m.Files[0].Replaced == nil || m.Files[0].Replaced.Key != orig[0].Key || m.Files[0].Patched != 2 {
			t.Fatalf("a's manifest after the patches: %+v, want its file replaced by a copy patched in epoch 2", m)
		}
		if got := values(t, b, "a"); got["id-0"] != "zero" || got["id-1"] != "one" || got["id-2"] != "two" || got["id-3"] != "" || len(got) != 10 {
			t.Fatalf("a after the patches: %v", got)
		}

		w2 := newWriter(t, d, "p", 0)
		if out := recoverGen(t, w2, 2, head2); out != sink.Lost {
			t.Fatalf("Recover: %v, want lost", out)
		}
		m = manifest(t, b, "", "a")
		if m.Epoch != 1 || len(m.Files) != 1 || m.Files[0].Key != orig[0].Key {
			t.Errorf("a's manifest after Recover: epoch %d, files %+v; want epoch 1 and the original file %s", m.Epoch, m.Files, orig[0].Key)
		}
		if got := values(t, b, "a"); got["id-0"] != "" || got["id-1"] != "one" || len(got) != 10 {
			t.Errorf("a after Recover: %v, want the original rows", got)
		}
	})
}

// TestReplacedFilesCollected: a file a release replaced stays while a
// kept manifest version lists it (a reader of that version can read
// it), and the first Collect after the last such version was pruned
// (ManifestHistory 2) removes it; the rewritten copy and the values
// read through the manifest stay.
func TestReplacedFilesCollected(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		d := newDest(t, b, parquet.Config{ManifestHistory: 2})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		rec := idRows(t, 0, 10, nil, false)
		if err := w.Write(ctx, "a", rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		c := preCommit(t, w, 1)
		commit(t, w, 1, c)
		orig := manifest(t, b, "", "a").Files[0].Key
		collect := func(epoch uint64, c sink.Committable) {
			t.Helper()
			if _, err := d.Collect(ctx, sink.CollectRequest{Pipeline: "p", Generation: 1, Head: record("p", epoch, 1, c)}); err != nil {
				t.Fatalf("Collect: %v", err)
			}
		}
		exists := func(key string) bool {
			ok, err := b.Exists(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		patch := idRows(t, 0, 2, map[int]string{0: "zero", 1: "one"}, true)
		if err := w.Write(ctx, "a", patch); err != nil {
			t.Fatal(err)
		}
		patch.Release()
		c = preCommit(t, w, 2)
		commit(t, w, 2, c)
		copyKey := manifest(t, b, "", "a").Files[0].Key
		for epoch := uint64(2); epoch <= 4; epoch++ {
			if epoch > 2 {
				more := idRows(t, int(epoch)*10, 1, nil, false)
				if err := w.Write(ctx, "a", more); err != nil {
					t.Fatal(err)
				}
				more.Release()
				c = preCommit(t, w, epoch)
				commit(t, w, epoch, c)
			}
			collect(epoch, c)
			// Versions kept: the current and two before it; version 1
			// (epoch 1) lists the original until epoch 4 prunes it.
			if want := epoch < 4; exists(orig) != want {
				t.Fatalf("after epoch %d's Collect: original file there: %v, want %v", epoch, !want, want)
			}
		}
		if !exists(copyKey) {
			t.Fatal("the rewritten copy was removed")
		}
		if got := values(t, b, "a"); got["id-0"] != "zero" || got["id-1"] != "one" || len(got) != 12 {
			t.Errorf("a: %v, want 12 rows, id-0 and id-1 set", got)
		}
	})
}
