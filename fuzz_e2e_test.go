package etl_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/uptrace/bun/driver/sqliteshim"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
)

// The end-to-end fuzz targets below push fuzzed records through a whole
// pipeline into sink/parquet and sink/iceberg, in two syncs (the second
// resumes from the first's checkpoint and engine state), and check the
// rule every input must keep: each sync succeeds, every record read is
// written or quarantined, the destination holds exactly the rows written,
// readable, and every held value is a line under _held/. `make test` runs
// each for a few hundred inputs, its seeds first.

// fuzzStream is the one stream of a fuzzSource.
const fuzzStream = "fuzzed"

// fuzzRecord is one record a fuzzSource emits.
type fuzzRecord struct {
	op      source.Op
	key     []byte
	payload []byte
}

// fuzzSource is a source of one stream with one split whose records are
// given per sync: a sync reads the records added since the last
// checkpoint (its resume state is the count of records before it).
type fuzzSource struct {
	stream source.Stream
	recs   []fuzzRecord
}

func (s *fuzzSource) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{s.stream}}, nil
}

func (s *fuzzSource) Replay() source.Replay { return source.ReplayExact }

func (s *fuzzSource) Open(_ context.Context, _ []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	from := 0
	if st, ok := resume["only"]; ok {
		n, err := strconv.Atoi(string(st))
		if err != nil {
			return nil, fmt.Errorf("resume state %q: %w", st, err)
		}
		from = n
	}
	return []source.Split{&fuzzSplit{s: s, from: from, to: len(s.recs)}}, nil
}

type fuzzSplit struct {
	s        *fuzzSource
	from, to int
}

func (sp *fuzzSplit) ID() source.SplitID { return "only" }

