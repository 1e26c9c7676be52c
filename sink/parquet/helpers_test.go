package parquet_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

// buckets are the backends every test runs against.
var buckets = []struct {
	name string
	open func(t testing.TB) *blob.Bucket
}{
	{"mem", func(t testing.TB) *blob.Bucket {
		b := memblob.OpenBucket(nil)
		t.Cleanup(func() { b.Close() })
		return b
	}},
	{"file", func(t testing.TB) *blob.Bucket {
		b, err := parquet.OpenDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}},
}

func forEachBucket(t *testing.T, f func(t *testing.T, b *blob.Bucket)) {
	for _, bk := range buckets {
		t.Run(bk.name, func(t *testing.T) { f(t, bk.open(t)) })
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// baseFields are the columns of a test stream; wide adds a nullable one,
// as the engine does when it widens a schema.
var baseFields = []arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}

func schemaOf(wide bool) *arrow.Schema {
	fs := slices.Clone(baseFields)
	if wide {
		fs = append(fs, arrow.Field{Name: "extra", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	return arrow.NewSchema(fs, nil)
}

// Expected values of row id; nulls on a pattern.
func nameOf(id int64) (string, bool)  { return fmt.Sprintf("row-%d", id), id%5 != 0 }
func tsOf(id int64) (time.Time, bool) { return t0.Add(time.Duration(id) * time.Millisecond), id%7 != 0 }
func scoreOf(id int64) float64        { return float64(id) / 4 }

// batch builds rows ids [from, from+n) with the given schema.
func batch(t testing.TB, from, n int64, wide bool) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schemaOf(wide))
	defer b.Release()
	for id := from; id < from+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(id)
		if s, ok := nameOf(id); ok {
			b.Field(1).(*array.StringBuilder).Append(s)
		} else {
			b.Field(1).AppendNull()
		}
		if ts, ok := tsOf(id); ok {
			b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
		} else {
			b.Field(2).AppendNull()
		}
		b.Field(3).(*array.Float64Builder).Append(scoreOf(id))
		if wide {
			b.Field(4).(*array.StringBuilder).Append(fmt.Sprintf("x%d", id))
		}
	}
	return b.NewRecordBatch()
}

func write(t testing.TB, w sink.Writer, stream string, from, n int64, wide bool) {
	t.Helper()
	rec := batch(t, from, n, wide)
	defer rec.Release()
	if err := w.Write(context.Background(), stream, rec); err != nil {
		t.Fatalf("Write(%s, %d..%d): %v", stream, from, from+n, err)
	}
}

func newDest(t testing.TB, b *blob.Bucket, cfg parquet.Config) *parquet.Destination {
	t.Helper()
	cfg.Bucket = b
	d, err := parquet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newWriter(t testing.TB, d *parquet.Destination, pipeline string, lane int) sink.Writer {
	t.Helper()
	w, err := d.Writer(context.Background(), sink.WriterConfig{Pipeline: pipeline, Lane: lane})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

func recoverGen(t testing.TB, w sink.Writer, gen checkpoint.Generation, head *checkpoint.Record) sink.Outcome {
	t.Helper()
	out, err := w.Recover(context.Background(), gen, head)
	if err != nil {
		t.Fatalf("Recover(%d): %v", gen, err)
	}
	return out
}

func preCommit(t testing.TB, w sink.Writer, epoch uint64) sink.Committable {
	t.Helper()
	c, err := w.PreCommit(context.Background(), epoch)
	if err != nil {
		t.Fatalf("PreCommit(%d): %v", epoch, err)
	}
	return c
}

func commit(t testing.TB, w sink.Writer, epoch uint64, cs ...sink.Committable) {
	t.Helper()
	if err := w.Commit(context.Background(), epoch, cs); err != nil {
		t.Fatalf("Commit(%d): %v", epoch, err)
	}
}

// record is the checkpoint record the runner would write for epoch.
func record(pipeline string, epoch uint64, gen checkpoint.Generation, cs ...sink.Committable) *checkpoint.Record {
	r := &checkpoint.Record{Pipeline: pipeline, Epoch: epoch, Generation: gen}
	for _, c := range cs {
		r.Committables = append(r.Committables, c)
	}
	return r
}

func manifest(t testing.TB, b *blob.Bucket, prefix, stream string) *parquet.Manifest {
	t.Helper()
	m, err := parquet.ReadManifest(context.Background(), b, prefix, stream)
	if err != nil {
		t.Fatalf("ReadManifest(%s): %v", stream, err)
	}
	return m
}

// keys lists every key under prefix.
func keys(t testing.TB, b *blob.Bucket, prefix string) []string {
	t.Helper()
	var out []string
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(context.Background())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, obj.Key)
	}
}

// readStream reads every file the stream's manifest lists, checks each
// file's row count against the manifest and every value against the
// pattern batch wrote, and returns the ids it saw in order, and the
// schemas of the files.
func readStream(t testing.TB, b *blob.Bucket, prefix, stream string) (ids []int64, schemas []*arrow.Schema) {
	t.Helper()
	ctx := context.Background()
	m := manifest(t, b, prefix, stream)
	if m.Stream != stream {
		t.Errorf("manifest stream %q, want %q", m.Stream, stream)
	}
	for _, f := range m.Files {
		if !strings.HasPrefix(f.Key, prefix+stream+"/data/") {
			t.Errorf("file %s is not under %s/data/", f.Key, stream)
		}
		data, err := b.ReadAll(ctx, f.Key)
		if err != nil {
			t.Fatalf("read %s: %v", f.Key, err)
		}
		if int64(len(data)) != f.Bytes {
			t.Errorf("%s: %d bytes, manifest says %d", f.Key, len(data), f.Bytes)
		}
		pf, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("open %s: %v", f.Key, err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1000}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(ctx)
		if err != nil {
			t.Fatalf("read table %s: %v", f.Key, err)
		}
		if tbl.NumRows() != f.Rows {
			t.Errorf("%s: %d rows, manifest says %d", f.Key, tbl.NumRows(), f.Rows)
		}
		schemas = append(schemas, tbl.Schema())
		tr := array.NewTableReader(tbl, 0)
		for tr.Next() {
			ids = append(ids, checkRows(t, tr.RecordBatch())...)
		}
		tr.Release()
		tbl.Release()
		pf.Close()
	}
	return ids, schemas
}

func checkRows(t testing.TB, rec arrow.RecordBatch) []int64 {
	t.Helper()
	sc := rec.Schema()
	if ts := sc.Field(2).Type.(*arrow.TimestampType); ts.Unit != arrow.Microsecond || ts.TimeZone != "UTC" {
		t.Fatalf("ts column read back as %s", ts)
	}
	idc := rec.Column(0).(*array.Int64)
	names := rec.Column(1).(*array.String)
	tss := rec.Column(2).(*array.Timestamp)
	scores := rec.Column(3).(*array.Float64)
	out := make([]int64, 0, rec.NumRows())
	for i := 0; i < int(rec.NumRows()); i++ {
		id := idc.Value(i)
		out = append(out, id)
		if s, ok := nameOf(id); ok != names.IsValid(i) || (ok && names.Value(i) != s) {
			t.Fatalf("id %d: name %q (valid %v), want %q (valid %v)", id, names.Value(i), names.IsValid(i), s, ok)
		}
		if ts, ok := tsOf(id); ok != tss.IsValid(i) || (ok && !tss.Value(i).ToTime(arrow.Microsecond).Equal(ts)) {
			t.Fatalf("id %d: ts %v (valid %v), want %v (valid %v)", id, tss.Value(i).ToTime(arrow.Microsecond), tss.IsValid(i), ts, ok)
		}
		if scores.Value(i) != scoreOf(id) {
			t.Fatalf("id %d: score %v", id, scores.Value(i))
		}
		if sc.NumFields() == 5 {
			if e := rec.Column(4).(*array.String).Value(i); e != fmt.Sprintf("x%d", id) {
				t.Fatalf("id %d: extra %q", id, e)
			}
		}
	}
	return out
}

// wantIDs checks that got holds every id of [0, n) exactly once.
func wantIDs(t testing.TB, got []int64, n int64) {
	t.Helper()
	s := slices.Clone(got)
	slices.Sort(s)
	if int64(len(s)) != n {
		t.Fatalf("read %d rows, want %d", len(s), n)
	}
	for i, id := range s {
		if id != int64(i) {
			t.Fatalf("ids: at %d got %d (duplicate or missing)", i, id)
		}
	}
}
