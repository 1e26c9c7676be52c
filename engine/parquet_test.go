package engine_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/openetl/etl/engine"
)

// pqRecord is a small record in Go memory: a nullable string, an int64,
// a timestamp with a zone and a list, with schema and field metadata.
func pqRecord(t *testing.T, n int) arrow.RecordBatch {
	t.Helper()
	md := arrow.NewMetadata([]string{"k"}, []string{"v"})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: md},
		{Name: "i", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	}, &md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range n {
		if i%3 == 0 {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.StringBuilder).Append([]string{"a", "bb", "ccc"}[i%3])
		}
		b.Field(1).(*array.Int64Builder).Append(int64(i))
		b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(i) * 1000))
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{int32(i), -int32(i)}, nil)
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

// TestParquetWriter: batches in Go memory go through the engine's writer
// in several row groups; arrow-go reads the file back with the same
// schema (metadata included) and values.
func TestParquetWriter(t *testing.T) {
	rec := pqRecord(t, 1000)
	w, err := engine.NewParquetWriter(rec.Schema(), engine.ParquetOptions{RowGroupRows: 700, DictionaryColumns: map[string]bool{"s": true}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var buf bytes.Buffer
	for range 3 {
		b, err := w.Write(rec)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
	}
	if buf.Len() == 0 {
		t.Fatal("3 batches of 1000 rows with row groups of 700: no bytes before Finish")
	}
	b, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	buf.Write(b)
	if _, err := w.Write(rec); !errors.Is(err, engine.ErrState) {
		t.Fatalf("Write after Finish: %v, want ErrState", err)
	}
	w.Close()
	if _, err := w.Write(rec); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}

	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got := pf.NumRowGroups(); got != 5 {
		t.Errorf("%d row groups, want 5 (3000 rows by 700)", got)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	// arrow-go's reader adds PARQUET:field_id to each field: compare
	// the fields without metadata, then the metadata set.
	got, err := fr.Schema() // ReadTable's schema has no metadata
	if err != nil {
		t.Fatal(err)
	}
	if got.NumFields() != rec.Schema().NumFields() || !got.Metadata().Equal(rec.Schema().Metadata()) {
		t.Fatalf("schema read back:\n%v (metadata %v)\nwant\n%v", got, got.Metadata(), rec.Schema())
	}
	for i, f := range got.Fields() {
		want := rec.Schema().Field(i)
		if f.Name != want.Name || f.Nullable != want.Nullable || !arrow.TypeEqual(f.Type, want.Type) {
			t.Errorf("field %d read back as %v, want %v", i, f, want)
		}
		if v, _ := f.Metadata.GetValue("k"); want.Metadata.Len() > 0 && v != "v" {
			t.Errorf("field %d read back without its metadata: %v", i, f.Metadata)
		}
	}
	tr := array.NewTableReader(tbl, 1000)
	defer tr.Release()
	n := 0
	for tr.Next() {
		got := tr.RecordBatch()
		for i, c := range got.Columns() {
			if !array.Equal(c, rec.Column(i)) {
				t.Fatalf("batch %d column %d read back differs", n, i)
			}
		}
		if got.NumRows() != rec.NumRows() {
			t.Fatalf("batch %d read back differs", n)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d batches read back, want 3", n)
	}
}

// TestParquetWriterErrors: bad options, a batch of another schema and a
// schema Parquet can't hold are errors wrapping ErrInvalidInput, and the
// writer refuses later calls after a failed one.
func TestParquetWriterErrors(t *testing.T) {
	rec := pqRecord(t, 10)
	for _, o := range []engine.ParquetOptions{
		{Codec: "gzip"},
		{Codec: "zstd", Level: 23},
		{Codec: "snappy", Level: 3},
		{RowGroupRows: -1},
	} {
		if _, err := engine.NewParquetWriter(rec.Schema(), o); !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("options %+v: %v, want ErrInvalidInput", o, err)
		}
	}
	empty := arrow.NewSchema([]arrow.Field{{Name: "e", Type: arrow.StructOf()}}, nil)
	if _, err := engine.NewParquetWriter(empty, engine.ParquetOptions{}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Errorf("a struct without fields: %v, want ErrInvalidInput", err)
	}
	other := arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32}}, nil)
	w, err := engine.NewParquetWriter(other, engine.ParquetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write(rec); !errors.Is(err, engine.ErrInvalidInput) {
		t.Fatalf("batch of another schema: %v, want ErrInvalidInput", err)
	}
}

// TestParquetWriterNoLeaks runs 3,000 writers through each end (finished
// and closed; closed unfinished; failed on a batch of another schema)
// and checks that Go's heap and the resident memory (the Rust writers
// and the exported batches) stop growing after warm-up.
func TestParquetWriterNoLeaks(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: the detector's memory is in the RSS measured")
	}
	rec := pqRecord(t, 100)
	other := arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32}}, nil)
	once := func(i int) {
		schema := rec.Schema()
		if i%3 == 2 {
			schema = other
		}
		w, err := engine.NewParquetWriter(schema, engine.ParquetOptions{RowGroupRows: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		_, err = w.Write(rec)
		switch i % 3 {
		case 0:
			if err == nil {
				_, err = w.Finish()
			}
			if err != nil {
				t.Fatal(err)
			}
		case 1:
			if err != nil {
				t.Fatal(err)
			}
		case 2:
			if !errors.Is(err, engine.ErrInvalidInput) {
				t.Fatalf("batch of another schema: %v", err)
			}
		}
	}
	var ms runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for i := range 600 {
		once(i)
	}
	h0, r0 := heap(), rss(t)
	const n = 3000
	for i := range n {
		once(i)
	}
	h1, r1 := heap(), rss(t)
	t.Logf("%d writers: Go heap %d → %d bytes, RSS %d → %d bytes", n, h0, h1, r0, r1)
	if h1 > h0+1<<20 {
		t.Errorf("Go heap grew by %d bytes over %d writers", h1-h0, n)
	}
	// Each writer holds about a megabyte of output buffer: a leak of
	// writers or batches would add gigabytes.
	if r1 > r0+16<<20 {
		t.Errorf("resident memory grew by %d bytes over %d writers", r1-r0, n)
	}
}
