package etl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// jsonShards is a source of keyed JSON streams, one split each, whose
// records are revealed up to shown[stream].
type jsonShards struct {
	recs  map[string][]string // payloads by stream, keyed by "id"
	shown map[string]int
}

func (s *jsonShards) Discover(context.Context) (source.Catalog, error) {
	var c source.Catalog
	for _, name := range []string{"ev_a", "ev_b"} {
		c.Streams = append(c.Streams, source.Stream{Name: name, PrimaryKey: []string{"id"}})
	}
	return c, nil
}

func (s *jsonShards) Replay() source.Replay { return source.ReplayExact }

func (s *jsonShards) Open(_ context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	var out []source.Split
	for _, name := range streams {
		from, _ := strconv.Atoi(string(resume[source.SplitID(name)]))
		out = append(out, &jsonShard{stream: name, recs: s.recs[name][:s.shown[name]], from: from})
	}
	return out, nil
}

type jsonShard struct {
	stream string
	recs   []string
	from   int
}

func (sp *jsonShard) ID() source.SplitID { return source.SplitID(sp.stream) }

func (sp *jsonShard) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	for i := sp.from; i < len(sp.recs); i++ {
		var doc struct{ ID json.Number }
		if json.Unmarshal([]byte(sp.recs[i]), &doc) != nil {
			doc.ID = "bad" // the engine quarantines it
		}
		if err := e.Record(sp.stream, source.OpInsert, int64(i+1), []byte(doc.ID), []byte(sp.recs[i])); err != nil {
			return err
		}
	}
	if err := e.ResumePoint([]byte(strconv.Itoa(len(sp.recs)))); err != nil {
		return err
	}
	if !bounded {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// TestRouteJSONNeverNarrows routes two JSON streams whose "v" is an
// integer in one and a float in the other, and a column only one has,
// into one Parquet table; the second Sync reads new records of the
// integer stream only. pyarrow reads the second Sync's files with v
// double and w string: the table's schema, joined in the first Sync,
// starts the second from the engine's state, not from the first batch it
// meets. Its quarantined record is filed under its own stream.
func TestRouteJSONNeverNarrows(t *testing.T) {
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
	src := &jsonShards{recs: map[string][]string{
		"ev_a": {`{"id":1,"v":1}`, `{"id":2,"v":2}`, `{"id":3,"v":3}`},
		"ev_b": {`{"id":1,"v":1.5,"w":"x"}`, `not json`},
	}, shown: map[string]int{"ev_a": 1, "ev_b": 2}}
	store := checkpoint.NewMem()
	sync := func() etl.Result {
		t.Helper()
		p, err := etl.NewPipeline("jr").From(src).To(dst).Checkpoints(store).Route("ev_?", "events").Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := sync()
	if res.Streams["ev_a"].Written != 1 || res.Streams["ev_b"].Written != 1 || res.Streams["ev_b"].Quarantined != 1 {
		t.Fatalf("first sync %+v", res.Streams)
	}
	// The routed stream's quarantine is filed under its own name.
	var quarantined []string
	for e := uint64(1); e <= res.Epoch; e++ {
		if b, err := store.ReadFile(context.Background(), "jr", etl.QuarantineName("ev_b", e)); err == nil {
			quarantined = append(quarantined, strings.Split(strings.TrimSpace(string(b)), "\n")...)
		}
	}
	if len(quarantined) != 1 || !strings.Contains(quarantined[0], `"stream":"ev_b"`) || !strings.Contains(quarantined[0], `"payload":"not json"`) {
		t.Errorf("ev_b's quarantine: %q, want its one record", quarantined)
	}
	src.shown["ev_a"] = 3
	if res := sync(); res.Streams["ev_a"].Written != 2 || res.Streams["ev_b"].Written != 0 {
		t.Fatalf("second sync %+v", res.Streams)
	}
	st := testutil.ReadParquetTables(t, dir)["events"]
	if st == nil || st.Rows != 4 || st.DistinctIDs != 4 {
		t.Fatalf("events read back as %+v, want 4 rows and IDs", st)
	}
	script := `
import json, os, sys
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], "events")
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
out = []
for f in json.load(open(os.path.join(d, "_manifest", m)))["files"]:
    s = pq.read_schema(os.path.join(sys.argv[1], f["key"]))
    rows = pq.read_table(os.path.join(sys.argv[1], f["key"])).to_pylist()
    ids = ",".join(sorted(r["_openetl_stream"] + ":" + str(r["id"]) for r in rows))
    out.append(ids + " | " + ", ".join(x.name + " " + str(x.type) for x in s if not x.name.startswith("_openetl_") or x.name == "_openetl_stream"))
print(json.dumps(out))
`
	f := filepath.Join(t.TempDir(), "schemas.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var schemas []string
	if err := json.Unmarshal(out, &schemas); err != nil || len(schemas) < 2 {
		t.Fatalf("schemas %s: %v (want a file per sync at least)", out, err)
	}
	// The first Sync met ev_a's integer first, as an unrouted JSON
	// stream may: the table widened during it. The second starts wide.
	wide := "id int64, v double, w string, _openetl_stream string"
	second := 0
	for _, sc := range schemas {
		ids, schema, _ := strings.Cut(sc, " | ")
		if strings.Contains(ids, "ev_a:2") || strings.Contains(ids, "ev_a:3") {
			second++
			if schema != wide {
				t.Errorf("a file of the second Sync (%s): %s, want %s", ids, schema, wide)
			}
		}
	}
	if second == 0 {
		t.Errorf("no file holds the second Sync's rows: %q", schemas)
	}
}

// TestRouteHeldValues: a routed stream's held values are filed under the
// stream's own name, their lines naming the routed table; the rows reach
// the routed table without the held column, with their origin.
func TestRouteHeldValues(t *testing.T) {
	const rows = 200
	src, err := faker.New(faker.Config{Rows: rows, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class:        sink.StageAndApply,
		Capabilities: sink.Capabilities{IdentifierCase: "upper", Unsupported: []string{"float64"}},
	})
	store := checkpoint.NewMem()
	p, err := etl.NewPipeline("held").From(src).To(dst).Checkpoints(store).Route("ord*", "all_orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := res.Streams[faker.Orders]
	if c.Written != rows || c.Held == 0 {
		t.Fatalf("counts %+v: want %d written and some held", c, rows)
	}
	got := dst.Rows("ALL_ORDERS")
	if len(got) != rows {
		t.Fatalf("%d rows in ALL_ORDERS, want %d", len(got), rows)
	}
	for _, r := range got {
		if _, ok := r.Values["AMOUNT"]; ok || r.Values[sink.ColumnStream] != faker.Orders {
			t.Fatalf("row %v: want no AMOUNT, and %s %q", r.Values, sink.ColumnStream, faker.Orders)
		}
	}
	var lines int64
	for e := uint64(1); e <= res.Epoch; e++ {
		b, err := store.ReadFile(context.Background(), "held", etl.HeldName(faker.Orders, e))
		if err != nil {
			continue // an epoch may hold nothing
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l struct{ Stream, Table string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if l.Stream != faker.Orders || l.Table != "ALL_ORDERS" {
				t.Fatalf("held line %s: want stream %q, table ALL_ORDERS", sc.Bytes(), faker.Orders)
			}
			lines++
		}
	}
	if lines != c.Held {
		t.Fatalf("%d held lines, counts say %d", lines, c.Held)
	}
}
