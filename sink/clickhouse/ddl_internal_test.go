package clickhouse

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Statements and encodings for servers this machine doesn't have
// (DateTime64, Date32, Decimal256, Bool, dedup tokens, is_deleted), word
// for word; the 18.16 forms run in the integration tests.

var (
	old    = ServerFeatures("18.16.1")
	modern = ServerFeatures("25.8.2.1")
)

func TestServerFeatures(t *testing.T) {
	if old != (Features{Version: "18.16.1", UUID: true, ExperimentalLowCardinality: true}) {
		t.Errorf("18.16.1: %+v, want UUID and experimental LowCardinality only", old)
	}
	want := Features{Version: "25.8.2.1", DateTime64: true, Date32: true, Decimal256: true, Bool: true, LowCardinality: true, UUID: true, DedupToken: true, IsDeleted: true}
	if modern != want {
		t.Errorf("25.8: %+v, want %+v", modern, want)
	}
	if f := ServerFeatures("22.1.3"); f.DedupToken || !f.DateTime64 || !f.Bool {
		t.Errorf("22.1: %+v: dedup tokens came in 22.2", f)
	}
	if f := ServerFeatures("garbage"); f.DateTime64 {
		t.Errorf("unparsable version has features: %+v", f)
	}
}

func TestTypeMap(t *testing.T) {
	ts := func(u arrow.TimeUnit) arrow.DataType { return &arrow.TimestampType{Unit: u, TimeZone: "UTC"} }
	for _, tc := range []struct {
		typ      arrow.DataType
		nullable bool
		key      bool
		f        Features
		want     string
	}{
		{arrow.PrimitiveTypes.Int64, true, false, old, "Nullable(Int64)"},
		{arrow.PrimitiveTypes.Int64, true, true, old, "Int64"}, // a key is never Nullable
		{arrow.PrimitiveTypes.Uint64, false, false, old, "UInt64"},
		{arrow.FixedWidthTypes.Boolean, true, false, old, "Nullable(UInt8)"},
		{arrow.FixedWidthTypes.Boolean, true, false, modern, "Nullable(Bool)"},
		{arrow.BinaryTypes.String, false, false, old, "String"},
		{&arrow.FixedSizeBinaryType{ByteWidth: 16}, false, false, old, "UUID"},
		{&arrow.FixedSizeBinaryType{ByteWidth: 16}, true, false, modern, "Nullable(UUID)"},
		{&arrow.FixedSizeBinaryType{ByteWidth: 16}, true, true, modern, "UUID"},
		{&arrow.FixedSizeBinaryType{ByteWidth: 16}, true, false, ServerFeatures("1.1.54343"), "Nullable(FixedString(16))"},
		{&arrow.FixedSizeBinaryType{ByteWidth: 8}, false, false, modern, "FixedString(8)"},
		{arrow.ListOf(&arrow.FixedSizeBinaryType{ByteWidth: 16}), true, false, old, "Array(Nullable(UUID))"},
		{&arrow.Decimal128Type{Precision: 9, Scale: 2}, false, false, old, "Decimal(9, 2)"},
		{&arrow.Decimal128Type{Precision: 38, Scale: 10}, false, false, old, "Decimal(38, 10)"},
		{&arrow.Decimal256Type{Precision: 60, Scale: 4}, false, false, old, "Decimal(38, 4)"},
		{&arrow.Decimal256Type{Precision: 60, Scale: 4}, false, false, modern, "Decimal(60, 4)"},
		{arrow.FixedWidthTypes.Date32, true, false, old, "Nullable(Date)"},
		{arrow.FixedWidthTypes.Date32, true, false, modern, "Nullable(Date32)"},
		{ts(arrow.Microsecond), false, false, old, "DateTime('UTC')"},
		{ts(arrow.Microsecond), false, false, modern, "DateTime64(6, 'UTC')"},
		{ts(arrow.Nanosecond), true, false, modern, "Nullable(DateTime64(9, 'UTC'))"},
		{ts(arrow.Millisecond), false, false, modern, "DateTime64(3, 'UTC')"},
		{arrow.ListOf(arrow.BinaryTypes.String), true, false, old, "Array(Nullable(String))"},
		{arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32), true, false, old, "Array(Int32)"},
		{arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64}), true, false, old, "Nullable(String)"},
		{&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, false, false, modern, "LowCardinality(String)"},
		{&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, true, false, old, "LowCardinality(Nullable(String))"},
		{&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, false, false, ServerFeatures("18.10.3"), "String"},
	} {
		got, err := mapType(tc.f, arrow.Field{Name: "c", Type: tc.typ, Nullable: tc.nullable}, tc.key)
		if err != nil {
			t.Errorf("%s on %s: %v", tc.typ, tc.f.Version, err)
			continue
		}
		if got.ch != tc.want {
			t.Errorf("%s (nullable %v, key %v) on %s = %s, want %s", tc.typ, tc.nullable, tc.key, tc.f.Version, got.ch, tc.want)
		}
	}
	// A utf8 column the engine marks an enum (field metadata).
	for _, tc := range []struct {
		key, value string
		f          Features
		want       string
	}{
		{logicalTypeKey, logicalTypeEnum, modern, "LowCardinality(Nullable(String))"},
		{logicalTypeKey, logicalTypeEnum, old, "LowCardinality(Nullable(String))"},
		{logicalTypeKey, logicalTypeEnum, ServerFeatures("18.10.3"), "Nullable(String)"},
		{logicalTypeKey, "enumeration", modern, "Nullable(String)"},
		{logicalTypeKey, "", modern, "Nullable(String)"},
		{"openetl.declared_type", "enum('a','b')", modern, "Nullable(String)"},
	} {
		md := arrow.NewMetadata([]string{tc.key}, []string{tc.value})
		got, err := mapType(tc.f, arrow.Field{Name: "e", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: md}, false)
		if err != nil || got.ch != tc.want {
			t.Errorf("utf8 with %s=%q on %s = %s (%v), want %s", tc.key, tc.value, tc.f.Version, got.ch, err, tc.want)
		}
	}
	if _, err := mapType(old, arrow.Field{Name: "d", Type: arrow.FixedWidthTypes.Duration_us}, false); err == nil {
		t.Error("duration mapped: it is listed as unsupported")
	}
	if u := unsupportedOn(old); !contains(u, "timestamp") || !contains(u, "timestamptz") {
		t.Errorf("18.16 unsupported %v: timestamps must be held back (DateTime truncates)", u)
	}
	if u := unsupportedOn(modern); contains(u, "timestamp") {
		t.Errorf("25.8 unsupported %v: DateTime64 takes timestamps", u)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func TestStatements(t *testing.T) {
	cols := []column{
		{"id", colType{ch: "Int64"}},
		{"v", colType{ch: "Nullable(String)"}},
		{"_openetl_seq", colType{ch: "Int64"}},
		{"_openetl_deleted", colType{ch: "UInt8"}},
		{"_openetl_batch", colType{ch: "UInt64"}},
	}
	for _, tc := range []struct{ name, got, want string }{
		{"merge table, 18.16", createTarget("db", "t", cols, []string{"id"}, nil, old, ""),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64, `_openetl_deleted` UInt8, `_openetl_batch` UInt64) ENGINE = ReplacingMergeTree(`_openetl_seq`) ORDER BY (`id`)"},
		{"merge table, current", createTarget("db", "t", cols, []string{"id"}, nil, modern, ""),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64, `_openetl_deleted` UInt8, `_openetl_batch` UInt64) ENGINE = ReplacingMergeTree(`_openetl_seq`, `_openetl_deleted`) ORDER BY (`id`) SETTINGS non_replicated_deduplication_window = 10000"},
		{"append table, 18.16", createTarget("db", "t", cols[:3], nil, nil, old, ""),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64) ENGINE = MergeTree ORDER BY (`_openetl_seq`)"},
		{"append table, ordered", createTarget("db", "t", cols[:3], nil, []string{"id", "v"}, old, ""),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64) ENGINE = MergeTree ORDER BY (`id`, `v`)"},
		{"stage", createStage("db", "t", cols[:2], ""),
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_stage_t` (`id` Int64, `v` Nullable(String), `_openetl_stage_pipeline` String, `_openetl_stage_generation` UInt64) ENGINE = MergeTree PARTITION BY `_openetl_batch` ORDER BY tuple()"},
		{"replicated merge table, current", createTarget("db", "t", cols, []string{"id"}, nil, modern, DefaultZooKeeperPath),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64, `_openetl_deleted` UInt8, `_openetl_batch` UInt64) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/openetl/db/t', '{replica}', `_openetl_seq`, `_openetl_deleted`) ORDER BY (`id`)"},
		{"replicated append table", createTarget("db", "t", cols[:3], nil, nil, old, DefaultZooKeeperPath),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/t', '{replica}') ORDER BY (`_openetl_seq`)"},
		{"replicated append table, another ZooKeeper path", createTarget("db", "t", cols[:3], nil, nil, old, "/clickhouse/{layer}-{shard}/tables/"),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64) ENGINE = ReplicatedMergeTree('/clickhouse/{layer}-{shard}/tables/db/t', '{replica}') ORDER BY (`_openetl_seq`)"},
		{"replicated stage", createStage("db", "t", cols[:2], DefaultZooKeeperPath),
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_stage_t` (`id` Int64, `v` Nullable(String), `_openetl_stage_pipeline` String, `_openetl_stage_generation` UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/_openetl_stage_t', '{replica}') PARTITION BY `_openetl_batch` ORDER BY tuple()"},
		{"replicated fence", createState("db", DefaultZooKeeperPath)[0],
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_fence` (pipeline String, generation UInt64, at DateTime) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/_openetl_fence', '{replica}') ORDER BY (pipeline, generation)"},
		{"fence", createState("db", "")[0],
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_fence` (pipeline String, generation UInt64, at DateTime) ENGINE = MergeTree ORDER BY (pipeline, generation)"},
		{"distributed", createDistributed("db", "t", "c1", ""),
			"CREATE TABLE IF NOT EXISTS `db`.`t_all` AS `db`.`t` ENGINE = Distributed('c1', 'db', 't')"},
		{"distributed, sharded by a column", createDistributed("db", "t", "c1", "tenant"),
			"CREATE TABLE IF NOT EXISTS `db`.`t_all` AS `db`.`t` ENGINE = Distributed('c1', 'db', 't', `tenant`)"},
		{"leftover blocks", leftoverBlocks("db", "_openetl_stage_t", "p", 5),
			"SELECT DISTINCT `_openetl_batch` FROM `db`.`_openetl_stage_t` WHERE `_openetl_stage_pipeline` = 'p' AND `_openetl_stage_generation` < 5"},
		{"add column, 18.16", addColumn("db", "t", cols[1], old),
			"ALTER TABLE `db`.`t` ADD COLUMN `v` Nullable(String)"},
		{"add column, current", addColumn("db", "t", cols[1], modern),
			"ALTER TABLE `db`.`t` ADD COLUMN IF NOT EXISTS `v` Nullable(String)"},
		{"apply, 18.16", applyBlock("db", "t", []string{"id", "_openetl_batch"}, 42, 1000, "p'1", 3, old),
			"INSERT INTO `db`.`t` (`id`, `_openetl_batch`) SELECT `id`, `_openetl_batch` FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 42 AND (SELECT max(generation) FROM `db`.`_openetl_fence` WHERE pipeline = 'p\\'1') <= 3 SETTINGS min_insert_block_size_rows = 1001, min_insert_block_size_bytes = 1099511627776"},
		{"apply with a dedup token", applyBlock("db", "t", []string{"id"}, 42, 1000, "p", 3, modern),
			"INSERT INTO `db`.`t` (`id`) SELECT `id` FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 42 AND (SELECT max(generation) FROM `db`.`_openetl_fence` WHERE pipeline = 'p') <= 3 SETTINGS min_insert_block_size_rows = 1001, min_insert_block_size_bytes = 1099511627776, insert_deduplicate = 1, insert_deduplication_token = 'openetl/p/t/000000000000002a'"},
		{"mark epoch", markEpoch("db", "p", 7, 3, 2, 1000),
			"INSERT INTO `db`.`_openetl_epochs` (pipeline, epoch, generation, blocks, rows, at) SELECT 'p', 7, 3, 2, 1000, now() WHERE (SELECT max(generation) FROM `db`.`_openetl_fence` WHERE pipeline = 'p') <= 3"},
		{"raise fence", raiseFence("db", "p", 4),
			"INSERT INTO `db`.`_openetl_fence` (pipeline, generation, at) SELECT 'p', 4, now()"},
		{"quoted identifier", quoteIdent("a`b\\c"), "`a\\`b\\\\c`"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

// TestClusterStatementsCurrent: what a shard of a cluster of current
// servers (25.8: dedup tokens, is_deleted) runs, word for word. Keeper
// speaks ZooKeeper's protocol: the servers' <zookeeper> section names
// Keeper's address and the statements are the same, Replicated engines
// with the ZooKeeper path and {replica}. Replicated tables deduplicate
// by themselves (replicated_deduplication_window), so no
// non_replicated_deduplication_window; the copy into a replicated table
// still carries the block's insert_deduplication_token, the second
// guard when a copy retried through another replica repeats one that
// landed.
func TestClusterStatementsCurrent(t *testing.T) {
	cols := []column{
		{"id", colType{ch: "Int64"}},
		{"v", colType{ch: "Nullable(String)"}},
		{"_openetl_seq", colType{ch: "Int64"}},
		{"_openetl_deleted", colType{ch: "UInt8"}},
		{"_openetl_batch", colType{ch: "UInt64"}},
	}
	zk := DefaultZooKeeperPath
	state := createState("db", zk)
	for _, tc := range []struct{ name, got, want string }{
		{"fence", state[0],
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_fence` (pipeline String, generation UInt64, at DateTime) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/_openetl_fence', '{replica}') ORDER BY (pipeline, generation)"},
		{"epochs", state[1],
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_epochs` (pipeline String, epoch UInt64, generation UInt64, blocks UInt64, rows UInt64, at DateTime) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/_openetl_epochs', '{replica}') ORDER BY (pipeline, epoch)"},
		{"merge table: is_deleted", createTarget("db", "t", cols, []string{"id"}, nil, modern, zk),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64, `_openetl_deleted` UInt8, `_openetl_batch` UInt64) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/openetl/db/t', '{replica}', `_openetl_seq`, `_openetl_deleted`) ORDER BY (`id`)"},
		{"merge table before is_deleted (22.8)", createTarget("db", "t", cols, []string{"id"}, nil, ServerFeatures("22.8.1"), zk),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64, `_openetl_deleted` UInt8, `_openetl_batch` UInt64) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/openetl/db/t', '{replica}', `_openetl_seq`) ORDER BY (`id`)"},
		{"append table", createTarget("db", "t", cols[:3], nil, []string{"id"}, modern, zk),
			"CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `v` Nullable(String), `_openetl_seq` Int64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/t', '{replica}') ORDER BY (`id`)"},
		{"stage", createStage("db", "t", cols[:2], zk),
			"CREATE TABLE IF NOT EXISTS `db`.`_openetl_stage_t` (`id` Int64, `v` Nullable(String), `_openetl_stage_pipeline` String, `_openetl_stage_generation` UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/openetl/db/_openetl_stage_t', '{replica}') PARTITION BY `_openetl_batch` ORDER BY tuple()"},
		{"distributed, sharded by a column", createDistributed("db", "t", "events", "tenant"),
			"CREATE TABLE IF NOT EXISTS `db`.`t_all` AS `db`.`t` ENGINE = Distributed('events', 'db', 't', `tenant`)"},
		{"apply: the dedup token", applyBlock("db", "t", []string{"id", "_openetl_batch"}, 0xabc, 500, "p", 2, modern),
			"INSERT INTO `db`.`t` (`id`, `_openetl_batch`) SELECT `id`, `_openetl_batch` FROM `db`.`_openetl_stage_t` WHERE `_openetl_batch` = 2748 AND (SELECT max(generation) FROM `db`.`_openetl_fence` WHERE pipeline = 'p') <= 2 SETTINGS min_insert_block_size_rows = 501, min_insert_block_size_bytes = 1099511627776, insert_deduplicate = 1, insert_deduplication_token = 'openetl/p/t/0000000000000abc'"},
		{"add column", addColumn("db", "t", cols[1], modern),
			"ALTER TABLE `db`.`t` ADD COLUMN IF NOT EXISTS `v` Nullable(String)"},
		{"add column to the Distributed table", addColumn("db", "t"+distSuffix, cols[1], modern),
			"ALTER TABLE `db`.`t_all` ADD COLUMN IF NOT EXISTS `v` Nullable(String)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

// TestEncodeDateTime64 checks the values handed to the driver for a
// DateTime64 column (which 18.16 lacks): the instant, to the nanosecond,
// and the range checks.
func TestEncodeDateTime64(t *testing.T) {
	b := array.NewTimestampBuilder(memory.DefaultAllocator, &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"})
	defer b.Release()
	in := time.Date(2024, 2, 29, 23, 59, 59, 123456789, time.UTC)
	b.Append(arrow.Timestamp(in.UnixNano()))
	b.AppendNull()
	b.Append(arrow.Timestamp(-1)) // 1969-12-31T23:59:59.999999999
	arr := b.NewArray()
	defer arr.Release()
	ct, err := mapType(modern, arrow.Field{Name: "ts", Type: arr.DataType(), Nullable: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	v, err := encode(ct, arr, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := v.([]*time.Time)
	if !got[0].Equal(in) || got[1] != nil || !got[2].Equal(time.Unix(-1, 999999999)) {
		t.Errorf("encoded %v, %v, %v", got[0], got[1], got[2])
	}
	if bad := checkColumn(nil, "ts", ct, false, false, arr); len(bad) != 0 {
		t.Errorf("in-range values quarantined: %v", bad)
	}
	// DateTime (18.16): the fraction is quarantined, and so is 1969.
	ct, _ = mapType(old, arrow.Field{Name: "ts", Type: arr.DataType(), Nullable: true}, false)
	bad := checkColumn(nil, "ts", ct, false, false, arr)
	if len(bad) != 2 || bad[0] != (badRow{0, "ts", ReasonSubSecond}) || bad[1] != (badRow{2, "ts", ReasonOutOfRange}) {
		t.Errorf("DateTime checks: %v", bad)
	}
}

func TestCheckDecimalAndDate(t *testing.T) {
	db := array.NewDecimal256Builder(memory.DefaultAllocator, &arrow.Decimal256Type{Precision: 60, Scale: 0})
	defer db.Release()
	db.Append(decimalFromString(t, "12345678901234567890123456789012345678"))  // 38 digits: fits
	db.Append(decimalFromString(t, "123456789012345678901234567890123456789")) // 39: not on 18.16
	darr := db.NewArray()
	defer darr.Release()
	ct, _ := mapType(old, arrow.Field{Name: "d", Type: darr.DataType()}, false)
	if bad := checkColumn(nil, "d", ct, false, false, darr); len(bad) != 1 || bad[0].row != 1 || bad[0].reason != ReasonOutOfRange {
		t.Errorf("decimal checks on 18.16: %v", bad)
	}
	ct, _ = mapType(modern, arrow.Field{Name: "d", Type: darr.DataType()}, false)
	if bad := checkColumn(nil, "d", ct, false, false, darr); len(bad) != 0 {
		t.Errorf("decimal checks with Decimal256: %v", bad)
	}
	dd := array.NewDate32Builder(memory.DefaultAllocator)
	defer dd.Release()
	dd.Append(-1)     // 1969-12-31
	dd.Append(0)      // 1970-01-01
	dd.Append(65536)  // 2149-06-07
	dd.Append(-25568) // 1899-12-31
	darr2 := dd.NewArray()
	defer darr2.Release()
	ct, _ = mapType(old, arrow.Field{Name: "day", Type: darr2.DataType()}, false)
	bad := checkColumn(nil, "day", ct, false, false, darr2)
	if len(bad) != 3 || bad[0].row != 0 || bad[1].row != 2 || bad[2].row != 3 {
		t.Errorf("Date checks: %v", bad)
	}
	ct, _ = mapType(modern, arrow.Field{Name: "day", Type: darr2.DataType()}, false)
	bad = checkColumn(nil, "day", ct, false, false, darr2)
	if len(bad) != 1 || bad[0].row != 3 {
		t.Errorf("Date32 checks: %v", bad)
	}
}

func decimalFromString(t *testing.T, s string) decimal256.Num {
	t.Helper()
	n, err := decimal256.FromString(s, 60, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWidens(t *testing.T) {
	for _, tc := range []struct {
		have, want string
		ok         bool
	}{
		{"Int32", "Int64", true},
		{"Nullable(Int64)", "Nullable(Float64)", true},
		{"Nullable(Int64)", "Nullable(String)", true},
		{"Int64", "Nullable(Int64)", true},
		{"Nullable(Int64)", "Int64", false},
		{"Int64", "Int32", false},
		{"Float64", "Int64", false},
		{"Nullable(String)", "Nullable(Int64)", false},
		{"UInt32", "Int64", true},
		{"UInt64", "Int64", false},
		{"Float32", "Float64", true},
		{"Array(String)", "String", false},
		{"Date", "String", true},
	} {
		if got := widens(tc.have, tc.want); got != tc.ok {
			t.Errorf("widens(%s, %s) = %v, want %v", tc.have, tc.want, got, tc.ok)
		}
	}
	if got := modifyColumn("db", "t", column{"x", colType{ch: "Nullable(Float64)"}}); got != "ALTER TABLE `db`.`t` MODIFY COLUMN `x` Nullable(Float64)" {
		t.Errorf("modifyColumn: %s", got)
	}
}

// TestEncodeScratchReuse: the writer's scratch slices serve batch after
// batch; a later, shorter batch with nulls where the earlier had values
// must not show the earlier values, and the selected rows must be the
// ones encoded.
func TestEncodeScratchReuse(t *testing.T) {
	var sc scratch
	build := func(vals []string, valid []bool) arrow.Array {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		defer b.Release()
		b.AppendValues(vals, valid)
		return b.NewArray()
	}
	a1 := build([]string{"a", "b", "c", "d"}, nil)
	defer a1.Release()
	a2 := build([]string{"x", "", "z"}, []bool{true, false, true})
	defer a2.Release()
	nullable := colType{ch: "Nullable(String)", kind: kString, nullable: true}
	plain := colType{ch: "String", kind: kString}
	if v, _ := encode(nullable, a1, nil, false, &sc); len(v.([]*string)) != 4 {
		t.Fatalf("first batch: %v", v)
	}
	v, err := encode(nullable, a2, nil, false, &sc)
	if err != nil {
		t.Fatal(err)
	}
	got := v.([]*string)
	if len(got) != 3 || *got[0] != "x" || got[1] != nil || *got[2] != "z" {
		t.Errorf("second batch, Nullable: %v", got)
	}
	v, _ = encode(plain, a2, nil, false, &sc)
	if s := v.([]string); len(s) != 3 || s[0] != "x" || s[1] != "" || s[2] != "z" {
		t.Errorf("second batch, not Nullable: %q (a null is the empty string, not a leftover)", s)
	}
	v, _ = encode(plain, a1, []int{3, 1}, false, &sc)
	if s := v.([]string); len(s) != 2 || s[0] != "d" || s[1] != "b" {
		t.Errorf("selected rows: %q", s)
	}
	if c := sc.constant(7, 3); len(c) != 3 || c[0] != 7 || c[2] != 7 {
		t.Errorf("constant: %v", c)
	}
	sc.pipeline("p", 2)
	if p := sc.pipeline("p", 40); len(p) != 40 || p[0] != "p" || p[1] != "" || p[39] != "" {
		t.Errorf("pipeline column: %q, want p then empty strings", p)
	}
}

func TestLowCardinalityOnly(t *testing.T) {
	for _, tc := range []struct {
		have, want string
		ok         bool
	}{
		{"Nullable(String)", "LowCardinality(Nullable(String))", true},
		{"String", "LowCardinality(String)", true},
		{"LowCardinality(Nullable(String))", "Nullable(String)", true},
		{"LowCardinality(Nullable(String))", "LowCardinality(String)", true},
		{"Nullable(String)", "LowCardinality(String)", true},
		{"String", "LowCardinality(Nullable(String))", false}, // nulls would not fit
		{"String", "String", false},
		{"Nullable(Int64)", "LowCardinality(Nullable(String))", false},
	} {
		if got := lowCardinalityOnly(tc.have, tc.want); got != tc.ok {
			t.Errorf("lowCardinalityOnly(%s, %s) = %v, want %v", tc.have, tc.want, got, tc.ok)
		}
	}
}
