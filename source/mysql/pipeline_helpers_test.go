package mysql_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// syncOnce runs one Sync of a pipeline reading src into sink/parquet
// under dir/tables, with its checkpoints under dir/checkpoints.
func syncOnce(ctx context.Context, src source.Source, dir string) (etl.Result, error) {
	return syncEvents(ctx, src, dir, nil)
}

// syncEvents is syncOnce with the pipeline's events, when onEvent is set.
func syncEvents(ctx context.Context, src source.Source, dir string, onEvent func(etl.Event)) (etl.Result, error) {
	bucket, err := fileblob.OpenBucket(filepath.Join(dir, "tables"), &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		return etl.Result{}, err
	}
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		return etl.Result{}, err
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		return etl.Result{}, err
	}
	defer store.Close(context.Background())
	b := etl.NewPipeline("my").From(src).To(dst).Checkpoints(store).EpochEvery(200*time.Millisecond, 0)
	if onEvent != nil {
		b = b.OnEvent(onEvent, 0)
	}
	p, err := b.Build()
	if err != nil {
		return etl.Result{}, err
	}
	return p.Sync(ctx)
}

// sync is syncOnce that fails the test on an error.
func sync(t testing.TB, src *mysql.Source, dir string) etl.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := syncOnce(ctx, src, dir)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// readRows reads a stream's rows with pyarrow, in _openetl_seq order
// (ties by id), as JSON values: decimals and big integers as strings,
// floats as repr strings, timestamps and dates in ISO form, durations in
// microseconds, bytes in hex.
func readRows(t testing.TB, dir, stream string) []map[string]any {
	t.Helper()
	script := `
import json, os, sys, datetime, decimal
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], sys.argv[2])
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
files = json.load(open(os.path.join(d, "_manifest", m)))["files"]
rows, types = [], {}
for f in files:
    t = pq.read_table(os.path.join(sys.argv[1], f["key"]))
    for fld in t.schema:
        types[fld.name] = str(fld.type)
    rows += t.to_pylist()
rows.sort(key=lambda r: (r["_openetl_seq"], r["id"]))
def conv(v):
    if v is None:
        return None
    if isinstance(v, datetime.timedelta):
        return v // datetime.timedelta(microseconds=1)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return v
out = [{k: conv(v) for k, v in r.items()} for r in rows]
print(json.dumps({"rows": out, "types": types}))
`
	f := filepath.Join(t.TempDir(), "read.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, filepath.Join(dir, "tables"), stream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var res struct {
		Rows  []map[string]any
		Types map[string]string
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatal(err)
	}
	lastTypes = res.Types
	return res.Rows
}

// lastTypes are the Arrow types of the columns readRows read last.
var lastTypes map[string]string

// quarantineLines reads a stream's quarantined records (JSON lines under
// the checkpoints directory).
func quarantineLines(t testing.TB, dir, stream string) []map[string]any {
	t.Helper()
	return sideLines(t, dir, "_quarantine", stream)
}

// heldLines reads a stream's held values (JSON lines under the
// checkpoints directory).
func heldLines(t testing.TB, dir, stream string) []map[string]any {
	t.Helper()
	return sideLines(t, dir, "_held", stream)
}

func sideLines(t testing.TB, dir, kind, stream string) []map[string]any {
	t.Helper()
	ckpt := filepath.Join(dir, "checkpoints")
	files, _ := filepath.Glob(filepath.Join(ckpt, "*", "my", kind, stream, "*.jsonl"))
	more, _ := filepath.Glob(filepath.Join(ckpt, "my", kind, stream, "*.jsonl"))
	files = append(files, more...)
	var out []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
	}
	return out
}
