package clickhouse

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// testCluster returns a destination on the chcluster service's cluster
// (scripts/servers.sh start chcluster) in a fresh database, dropped on
// every server when the test ends.
func testCluster(t *testing.T) *Destination {
	t.Helper()
	env := os.Getenv("OPENETL_TEST_CHCLUSTER_SHARDS")
	if env == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_CHCLUSTER_SHARDS is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_CHCLUSTER_SHARDS is not set: start the cluster with scripts/servers.sh start chcluster, or set OPENETL_SKIP_SERVERS=1")
	}
	cl := &Cluster{Name: os.Getenv("OPENETL_TEST_CHCLUSTER_NAME")}
	for _, s := range strings.Split(env, ";") {
		cl.Shards = append(cl.Shards, strings.Split(s, ","))
	}
	db := fmt.Sprintf("openetl_itest_%012x", rand.Uint64()>>16)
	d, err := New(context.Background(), Config{Database: db, Cluster: cl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range d.shards {
			for _, r := range s.replicas {
				_ = r.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
			}
		}
		d.Close()
	})
	return d
}

// TestClusterHalfApplied commits an epoch on shard 0 only, as a process
// dying inside Commit leaves it: the next attempt's Recover reports it
// Recoverable (not Lost), and its Commit applies shard 1's share and
// skips shard 0's, so every row is in once. With shard 1's share then
// dropped from its staging table by hand, Recover refuses the epoch
// (applied on shard 0, gone from shard 1) instead of calling it Lost.
func TestClusterHalfApplied(t *testing.T) {
	d := testCluster(t)
	ctx := context.Background()
	const rows = 1000
	attempt := func(pipeline string, gen checkpoint.Generation, head *checkpoint.Record) (*clusterWriter, sink.Outcome, error) {
		t.Helper()
		sw, err := d.Writer(ctx, sink.WriterConfig{Pipeline: pipeline})
		if err != nil {
			t.Fatal(err)
		}
		w := sw.(*clusterWriter)
		t.Cleanup(func() { w.Close(ctx) })
		out, err := w.Recover(ctx, gen, head)
		return w, out, err
	}
	count := func(s int, table string) uint64 {
		t.Helper()
		var n uint64
		if err := d.shards[s].conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s", qualified(d.db, table))).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			table, pipe := fmt.Sprintf("t%v", drop), fmt.Sprintf("half%v", drop)
			w, _, err := attempt(pipe, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := intRecord(0, rows)
			defer rec.Release()
			if err := w.Write(ctx, table, rec); err != nil {
				t.Fatal(err)
			}
			c, err := w.PreCommit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			per, has, err := w.splitCommittables([][]byte{c})
			if err != nil {
				t.Fatal(err)
			}
			if !has[0] || !has[1] {
				t.Fatalf("%d rows reached shards %v: want both", rows, has)
			}
			// Shard 0 applies; the process dies before shard 1 does.
			if err := w.shards[0].Commit(ctx, 1, per[0]); err != nil {
				t.Fatal(err)
			}
			n0 := count(0, table)
			if n0 == 0 || n0 == rows || count(1, table) != 0 {
				t.Fatalf("after shard 0's commit: %d and %d rows on the shards, want some of %d on shard 0 only", n0, count(1, table), rows)
			}
			head := &checkpoint.Record{Pipeline: pipe, Epoch: 1, Committables: [][]byte{c}}
			if drop {
				one, err := decodeCommittable(per[1][0])
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range one.Blocks {
					if err := d.shards[1].conn.Exec(ctx, dropStagePartition(d.db, b.Table, b.Token)); err != nil {
						t.Fatal(err)
					}
				}
				_, _, err = attempt(pipe, 2, head)
				if err == nil || !strings.Contains(err.Error(), "applied on shards [0]") {
					t.Fatalf("Recover of an epoch applied on shard 0 and gone from shard 1: %v, want an error naming both", err)
				}
				return
			}
			w2, out, err := attempt(pipe, 2, head)
			if err != nil {
				t.Fatal(err)
			}
			if out != sink.Recoverable {
				t.Fatalf("Recover of an epoch applied on shard 0 only: %v, want Recoverable", out)
			}
			if err := w2.Commit(ctx, 1, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			if got := count(0, table) + count(1, table); got != rows || count(0, table) != n0 {
				t.Fatalf("after the recovery: %d + %d rows, want %d + %d", count(0, table), count(1, table), n0, rows-n0)
			}
		})
	}
}