func (sp *fuzzSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	for i := sp.from; i < sp.to; i++ {
		r := sp.s.recs[i]
		if err := e.Record(sp.s.stream.Name, r.op, int64(i+1), r.key, r.payload); err != nil {
			return err
		}
	}
	if err := e.ResumePoint([]byte(strconv.Itoa(sp.to))); err != nil {
		return err
	}
	if !bounded {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// fuzzDest is one destination the targets write to, with what reads its
// rows back.
type fuzzDest struct {
	name string
	open func(t *testing.T) (sink.Destination, func(ctx context.Context) (int64, error))
}

var fuzzDests = []fuzzDest{
	{"parquet", func(t *testing.T) (sink.Destination, func(ctx context.Context) (int64, error)) {
		bucket := memblob.OpenBucket(nil)
		t.Cleanup(func() { bucket.Close() })
		dst, err := parquet.New(parquet.Config{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		return dst, func(ctx context.Context) (int64, error) { return parquetRows(ctx, bucket) }
	}},
	{"iceberg", func(t *testing.T) (sink.Destination, func(ctx context.Context) (int64, error)) {
		// Not t.TempDir: a fuzz test's name holds '#', which a file://
		// URL would take for a fragment.
		dir, err := os.MkdirTemp("", "fuzz-iceberg-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		// synchronous(off): a throwaway catalog, and its fsyncs took
		// most of an input's time; on a loaded machine an input then
		// ran past the 10 s after which Go's fuzz worker panics
		// ("deadlocked!").
		db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(dir, "catalog.db")+"?_pragma=busy_timeout(10000)&_pragma=synchronous(off)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		cat, err := sqlcat.NewCatalog("fuzz", db, sqlcat.SQLite, ice.Properties{"warehouse": "file://" + filepath.Join(dir, "warehouse")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cat.Close(); _ = db.Close() })
		dst, err := iceberg.New(iceberg.Config{Catalog: cat, Namespace: []string{"fuzz"}, Grouping: &iceberg.Grouping{}})
		if err != nil {
			t.Fatal(err)
		}
		return dst, func(ctx context.Context) (int64, error) { return icebergRows(ctx, cat) }
	}},
}

// parquetRows reads every file of every stream's current manifest in
// full and returns the rows.
func parquetRows(ctx context.Context, bucket *blob.Bucket) (int64, error) {
	streams, err := parquet.Streams(ctx, bucket, "")
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range streams {
		m, err := parquet.ReadManifest(ctx, bucket, "", s)
		if err != nil {
			return 0, err
		}
		for _, f := range m.Files {
			b, err := bucket.ReadAll(ctx, f.Key)
			if err != nil {
				return 0, err
			}
			pf, err := file.NewParquetReader(bytes.NewReader(b))
			if err != nil {
				return 0, fmt.Errorf("%s: %w", f.Key, err)
			}
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", f.Key, err)
			}
			tbl, err := fr.ReadTable(ctx)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", f.Key, err)
			}
			if tbl.NumRows() != f.Rows {
				tbl.Release()
				return 0, fmt.Errorf("%s: %d rows, the manifest says %d", f.Key, tbl.NumRows(), f.Rows)
			}
			n += tbl.NumRows()
			tbl.Release()
		}
	}
	return n, nil
}

// icebergRows scans every table of the namespace and returns the rows.
func icebergRows(ctx context.Context, cat catalog.Catalog) (int64, error) {
	var n int64
	for id, err := range cat.ListTables(ctx, table.Identifier{"fuzz"}) {
		if err != nil {
			if errors.Is(err, catalog.ErrNoSuchNamespace) {
				return 0, nil
			}
			return 0, err
		}
		tbl, err := cat.LoadTable(ctx, id)
		if err != nil {
			return 0, err
		}
		at, err := tbl.Scan().ToArrowTable(ctx)
		if err != nil {
			return 0, fmt.Errorf("scan %v: %w", id, err)
		}
		n += at.NumRows()
		at.Release()
	}
	return n, nil
}

// checkSyncs runs the syncs of one fuzz input into each destination: the
// records of syncs[i] are added before sync i.
func checkSyncs(t *testing.T, stream source.Stream, syncs [][]fuzzRecord) {
	t.Helper()
	ctx := context.Background()
	for _, d := range fuzzDests {
		src := &fuzzSource{stream: stream}
		dst, rows := d.open(t)
		store := checkpoint.NewMem()
		p, err := etl.NewPipeline("fuzz").From(src).To(dst).Checkpoints(store).Build()
		if err != nil {
			t.Fatalf("%s: build: %v", d.name, err)
		}
		var total checkpoint.Counts
		for i, recs := range syncs {
			src.recs = append(src.recs, recs...)
			res, err := p.Sync(ctx)
			if err != nil {
				t.Fatalf("%s: sync %d: %v", d.name, i+1, err)
			}
			c := res.Streams[stream.Name]
			if c.Read != int64(len(recs)) || c.Read != c.Written+c.Quarantined {
				t.Fatalf("%s: sync %d of %d records: %+v: want read = records = written + quarantined", d.name, i+1, len(recs), c)
			}
			total.Written += c.Written
			total.Held += c.Held
		}
		got, err := rows(ctx)
		if err != nil {
			t.Fatalf("%s: reading the rows back: %v", d.name, err)
		}
		if got != total.Written {
			t.Fatalf("%s: %d rows at the destination, %d written", d.name, got, total.Written)
		}
		if held := heldLines(t, store, stream.Name); held != total.Held {
			t.Fatalf("%s: %d held lines, %d held counted", d.name, held, total.Held)
		}
	}
}

// heldLines counts the held lines the pipeline "fuzz" published for
// stream, checking each is a JSON object naming a column.
func heldLines(t *testing.T, store checkpoint.Store, stream string) int64 {
	t.Helper()
	var n int64
	for e := uint64(1); e <= 16; e++ {
		b, err := store.ReadFile(context.Background(), "fuzz", etl.HeldName(stream, e))
		if err != nil {
			continue // an epoch may hold nothing
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var l struct{ Column string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Column == "" {
				t.Fatalf("held line %q: %v", sc.Bytes(), err)
			}
			n++
		}
	}
	return n
}

// splitRecords turns fuzz data into the records of up to two syncs:
// records are lines, a byte 0x1e starts the second sync, and a line
// starting with 0x02 or 0x03 is an update or a delete (the rest is the
// payload; a delete may be empty).
func splitRecords(data []byte, payload func([]byte) []byte) [][]fuzzRecord {
	var syncs [][]fuzzRecord
	for _, part := range bytes.SplitN(data, []byte{0x1e}, 2) {
		var recs []fuzzRecord
		for _, line := range bytes.Split(part, []byte{'\n'}) {
			op := source.OpInsert
			if len(line) > 0 && (line[0] == 2 || line[0] == 3) {
				op, line = source.Op(line[0]), line[1:]
			}
			recs = append(recs, fuzzRecord{op: op, payload: payload(line)})
		}
		syncs = append(syncs, recs)
	}
	return syncs
}

// crashLog makes the runtime write a crash of the whole process (a panic
// on a goroutine the target did not start, a fatal error) to the file
// OPENETL_FUZZ_CRASH_LOG names as well, when it is set: go test -fuzz
// throws a worker's output away, so such a crash leaves only "exit
// status 2". make test sets it.
func crashLog(f *testing.F) {
	p := os.Getenv("OPENETL_FUZZ_CRASH_LOG")
	if p == "" {
		return
	}
	out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		f.Fatal(err)
	}
	defer out.Close()
	if err := debug.SetCrashOutput(out, debug.CrashOptions{}); err != nil {
		f.Fatal(err)
	}
}

// FuzzSyncJSON: documents, one a line, into Parquet and Iceberg.
func FuzzSyncJSON(f *testing.F) {
	crashLog(f)
	for _, s := range []string{
		`{"id":1,"a":"x"}` + "\n" + `{"id":2,"a":1.5,"b":[1,2]}`,
		`{"id":1,"o":{}}` + "\n" + `{"id":2,"o":{"p":{}}}` + "\n" + `{"id":3,"o":{"a":1}}`,
		`{"id":1,"a\u0000b":1}` + "\n" + `{"o":{"x\u0000":1}}`,
		`{"_OPENETL_ID":"x","_Openetl_op":"delete"}` + "\n" + `{"Name":1,"name":2,"NAME":3}`,
		`{"o":{"n":1e400}}` + "\n" + `{"n":-0,"d":-0.0}` + "\x1e" + `{"n":1.5,"d":12345678901234567890.5}`,
		`{"a":null,"l":[],"m":[null],"s":{"x":null}}` + "\x1e" + `{"a":1,"l":[1],"s":{"x":"y"}}`,
		`{"t":"2024-01-02T03:04:05Z","u":18446744073709551616}` + "\n\x03\n\x03{\"id\":9}",
		`{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":1}}}}}}}}}}`,
		`{"o":{"A":1,"a":2}}` + "\n" + `[1]` + "\n" + `{"x":"\ud800"}`,
		`{"a":1}` + "\x1e" + `{"a":"x"}` + "\n" + `{"a":{"b":1}}` + "\n" + `{"a":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			t.Skip("large inputs add time, not coverage")
		}
		checkSyncs(t, source.Stream{Name: fuzzStream, Format: source.FormatJSON},
			splitRecords(data, func(b []byte) []byte { return b }))
	})
}

// FuzzSyncRows: declared rows into Parquet and Iceberg. decl lists the
// columns, one "name type" a line (MySQL types when mysql, else
// Postgres); data holds the rows, one a line, values separated by tabs,
// `\N` a null. A declaration the engine refuses is a configuration error,
// not data, and is skipped.
func FuzzSyncRows(f *testing.F) {
	crashLog(f)
	f.Add(false, "id int4\nname text\nn numeric(10,2)\nts timestamptz\na _int4",
		[]byte("1\tx\t1.25\t2024-01-02 03:04:05+02\t{1,2}\n2\t\\N\t-0\t\\N\t{}\x1e3\ty\t99999999.99\tinfinity\t{NULL}"))
	f.Add(false, "Name text\nname text\nNAME int8", []byte("a\tb\t1\n\\N\t\\N\t-0"))
	f.Add(false, "_OPENETL_ID text\nx float8", []byte("a\t-0\nb\tNaN"))
	f.Add(false, "i interval\nt time\nj jsonb\nu uuid\nb bytea", []byte("1 day\t24:00:00\t{}\t00000000-0000-0000-0000-000000000000\t\\x00ff"))
	f.Add(true, "id bigint unsigned\nt time\nd decimal(5,2)\ne enum('a','b')\nf double", []byte("18446744073709551615\t838:59:59\t-0.00\ta\t-0"))
	f.Add(true, "b bit(3)\ny year\ndt datetime\nj json", []byte("5\t2024\t2024-01-02 03:04:05\t{\"a\":{}}"))
	f.Fuzz(func(t *testing.T, mysql bool, decl string, data []byte) {
		if len(data) > 4096 || len(decl) > 512 {
			t.Skip("large inputs add time, not coverage")
		}
		stream := source.Stream{Name: fuzzStream, Format: source.FormatRow, Types: source.TypesPostgres}
		if mysql {
			stream.Types = source.TypesMySQL
		}
		for _, l := range strings.Split(decl, "\n") {
			name, ty, _ := strings.Cut(l, " ")
			stream.Columns = append(stream.Columns, source.Column{Name: name, Type: ty, Nullable: true})
		}
		spec := engine.StreamSpec{Name: stream.Name, Declared: true, Types: stream.Types}
		for _, c := range stream.Columns {
			spec.Columns = append(spec.Columns, engine.Column(c))
		}
		e, err := engine.New(engine.Config{Streams: []engine.StreamSpec{spec}})
		if err != nil {
			if errors.Is(err, engine.ErrInvalidInput) {
				t.Skip("a declaration the engine refuses")
			}
			t.Fatal(err)
		}
		e.Close()
		ncol := len(stream.Columns)
		syncs := splitRecords(data, func(line []byte) []byte {
			if len(line) == 0 {
				return nil
			}
			vals := bytes.Split(line, []byte{'\t'})
			var p []byte
			for i := 0; i < ncol; i++ {
				switch {
				case i >= len(vals) || string(vals[i]) == `\N`:
					p = source.AppendRowNull(p)
				default:
					p = source.AppendRowValue(p, vals[i])
				}
			}
			return p
		})
		checkSyncs(t, stream, syncs)
	})
}
