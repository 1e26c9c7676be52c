package parquet_test

import (
	"context"
	"encoding/json"
	"fmt"

	"os/exec"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"gocloud.dev/blob"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
)

// dictBatch: id (unique int64), status (5 values), email (unique text),
// note (mostly null, 3 values), kind (an Arrow dictionary column).
func dictBatch(t *testing.T, n int) arrow.RecordBatch {
	t.Helper()
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "status", Type: arrow.BinaryTypes.String},
		{Name: "email", Type: arrow.BinaryTypes.String},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "kind", Type: dt},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	statuses := []string{"new", "paid", "shipped", "delivered", "cancelled"}
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(statuses[i%len(statuses)])
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user%d@example.com", i))
		if i%10 == 0 {
			b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("note %d", i%3))
		} else {
			b.Field(3).AppendNull()
		}
		if err := b.Field(4).(*array.BinaryDictionaryBuilder).AppendString([]string{"a", "b"}[i%2]); err != nil {
			t.Fatal(err)
		}
	}
	return b.NewRecordBatch()
}

// TestDictionaryModes writes the same batch in each Dictionary mode and
// asks pyarrow which column chunks have a dictionary page, and for the
// values: DictionaryAuto gives dictionaries to the low-cardinality text
// and the Arrow dictionary column only; All to every column but the
// metadata ones; None to none. The rows read back equal in every mode.
func TestDictionaryModes(t *testing.T) {
	py := testutil.Python(t)
	const n = 20_000
	rec := dictBatch(t, n)
	defer rec.Release()
	want := map[parquet.Dictionary]map[string]bool{
		parquet.DictionaryAuto: {"id": false, "status": true, "email": false, "note": true, "kind": true},
		parquet.DictionaryAll:  {"id": true, "status": true, "email": true, "note": true, "kind": true},
		parquet.DictionaryNone: {"id": false, "status": false, "email": false, "note": false, "kind": false},
	}
	for mode, dicts := range want {
		t.Run(map[parquet.Dictionary]string{parquet.DictionaryAuto: "auto", parquet.DictionaryAll: "all", parquet.DictionaryNone: "none"}[mode], func(t *testing.T) {
			dir := t.TempDir()
			b, err := parquet.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			d := newDest(t, b, parquet.Config{Bucket: b, Dictionary: mode})
			w := newWriter(t, d, "p", 0)
			if err := w.Write(context.Background(), "orders", rec); err != nil {
				t.Fatal(err)
			}
			commit(t, w, 1, preCommit(t, w, 1))
			m := manifest(t, b, "", "orders")
			if len(m.Files) != 1 {
				t.Fatalf("%d files, want 1", len(m.Files))
			}
			script := `
import json, sys, pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1])
rg = f.metadata.row_group(0)
dicts = {rg.column(i).path_in_schema: rg.column(i).has_dictionary_page for i in range(rg.num_columns)}
t = f.read()
rows = t.num_rows
ids = t.column("id").to_pylist()
print(json.dumps({"dicts": dicts, "rows": rows, "idsum": sum(ids),
  "status": t.column("status").to_pylist()[:6], "email_last": t.column("email").to_pylist()[-1],
  "notes": sum(1 for v in t.column("note").to_pylist() if v is not None),
  "kind": [str(v) for v in t.column("kind").to_pylist()[:3]]}))
`
			out, err := exec.Command(py, "-c", script, filepath.Join(dir, filepath.FromSlash(m.Files[0].Key))).CombinedOutput()
			if err != nil {
				t.Fatalf("pyarrow: %v\n%s", err, out)
			}
			var got struct {
				Dicts     map[string]bool `json:"dicts"`
				Rows      int             `json:"rows"`
				IDSum     int64           `json:"idsum"`
				Status    []string        `json:"status"`
				EmailLast string          `json:"email_last"`
				Notes     int             `json:"notes"`
				Kind      []string        `json:"kind"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			for col, want := range dicts {
				if got.Dicts[col] != want {
					t.Errorf("column %s: dictionary page %v, want %v (all: %v)", col, got.Dicts[col], want, got.Dicts)
				}
			}
			if got.Rows != n || got.IDSum != int64(n)*(n-1)/2 || got.EmailLast != fmt.Sprintf("user%d@example.com", n-1) ||
				got.Notes != n/10 || fmt.Sprint(got.Status) != "[new paid shipped delivered cancelled new]" || fmt.Sprint(got.Kind) != "[a b a]" {
				t.Errorf("read back %+v", got)
			}
		})
	}
	if _, err := parquet.New(parquet.Config{Bucket: mustBucket(t), Dictionary: 9}); err == nil {
		t.Error("New with an unknown Dictionary mode: no error")
	}
}

func mustBucket(t *testing.T) *blob.Bucket {
	b, err := parquet.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