// TestRoute pins the routing: a merge table's versions of one key go to
// one shard whatever else differs; an int32 key routes as the same
// int64; the hash is FNV-1a as documented (a change would move keys);
// and routing a batch of string keys allocates nothing per row.
func TestRoute(t *testing.T) {
	w := &clusterWriter{shards: make([]*writer, 4), idx: make([][]int64, 4), keys: map[string][]string{"m": {"k"}}}
	sc := func(kt arrow.DataType) *arrow.Schema {
		return arrow.NewSchema([]arrow.Field{{Name: "k", Type: kt}, {Name: colID, Type: arrow.BinaryTypes.String}, {Name: colSeq, Type: arrow.PrimitiveTypes.Int64}}, nil)
	}
	build := func(kt arrow.DataType, n int, key func(i int) int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc(kt))
		defer b.Release()
		for i := range n {
			switch kb := b.Field(0).(type) {
			case *array.Int64Builder:
				kb.Append(key(i))
			case *array.Int32Builder:
				kb.Append(int32(key(i)))
			}
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("id-%d", i))
			b.Field(2).(*array.Int64Builder).Append(int64(i))
		}
		return b.NewRecordBatch()
	}
	shardOf := func(table string, rec arrow.RecordBatch) []int {
		if err := w.route(table, rec); err != nil {
			t.Fatal(err)
		}
		out := make([]int, rec.NumRows())
		for s, rows := range w.idx {
			for _, r := range rows {
				out[r] = s
			}
		}
		return out
	}
	// Ten versions of each of 100 keys, different ids and seqs.
	r64 := build(arrow.PrimitiveTypes.Int64, 1000, func(i int) int64 { return int64(i % 100) })
	defer r64.Release()
	r32 := build(arrow.PrimitiveTypes.Int32, 1000, func(i int) int64 { return int64(i % 100) })
	defer r32.Release()
	s64, s32 := shardOf("m", r64), shardOf("m", r32)
	used := map[int]bool{}
	for i := range s64 {
		if s64[i] != s64[i%100] {
			t.Fatalf("row %d (key %d) went to shard %d, its first version to %d", i, i%100, s64[i], s64[i%100])
		}
		if s32[i] != s64[i] {
			t.Fatalf("key %d: shard %d as int32, %d as int64", i%100, s32[i], s64[i])
		}
		used[s64[i]] = true
	}
	if len(used) != 4 {
		t.Errorf("100 keys reached %d of 4 shards", len(used))
	}
	// Append tables route by _openetl_id: FNV-1a of its bytes, then a 0.
	app := shardOf("a", r64)
	want := (fnvString(fnvString(fnvOffset, "id-7"), "\x00")) % 4
	if uint64(app[7]) != want {
		t.Errorf("row with _openetl_id id-7: shard %d, want %d", app[7], want)
	}
	// A closure or two per column, none per row.
	allocs := testing.AllocsPerRun(10, func() { _ = w.route("a", r64) })
	if allocs > 2 {
		t.Errorf("routing 1000 rows by a string column: %v allocations, want at most 2 (none per row)", allocs)
	}
	// Every type a key column takes: versions of a key meet on one
	// shard, and nothing is allocated per row.
	for _, c := range []struct {
		dt  arrow.DataType
		val func(k int) string // the key's JSON
	}{
		{&arrow.Decimal128Type{Precision: 12, Scale: 2}, func(k int) string { return fmt.Sprintf(`"%d.%02d"`, k*37, k%100) }},
		{arrow.FixedWidthTypes.Timestamp_us, func(k int) string { return fmt.Sprint(1_767_225_600_000_000 + int64(k)*1_000_123) }},
		{arrow.FixedWidthTypes.Date32, func(k int) string { return fmt.Sprintf(`"2026-%02d-%02d"`, 1+k%12, 1+k%28) }},
		{arrow.PrimitiveTypes.Float32, func(k int) string { return fmt.Sprintf("%d.5", k) }},
		{arrow.BinaryTypes.LargeBinary, func(k int) string { return fmt.Sprintf(`"%s"`, base64.StdEncoding.EncodeToString([]byte{byte(k), 7})) }},
	} {
		var js []string
		for i := range 1000 {
			js = append(js, c.val(i%100))
		}
		keys, _, err := array.FromJSON(memory.DefaultAllocator, c.dt, strings.NewReader("["+strings.Join(js, ",")+"]"))
		if err != nil {
			t.Fatalf("%s: %v", c.dt, err)
		}
		ids, seqs := r64.Column(1), r64.Column(2)
		rec := array.NewRecordBatch(sc(c.dt), []arrow.Array{keys, ids, seqs}, 1000)
		keys.Release()
		got := shardOf("m", rec)
		for i := range got {
			if got[i] != got[i%100] {
				t.Fatalf("%s: row %d went to shard %d, its key's first version to %d", c.dt, i, got[i], got[i%100])
			}
		}
		if allocs := testing.AllocsPerRun(10, func() { _ = w.route("m", rec) }); allocs > 4 {
			t.Errorf("routing 1000 rows by a %s key: %v allocations, want at most 4 (none per row)", c.dt, allocs)
		}
		rec.Release()
	}
}

