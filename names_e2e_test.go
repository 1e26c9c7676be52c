package etl_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
)

// TestNamesForCaseFoldingReaders: readers of Parquet (DuckDB, Spark,
// Trino) fold case, so the columns a stream gets must differ ignoring
// case, and no field may pass for a metadata column in another case.
// Checked with pyarrow, independently of the Go reader.
func TestNamesForCaseFoldingReaders(t *testing.T) {
	dir := t.TempDir()
	bucket, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	src := &fuzzSource{stream: source.Stream{Name: fuzzStream, Format: source.FormatJSON}, recs: []fuzzRecord{
		{op: source.OpInsert, payload: []byte(`{"Name":1,"name":2,"NAME":3}`)},
		{op: source.OpInsert, payload: []byte(`{"_OPENETL_ID":"x","_Openetl_op":"delete"}`)},
	}}
	p, err := etl.NewPipeline("names").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams[fuzzStream]; c.Written != 1 || c.Quarantined != 1 {
		t.Fatalf("counts %+v: want the spoofing record quarantined", c)
	}
	got := testutil.ReadParquetTables(t, dir)[fuzzStream]
	if got == nil || got.Rows != 1 {
		t.Fatalf("read back %+v", got)
	}
	want := []string{"Name", "name_2", "NAME_3", "_openetl_id", "_openetl_op", "_openetl_seq", "_openetl_synced_at"}
	if !slices.Equal(got.Columns, want) {
		t.Fatalf("columns %q, want %q", got.Columns, want)
	}
	seen := map[string]bool{}
	for _, c := range got.Columns {
		if seen[strings.ToLower(c)] {
			t.Errorf("columns %q: two are %q ignoring case", got.Columns, c)
		}
		seen[strings.ToLower(c)] = true
	}
}
