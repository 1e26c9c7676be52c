package parquet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

// typesSchema has a column of every type the engine produces (declared
// Postgres and MySQL types, inferred JSON documents, the metadata
// columns) and the types a transform can add (large text and binary,
// dictionaries), with field and schema metadata.
var typesSchema = arrow.NewSchema([]arrow.Field{
	{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
	{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
	{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
	{Name: "u8", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "u16", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "u32", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
	{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
	{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "dec5", Type: &arrow.Decimal128Type{Precision: 5, Scale: 2}, Nullable: true},
	{Name: "dec18", Type: &arrow.Decimal128Type{Precision: 18, Scale: 4}, Nullable: true},
	{Name: "dec38", Type: &arrow.Decimal128Type{Precision: 38, Scale: 10}, Nullable: true},
	{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "status", Type: arrow.BinaryTypes.String, Nullable: true,
		Metadata: arrow.NewMetadata([]string{"openetl.logical_type"}, []string{"enum"})},
	{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "tod", Type: arrow.FixedWidthTypes.Time64us, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
	{Name: "tstz", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "uuid", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}, Nullable: true},
	{Name: "ints", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "doc", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "c", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64), Nullable: true},
	), Nullable: true},
	{Name: "docs", Type: arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "k", Type: arrow.BinaryTypes.String, Nullable: true},
	)), Nullable: true},
	{Name: "large_text", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "large_bin", Type: arrow.BinaryTypes.LargeBinary, Nullable: true},
	{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, Nullable: true},
	{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
	{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
	{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	{Name: "_openetl_synced_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
}, func() *arrow.Metadata {
	m := arrow.NewMetadata([]string{"openetl.table"}, []string{"public.orders"})
	return &m
}())

// typesRows is typesSchema's rows as JSON: extremes, nulls, empty values.
const typesRows = `[
{"i8":-128,"i16":-32768,"i32":-2147483648,"i64":-9223372036854775808,"u8":255,"u16":65535,"u32":4294967295,"u64":18446744073709551615,
 "f32":-1.5,"f64":1e300,"dec5":"-999.99","dec18":"12345678901234.5678","dec38":"1234567890123456789012345678.0123456789",
 "text":"héllo, wörld","status":"paid","flag":true,"bin":"AAEC","day":19000,"tod":86399999999,"ts":0,"tstz":9223372036854775,
 "uuid":"AAECAwQFBgcICQoLDA0ODw==","ints":[1,null,3],"tags":["a",""],"doc":{"a":1,"b":"x","c":[0.5]},"docs":[{"k":"v"},null],
 "large_text":"big","large_bin":"/w==","dict":"red","_openetl_id":"id-1","_openetl_op":"c","_openetl_seq":1,"_openetl_synced_at":1740830400000000},
{"i8":null,"i16":null,"i32":null,"i64":0,"u8":null,"u16":null,"u32":null,"u64":null,"f32":null,"f64":null,"dec5":null,"dec18":null,"dec38":null,
 "text":null,"status":null,"flag":null,"bin":null,"day":null,"tod":null,"ts":null,"tstz":null,"uuid":null,"ints":null,"tags":null,"doc":null,"docs":null,
 "large_text":null,"large_bin":null,"dict":null,"_openetl_id":"id-2","_openetl_op":"u","_openetl_seq":2,"_openetl_synced_at":1740830401000000},
{"i8":127,"i16":32767,"i32":2147483647,"i64":9223372036854775807,"u8":0,"u16":0,"u32":0,"u64":0,"f32":3.25,"f64":-0.0,"dec5":"0.01","dec18":"-0.0001","dec38":"-1",
 "text":"","status":"new","flag":false,"bin":"","day":-1,"tod":0,"ts":-2208988799999999,"tstz":-9223372036854775,
 "uuid":"/////////////////////w==","ints":[],"tags":[],"doc":{"a":null,"b":null,"c":[]},"docs":[],
 "large_text":"","large_bin":"","dict":"blue","_openetl_id":"id-3","_openetl_op":"d","_openetl_seq":3,"_openetl_synced_at":1740830402000000}
]`

// TestEncodersAgree writes a column of every type the engine produces
// through the engine's encoder and arrow-go's, many times over (several
// row groups), and reads both files back with pyarrow: the Arrow schema
// (metadata included) and every value must be equal, and every leaf
// column that has statistics under arrow-go has them under the engine.
func TestEncodersAgree(t *testing.T) {
	if !engine.ParquetAvailable() {
		t.Skip("no engine in this build")
	}
	py := testutil.Python(t)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, typesSchema, strings.NewReader(typesRows))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var files []string
	for _, enc := range []parquet.Encoder{parquet.EncoderEngine, parquet.EncoderArrowGo} {
		dir := t.TempDir()
		b, err := parquet.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		w := newWriter(t, newDest(t, b, parquet.Config{Encoder: enc, RowGroupRows: 1000}), "p", 0)
		recoverGen(t, w, 1, nil)
		for range 1000 {
			if err := w.Write(context.Background(), "s", rec); err != nil {
				t.Fatalf("%v: %v", enc, err)
			}
		}
		commit(t, w, 1, preCommit(t, w, 1))
		fs := manifest(t, b, "", "s").Files
		if len(fs) != 1 {
			t.Fatalf("%v: %d files, want 1", enc, len(fs))
		}
		files = append(files, filepath.Join(dir, filepath.FromSlash(fs[0].Key)))
	}
	out, err := exec.Command(py, filepath.Join("testdata", "compare.py"), files[0], files[1]).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("compare.py: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct {
		SchemaEqual bool                  `json:"schema_equal"`
		ValuesEqual bool                  `json:"values_equal"`
		Diff        []string              `json:"diff"`
		Schemas     []string              `json:"schemas"`
		Stats       [2]map[string][3]bool `json:"stats"`
		Rows        int                   `json:"rows"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("compare.py output %q: %v", out, err)
	}
	if res.Rows != 3000 {
		t.Errorf("pyarrow read %d rows, want 3000", res.Rows)
	}
	if !res.SchemaEqual {
		t.Errorf("schemas differ:\nengine:\n%s\narrow-go:\n%s", res.Schemas[0], res.Schemas[1])
	}
	if len(res.Diff) > 0 {
		t.Errorf("values differ: %v", res.Diff)
	}
	// Statistics: every chunk has them, with null counts, under both,
	// and min and max wherever arrow-go has them (float columns too:
	// the engine declares them in the type-defined order pyarrow reads).
	for col, goHas := range res.Stats[1] {
		has := res.Stats[0][col]
		if !has[0] || !has[2] || (goHas[1] && !has[1]) {
			t.Errorf("column %s: statistics (set, min/max, null count) %v under the engine, %v under arrow-go", col, has, goHas)
		}
	}
	if len(res.Stats[0]) != len(res.Stats[1]) {
		t.Errorf("%d leaf columns under the engine, %d under arrow-go", len(res.Stats[0]), len(res.Stats[1]))
	}
}

// decimalPhysical writes the types record with cfg and returns the
// Parquet physical type of its dec5 column: arrow-rs stores a decimal of
// precision 5 as INT32, arrow-go as FIXED_LEN_BYTE_ARRAY, which tells
// which encoder wrote the file.
func decimalPhysical(t *testing.T, cfg parquet.Config) string {
	t.Helper()
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, typesSchema, strings.NewReader(typesRows))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	b := buckets[0].open(t)
	w := newWriter(t, newDest(t, b, cfg), "p", 0)
	recoverGen(t, w, 1, nil)
	if err := w.Write(context.Background(), "s", rec); err != nil {
		t.Fatal(err)
	}
	commit(t, w, 1, preCommit(t, w, 1))
	data, err := b.ReadAll(context.Background(), manifest(t, b, "", "s").Files[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return pf.MetaData().Schema.Column(pf.MetaData().Schema.ColumnIndexByName("dec5")).PhysicalType().String()
}

// TestEncoderChoice: the engine encodes by default in a cgo build, and
// arrow-go with EncoderArrowGo or Gzip; EncoderEngine with Gzip, or an
// unknown encoder, makes New fail.
func TestEncoderChoice(t *testing.T) {
	if !engine.ParquetAvailable() {
		t.Skip("no engine in this build")
	}
	for _, c := range []struct {
		cfg  parquet.Config
		want string
	}{
		{parquet.Config{}, "INT32"},
		{parquet.Config{Encoder: parquet.EncoderEngine, Compression: parquet.Snappy}, "INT32"},
		{parquet.Config{Encoder: parquet.EncoderArrowGo}, "FIXED_LEN_BYTE_ARRAY"},
		{parquet.Config{Compression: parquet.Gzip}, "FIXED_LEN_BYTE_ARRAY"},
	} {
		if got := decimalPhysical(t, c.cfg); got != c.want {
			t.Errorf("encoder %v, %v: decimal(5,2) stored as %s, want %s", c.cfg.Encoder, c.cfg.Compression, got, c.want)
		}
	}
	for _, bad := range []parquet.Config{
		{Encoder: parquet.EncoderEngine, Compression: parquet.Gzip},
		{Encoder: parquet.EncoderArrowGo + 1},
	} {
		bad.Bucket = buckets[0].open(t)
		if _, err := parquet.New(bad); err == nil {
			t.Errorf("New(encoder %v, %v): no error", bad.Encoder, bad.Compression)
		}
	}
}