// TestRouteShardBy: with Cluster.ShardBy a row's shard is its value of
// the column mod the shards, a signed value taken as the unsigned
// integer of its width (as a Distributed table's sharding key), with
// nothing allocated per row; a missing, non-integer or (for an append
// table) nullable column is an error naming it.
func TestRouteShardBy(t *testing.T) {
	w := &clusterWriter{shards: make([]*writer, 3), idx: make([][]int64, 3),
		keys: map[string][]string{"m": {"k"}}, shardBy: map[string]string{"a": "k", "m": "k"}}
	shardOf := func(table string, rec arrow.RecordBatch) []int {
		t.Helper()
		if err := w.route(table, rec); err != nil {
			t.Fatal(err)
		}
		out := make([]int, rec.NumRows())
		for s, rows := range w.idx {
			for _, r := range rows {
				out[r] = s
			}
		}
		return out
	}
	for _, c := range []struct {
		dt   arrow.DataType
		json string
		want []int
	}{
		// -1 as uint32 is 4294967295 = 3 * 1431655765: shard 0; as
		// uint64 18446744073709551615 = 3 * 6148914691236517205: shard 0;
		// -2 as uint64 one less: shard 2;
		// -2 as uint32 4294967294: shard 2; as int8 254: shard 2.
		{arrow.PrimitiveTypes.Int32, "[0, 1, 2, 3, 4, -1, -2, 2147483647]", []int{0, 1, 2, 0, 1, 0, 2, 1}},
		{arrow.PrimitiveTypes.Int64, "[5, -1, -2, 9223372036854775807]", []int{2, 0, 2, 1}},
		{arrow.PrimitiveTypes.Int8, "[-2, 7]", []int{2, 1}},
		{arrow.PrimitiveTypes.Int16, "[-2, 7]", []int{65534 % 3, 1}},
		{arrow.PrimitiveTypes.Uint64, "[18446744073709551615, 4]", []int{0, 1}},
		{arrow.PrimitiveTypes.Uint8, "[255, 4]", []int{0, 1}},
		{arrow.PrimitiveTypes.Uint16, "[65535, 4]", []int{0, 1}},
		{arrow.PrimitiveTypes.Uint32, "[4294967295, 4]", []int{0, 1}},
	} {
		keys, _, err := array.FromJSON(memory.DefaultAllocator, c.dt, strings.NewReader(c.json))
		if err != nil {
			t.Fatal(err)
		}
		rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "k", Type: c.dt}}, nil), []arrow.Array{keys}, int64(keys.Len()))
		keys.Release()
		if got := shardOf("a", rec); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: shards %v, want %v", c.dt, c.json, got, c.want)
		}
		rec.Release()
	}
	// 1000 rows: no allocation per row.
	b := array.NewInt64Builder(memory.DefaultAllocator)
	for i := range 1000 {
		b.Append(int64(i) - 500)
	}
	ks := b.NewInt64Array()
	b.Release()
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}}, nil), []arrow.Array{ks}, 1000)
	ks.Release()
	defer rec.Release()
	_ = shardOf("a", rec)
	if allocs := testing.AllocsPerRun(10, func() { _ = w.route("a", rec) }); allocs > 1 {
		t.Errorf("routing 1000 rows by a ShardBy column: %v allocations, want at most 1 (none per row)", allocs)
	}
	// A merge table's key column may be nullable (its nulls are
	// quarantined; they route to shard 0); an append table's may not.
	nk, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64, strings.NewReader("[4, null]"))
	nrec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil), []arrow.Array{nk}, 2)
	nk.Release()
	defer nrec.Release()
	if got := shardOf("m", nrec); !slices.Equal(got, []int{1, 0}) {
		t.Errorf("merge table, key [4, null]: shards %v, want [1 0]", got)
	}
	if err := w.route("a", nrec); err == nil || !strings.Contains(err.Error(), "nullable") {
		t.Errorf("append table, nullable ShardBy column: %v, want an error", err)
	}
	sk, _, _ := array.FromJSON(memory.DefaultAllocator, arrow.BinaryTypes.String, strings.NewReader(`["x"]`))
	srec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String}, {Name: "j", Type: arrow.BinaryTypes.String}}, nil), []arrow.Array{sk, sk}, 1)
	sk.Release()
	defer srec.Release()
	if err := w.route("a", srec); err == nil || !strings.Contains(err.Error(), "not an integer column") {
		t.Errorf("string ShardBy column: %v, want an error", err)
	}
	w.shardBy["a"] = "z"
	if err := w.route("a", srec); err == nil || !strings.Contains(err.Error(), `"z" is not in the batch`) {
		t.Errorf("ShardBy column missing from the batch: %v, want an error", err)
	}
}

// TestClusterConfig checks New's refusals of a bad cluster config and,
// with Distributed tables, CheckStream's of a table named like one; none
// needs a server.
func TestClusterConfig(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no shards", Config{Cluster: &Cluster{}}, "Shards is empty"},
		{"a shard without replicas", Config{Cluster: &Cluster{Shards: [][]string{{"127.0.0.1:1"}, {}}}}, "Shards[1] has no replicas"},
		{"an address without a port", Config{Cluster: &Cluster{Shards: [][]string{{"127.0.0.1"}}}}, `replica address "127.0.0.1"`},
		{"a quote in the name", Config{Cluster: &Cluster{Shards: [][]string{{"127.0.0.1:1"}}, Name: "a'b"}}, "is not a cluster name"},
		{"a ZooKeeperPath without a trailing slash", Config{Cluster: &Cluster{Shards: [][]string{{"127.0.0.1:1"}}, ZooKeeperPath: "/ch/{shard}"}}, `ZooKeeperPath "/ch/{shard}" must start and end`},
		{"ShardBy without a column", Config{Cluster: &Cluster{Shards: [][]string{{"127.0.0.1:1"}}, ShardBy: map[string]string{"t": ""}}}, `ShardBy["t"] names no column`},
		{"ShardBy of a reserved table", Config{Cluster: &Cluster{Shards: [][]string{{"127.0.0.1:1"}}, ShardBy: map[string]string{"_openetl_fence": "k"}}}, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(ctx, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
	d := &Destination{cluster: "c"}
	if err := d.CheckStream(sink.StreamSpec{Table: "orders_all"}); err == nil || !strings.Contains(err.Error(), "Distributed") {
		t.Errorf("CheckStream(orders_all) on a cluster with Distributed tables: %v, want an error", err)
	}
	if err := d.CheckStream(sink.StreamSpec{Table: "orders"}); err != nil {
		t.Errorf("CheckStream(orders): %v", err)
	}
	d.shardBy = map[string]string{"m": "tenant"}
	if err := d.CheckStream(sink.StreamSpec{Table: "m", Mode: sink.Merge, Key: []string{"id"}}); err == nil || !strings.Contains(err.Error(), "not a key column") {
		t.Errorf("CheckStream of a merged stream sharded by a column not in its key: %v, want an error", err)
	}
	if err := d.CheckStream(sink.StreamSpec{Table: "m", Mode: sink.Merge, Key: []string{"tenant", "id"}}); err != nil {
		t.Errorf("CheckStream of a merged stream sharded by a key column: %v", err)
	}
	if err := d.CheckStream(sink.StreamSpec{Table: "m"}); err != nil {
		t.Errorf("CheckStream of an appended stream sharded by a column: %v", err)
	}
	if err := (&Destination{}).CheckStream(sink.StreamSpec{Table: "orders_all"}); err != nil {
		t.Errorf("CheckStream(orders_all) on one server: %v", err)
	}
}

// TestClusterAheadRaisesNothing: when one shard has applied an epoch
// after head's (the checkpoint log was replaced), Recover fails with a
// *sink.AheadError before it raises any shard's fence.
func TestClusterAheadRaisesNothing(t *testing.T) {
	d := testCluster(t)
	ctx := context.Background()
	sw, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "ahead"})
	if err != nil {
		t.Fatal(err)
	}
	w := sw.(*clusterWriter)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	// Shard 1 records epoch 5 as applied; the log's head is epoch 1.
	if err := d.shards[1].conn.Exec(ctx, markEpoch(d.db, "ahead", 5, 1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	head := &checkpoint.Record{Pipeline: "ahead", Epoch: 1, Generation: 1}
	_, err = w.Recover(ctx, 2, head)
	var ahead *sink.AheadError
	if !errors.As(err, &ahead) {
		t.Fatalf("Recover with shard 1 ahead: %v, want a *sink.AheadError", err)
	}
	for s, sd := range d.shards {
		var g uint64
		if err := sd.conn.QueryRow(ctx, "SELECT "+fenceExpr(d.db, "ahead")).Scan(&g); err != nil {
			t.Fatal(err)
		}
		if g != 1 {
			t.Errorf("shard %d's fence is %d after a Recover that found shard 1 ahead, want 1 (nothing raised)", s, g)
		}
	}
}

// TestTakeTypes: routing copies a shard's rows of a batch with every
// type the writer takes, values and schema (field metadata, which marks
// enums, included) unchanged.
func TestTakeTypes(t *testing.T) {
	enum := arrow.NewMetadata([]string{"openetl.logical_type"}, []string{"enum"})
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: enum},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "uuid", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}, Nullable: true},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}), Nullable: true},
	}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(`[
		{"i8": 1, "u64": 18446744073709551615, "f32": 1.5, "b": true, "s": "a", "bin": "AQI=", "uuid": "AAECAwQFBgcICQoLDA0ODw==", "dec": "12.34", "d": 19000, "ts": "2024-02-29T23:59:59.123456Z", "l": [1, 2], "st": {"a": 7}},
		{"i8": null, "u64": null, "f32": null, "b": null, "s": null, "bin": null, "uuid": null, "dec": null, "d": null, "ts": null, "l": null, "st": null},
		{"i8": -3, "u64": 0, "f32": -0.25, "b": false, "s": "b", "bin": "", "uuid": "Dw4NDAsKCQgHBgUEAwIBAA==", "dec": "-0.01", "d": 0, "ts": "1970-01-01T00:00:00Z", "l": [], "st": {"a": null}}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	for _, rows := range [][]int64{{2, 0}, {1}, {0, 1, 2}} {
		got, err := take(context.Background(), rec, rows)
		if err != nil {
			t.Fatalf("take %v: %v", rows, err)
		}
		if !got.Schema().Equal(rec.Schema()) || !got.Schema().Field(4).Metadata.Equal(enum) {
			t.Fatalf("take %v: schema %v, want %v", rows, got.Schema(), rec.Schema())
		}
		for j := range int(rec.NumCols()) {
			for k, r := range rows {
				if g, w := got.Column(j).ValueStr(k), rec.Column(j).ValueStr(int(r)); g != w {
					t.Errorf("take %v: column %s row %d: %q, want %q", rows, sc.Field(j).Name, k, g, w)
				}
			}
		}
		got.Release()
	}
	// A dictionary column (an enum, as the engine may give one).
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	db := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "mood", Type: dt, Nullable: true}}, nil))
	defer db.Release()
	mb := db.Field(0).(*array.BinaryDictionaryBuilder)
	for _, v := range []string{"sad", "ok", "", "happy"} {
		if v == "" {
			mb.AppendNull()
		} else if err := mb.AppendString(v); err != nil {
			t.Fatal(err)
		}
	}
	drec := db.NewRecordBatch()
	defer drec.Release()
	got, err := take(context.Background(), drec, []int64{3, 2, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	var vals []string
	for k := range int(got.NumRows()) {
		vals = append(vals, got.Column(0).ValueStr(k))
	}
	if strings.Join(vals, ",") != "happy,(null),sad" || !arrow.TypeEqual(got.Column(0).DataType(), dt) {
		t.Errorf("take of a dictionary column: %v of %v, want happy,(null),sad of %v", vals, got.Column(0).DataType(), dt)
	}
}

// TestClusterLaggingReplica: an epoch applied through a shard's first
// replica that its second has not fetched yet (SYSTEM STOP FETCHES
// there, after the tables exist) is Applied for a Recover whose shard pool uses the second
// replica first, not Lost: calling it Lost would replay it, and its rows
// would be in twice once the second replica fetched the first's parts.
func TestClusterLaggingReplica(t *testing.T) {
	d := testCluster(t)
	ctx := context.Background()
	second := d.shards[0].replicas[1]
	sw, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "lag"})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close(ctx)
	if _, err := sw.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	commit := func(epoch uint64, from int) sink.Committable {
		t.Helper()
		rec := intRecord(from, 200)
		defer rec.Release()
		if err := sw.Write(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
		c, err := sw.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := sw.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	count := func(c interface {
		QueryRow(context.Context, string, ...any) driver.Row
	}) uint64 {
		t.Helper()
		var n uint64
		if err := c.QueryRow(ctx, "SELECT count() FROM "+qualified(d.db, "t")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Epoch 1 creates the tables on every replica; then the second
	// replica of shard 0 stops fetching parts, and epoch 2 is applied
	// through the first.
	commit(1, 0)
	if err := second.Exec(ctx, "SYSTEM SYNC REPLICA "+qualified(d.db, "t")); err != nil {
		t.Fatal(err)
	}
	if err := second.Exec(ctx, "SYSTEM STOP FETCHES"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Exec(context.Background(), "SYSTEM START FETCHES") })
	before := count(second)
	c := commit(2, 1000)
	if got, first := count(second), count(d.shards[0].replicas[0]); got != before || first <= before {
		t.Fatalf("shard 0 holds %d rows of t on its first replica, %d on its second (%d before epoch 2): want more on the first only", first, got, before)
	}
	// Another process, whose shard 0 pool tries the second replica first.
	cl := *clusterOf(t)
	cl.Shards = [][]string{{cl.Shards[0][1], cl.Shards[0][0]}, cl.Shards[1]}
	d2, err := New(ctx, Config{Database: d.db, Cluster: &cl})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	sw2, err := d2.Writer(ctx, sink.WriterConfig{Pipeline: "lag"})
	if err != nil {
		t.Fatal(err)
	}
	defer sw2.Close(ctx)
	out, err := sw2.Recover(ctx, 2, &checkpoint.Record{Pipeline: "lag", Epoch: 2, Generation: 1, Committables: [][]byte{c}})
	if err != nil {
		t.Fatal(err)
	}
	if out != sink.Applied {
		t.Fatalf("Recover through the lagging replica: %v, want Applied (the first replica has the epoch)", out)
	}
}

// clusterOf is the chcluster service's cluster.
func clusterOf(t *testing.T) *Cluster {
	t.Helper()
	cl := &Cluster{Name: os.Getenv("OPENETL_TEST_CHCLUSTER_NAME")}
	for _, s := range strings.Split(os.Getenv("OPENETL_TEST_CHCLUSTER_SHARDS"), ";") {
		cl.Shards = append(cl.Shards, strings.Split(s, ","))
	}
	return cl
}

// BenchmarkClusterCommitted is BenchmarkWriterCommitted against the
// chcluster service's four servers as 1, 2 and 4 shard targets of one
// replica each (Cluster.ZooKeeperPath by {replica}, each server its own
// shard: shards=1 is s1r1, shards=2 s1r1 and s2r1, shards=4 all four),
// and as the service's 2 shards x 2 replicas (2x2: what replication
// adds): routing, staging, and each epoch committed on every shard.
// Reported: rows/s and CPU-seconds per million rows of this process
// (client), of the five servers (the four ClickHouse servers and
// ZooKeeper, from /proc) and both (total: on a machine where they share
// the cores, the cost that decides). An epoch is the 100,000 rows of
// benchBatchesOf, or OPENETL_BENCH_EPOCH_ROWS (a multiple of 100,000:
// those batches written that many times), one block per shard.
//
//	go test -run '^$' -bench BenchmarkClusterCommitted -benchtime 10x ./sink/clickhouse
func BenchmarkClusterCommitted(b *testing.B) {
	env := os.Getenv("OPENETL_TEST_CHCLUSTER_SHARDS")
	if env == "" {
		b.Skip("OPENETL_TEST_CHCLUSTER_SHARDS is not set: scripts/servers.sh start chcluster")
	}
	const op = benchBatches * benchBatchRows
	epochRows := op
	if v := os.Getenv("OPENETL_BENCH_EPOCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n%op != 0 {
			b.Fatalf("OPENETL_BENCH_EPOCH_ROWS=%q: want a positive multiple of %d", v, op)
		}
		epochRows = n
	}
	var service [][]string
	for _, s := range strings.Split(env, ";") {
		service = append(service, strings.Split(s, ","))
	}
	var servers []string
	for _, s := range service {
		servers = append(servers, s...)
	}
	dir := os.Getenv("OPENETL_TEST_CHCLUSTER_DIR")
	var pids []string
	for _, s := range strings.Split(os.Getenv("OPENETL_TEST_CHCLUSTER_REPLICAS"), ";") {
		pids = append(pids, strings.Split(s, ",")...)
	}
	serverCPU := func() time.Duration {
		var t time.Duration
		for _, p := range append([]string{"zk"}, pids...) {
			t += pidCPU(filepath.Join(dir, p+".pid"))
		}
		return t
	}
	single := func(addrs ...string) *Cluster {
		cl := &Cluster{ZooKeeperPath: "/clickhouse/tables/{replica}/openetl_bench/"}
		for _, a := range addrs {
			cl.Shards = append(cl.Shards, []string{a})
		}
		return cl
	}
	for _, tc := range []struct {
		name string
		cl   *Cluster
	}{
		{"shards=1", single(service[0][0])},
		{"shards=2", single(service[0][0], service[1][0])},
		{"shards=4", single(servers...)},
		{"2x2", &Cluster{Shards: service}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			db := fmt.Sprintf("openetl_bench_%012x", rand.Uint64()>>16)
			d, err := New(ctx, Config{Database: db, Cluster: tc.cl, BlockRows: epochRows})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, s := range d.shards {
					for _, r := range s.replicas {
						_ = r.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
					}
				}
				d.Close()
			}()
			recs := benchBatchesOf(b)
			sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "bench"})
			defer sw.Close(ctx)
			if _, err := sw.Recover(ctx, 1, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			s0, _ := cpu()
			z0 := serverCPU()
			t0 := time.Now()
			for i := range b.N {
				for range epochRows / op {
					for _, rec := range recs {
						if err := sw.Write(ctx, "bench", rec); err != nil {
							b.Fatal(err)
						}
					}
				}
				c, err := sw.PreCommit(ctx, uint64(i)+1)
				if err != nil {
					b.Fatal(err)
				}
				if err := sw.Commit(ctx, uint64(i)+1, []sink.Committable{c}); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(t0)
			s1, _ := cpu()
			z1 := serverCPU()
			rows := int64(b.N) * int64(epochRows)
			report(b, rows, elapsed, s1-s0, z1-z0)
			if z1 > z0 {
				b.ReportMetric((s1-s0+z1-z0).Seconds()/(float64(rows)/1e6), "total-cpu-s/Mrows")
			}
		})
	}
}

// TestClusterPermanent: on a cluster, a missing database (81) is not
// permanent (a replica back from an outage lacks it until the next
// Recover); on one server it is. Refused credentials are on both.
func TestClusterPermanent(t *testing.T) {
	one, cluster := &Destination{}, &Destination{shards: []*Destination{{}}}
	for _, tc := range []struct {
		code             int32
		one, clusterWant bool
	}{{81, true, false}, {516, true, true}, {60, false, false}} {
		err := fmt.Errorf("wrapped: %w", &proto.Exception{Code: tc.code})
		if got := one.Permanent(err); got != tc.one {
			t.Errorf("one server: Permanent(code %d) = %v, want %v", tc.code, got, tc.one)
		}
		if got := cluster.Permanent(err); got != tc.clusterWant {
			t.Errorf("cluster: Permanent(code %d) = %v, want %v", tc.code, got, tc.clusterWant)
		}
	}
}
