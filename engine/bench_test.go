package engine_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

const benchRows = 4096

// benchDocs returns benchRows documents of about 200 bytes with 9 mixed
// scalar fields (ints, floats, bools, strings, some nulls and escapes),
// deterministic across runs.
func benchDocs() [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	users := []string{"alice", "bob", "carol", "dmitri", "eve", "françois"}
	notes := []string{"leave at door", `ring "twice"`, "fragile\nhandle with care", "", "gift wrap, no receipt"}
	docs := make([][]byte, benchRows)
	for i := range docs {
		note := `null`
		if n := notes[rng.IntN(len(notes))]; n != "" {
			note = fmt.Sprintf("%q", n)
		}
		docs[i] = fmt.Appendf(nil,
			`{"id":%d,"user":%q,"amount":%.2f,"active":%t,"qty":%d,"currency":"EUR","created":"2025-06-%02dT%02d:%02d:%02dZ","ratio":%g,"note":%s}`,
			1_000_000+i, users[rng.IntN(len(users))], rng.Float64()*1000, rng.IntN(2) == 0, rng.IntN(50),
			1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.Float64(), note)
	}
	return docs
}

func benchBatch(docs [][]byte) (*engine.RawBatch, int) {
	b := &engine.RawBatch{Stream: "orders"}
	n := 0
	for i, d := range docs {
		b.Append(uint8(source.OpInsert), int64(i), fmt.Appendf(nil, "%d", 1_000_000+i), d)
		n += len(d)
	}
	return b, n
}

func BenchmarkPush(b *testing.B) {
	for _, lanes := range []int{1, 4} {
		b.Run(fmt.Sprintf("lanes=%d", lanes), func(b *testing.B) {
			e := newEngine(b, engine.Config{Lanes: lanes})
			batch, size := benchBatch(benchDocs())
			// Warm up: the first push infers the schema and sizes scratch.
			if out, err := e.Push(batch, syncedAt); err != nil {
				b.Fatal(err)
			} else {
				out.Record.Release()
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out, err := e.Push(batch, syncedAt)
				if err != nil {
					b.Fatal(err)
				}
				if len(out.Quarantined) != 0 || out.Record.NumRows() != benchRows {
					b.Fatalf("quarantined %d", len(out.Quarantined))
				}
				out.Record.Release()
			}
			b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkArrowGoJSONReader decodes the same documents with arrow-go's
// JSON reader, given the schema the engine inferred (its source columns),
// as the baseline for BenchmarkPush.
func BenchmarkArrowGoJSONReader(b *testing.B) { benchArrowGo(b, benchDocs()) }

// benchWideDocs returns benchRows documents of 50 fields (ints, floats,
// bools and short strings in turn), about 1.1 KB each.
func benchWideDocs() [][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	docs := make([][]byte, benchRows)
	for i := range docs {
		d := []byte{'{'}
		for c := 0; c < 50; c++ {
			if c > 0 {
				d = append(d, ',')
			}
			switch c % 4 {
			case 0:
				d = fmt.Appendf(d, `"col_%02d":%d`, c, rng.Int64N(1_000_000_000))
			case 1:
				d = fmt.Appendf(d, `"col_%02d":%.3f`, c, rng.Float64()*1e4)
			case 2:
				d = fmt.Appendf(d, `"col_%02d":%t`, c, rng.IntN(2) == 0)
			default:
				d = fmt.Appendf(d, `"col_%02d":"v%06d"`, c, rng.IntN(1_000_000))
			}
		}
		docs[i] = append(d, '}')
	}
	return docs
}

// BenchmarkPushWide pushes 50-column documents (compare
// BenchmarkArrowGoJSONReaderWide).
func BenchmarkPushWide(b *testing.B) {
	e := newEngine(b, engine.Config{})
	batch, size := benchBatch(benchWideDocs())
	benchPush(b, e, batch, size)
}

// BenchmarkArrowGoJSONReaderWide is arrow-go's JSON reader on the same
// 50-column documents, given the engine's schema.
func BenchmarkArrowGoJSONReaderWide(b *testing.B) { benchArrowGo(b, benchWideDocs()) }

// benchKafkaDocs returns benchRows documents shaped like source/kafka's
// benchmark messages (about 200 bytes: an int, a short string, a float,
// a bool and a 120-byte string).
func benchKafkaDocs() [][]byte {
	pad := strings.Repeat("x", 120)
	docs := make([][]byte, benchRows)
	for i := range docs {
		docs[i] = fmt.Appendf(nil, `{"id":%d,"name":"customer %d","amount":%d.25,"ok":true,"pad":%q}`, i, i, i%1000, pad)
	}
	return docs
}

// BenchmarkPushKafkaDocs pushes the Kafka benchmark's documents (ns/op is
// per batch of benchRows documents).
func BenchmarkPushKafkaDocs(b *testing.B) {
	e := newEngine(b, engine.Config{})
	batch, size := benchBatch(benchKafkaDocs())
	benchPush(b, e, batch, size)
}

// benchPgRows returns benchRows declared Postgres rows of 10 mixed columns
// in text form (about 150 bytes each) and their spec.
func benchPgRows() ([][]byte, engine.StreamSpec) {
	spec := rowSpec("pg", source.TypesPostgres,
		"id", "int8", "qty", "int4", "price", "numeric(12,2)", "ratio", "float8", "active", "bool",
		"name", "text", "created", "timestamptz", "day", "date", "uid", "uuid", "tags", "_text")
	rng := rand.New(rand.NewPCG(5, 6))
	rows := make([][]byte, benchRows)
	for i := range rows {
		rows[i] = row(
			fmt.Sprint(1_000_000+i), fmt.Sprint(rng.IntN(500)), fmt.Sprintf("%d.%02d", rng.IntN(100000), rng.IntN(100)),
			fmt.Sprint(rng.Float64()), []string{"t", "f"}[rng.IntN(2)], fmt.Sprintf("customer %d", rng.IntN(10000)),
			fmt.Sprintf("2025-06-%02d %02d:%02d:%02d.%06d+02", 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000000)),
			fmt.Sprintf("2025-%02d-%02d", 1+rng.IntN(12), 1+rng.IntN(28)),
			fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Int64N(1<<48)),
			`{red,"dark blue",NULL}`,
		)
	}
	return rows, spec
}

// BenchmarkPushDeclaredRows pushes declared Postgres text rows of 10
// mixed columns (goal: ≥ 1,000,000 rows/s on one core).
func BenchmarkPushDeclaredRows(b *testing.B) {
	rows, spec := benchPgRows()
	e := newEngine(b, engine.Config{Streams: []engine.StreamSpec{spec}})
	batch, size := benchBatch(rows)
	batch.Stream = "pg"
	benchPush(b, e, batch, size)
}

func benchPush(b *testing.B, e engine.Engine, batch *engine.RawBatch, size int) {
	b.Helper()
	if out, err := e.Push(batch, syncedAt); err != nil {
		b.Fatal(err)
	} else if len(out.Quarantined) != 0 {
		b.Fatalf("quarantined %v", out.Quarantined[0])
	} else {
		out.Record.Release()
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out, err := e.Push(batch, syncedAt)
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Quarantined) != 0 || out.Record.NumRows() != int64(batch.Len()) {
			b.Fatalf("quarantined %d", len(out.Quarantined))
		}
		out.Record.Release()
	}
	b.ReportMetric(float64(batch.Len())*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func benchArrowGo(b *testing.B, docs [][]byte) {
	e := newEngine(b, engine.Config{})
	batch, size := benchBatch(docs)
	out, err := e.Push(batch, syncedAt)
	if err != nil {
		b.Fatal(err)
	}
	var fields []arrow.Field
	for _, f := range out.Record.Schema().Fields() {
		if len(f.Name) < 9 || f.Name[:9] != "_openetl_" {
			fields = append(fields, f)
		}
	}
	out.Record.Release()
	schema := arrow.NewSchema(fields, nil)
	ndjson := bytes.Join(docs, []byte("\n"))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := array.NewJSONReader(bytes.NewReader(ndjson), schema, array.WithChunk(benchRows))
		n := 0
		for r.Next() {
			n += int(r.RecordBatch().NumRows())
		}
		if err := r.Err(); err != nil {
			b.Fatal(err)
		}
		if n != benchRows {
			b.Fatalf("read %d rows", n)
		}
		r.Release()
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkPushPolicies pushes benchRows documents without policies and
// with a typical set: two columns excluded, one hashed (HMAC-SHA-256),
// one masked, and a row filter keeping about half the rows (active =
// true). ns/row is per input row. allocs/op counts Go's allocations
// only (the binding's); the engine's own are Rust's, per batch.
func BenchmarkPushPolicies(b *testing.B) {
	pol := engine.StreamSpec{Name: "orders",
		Rules: []engine.Rule{
			{Kind: engine.RuleExclude, Column: "created"},
			{Kind: engine.RuleExclude, Column: "ratio"},
			{Kind: engine.RuleHash, Column: "user", Key: engine.HashKey("bench-key")},
			{Kind: engine.RuleMask, Column: "note", N: 4},
		},
		Filter: &engine.Cond{Op: engine.OpEq, Column: "active", Value: true},
	}
	for _, tc := range []struct {
		name  string
		specs []engine.StreamSpec
	}{{"none", nil}, {"policies", []engine.StreamSpec{pol}},
		{"x-filter", []engine.StreamSpec{{Name: "orders", Filter: pol.Filter}}},
		{"x-hash", []engine.StreamSpec{{Name: "orders", Rules: pol.Rules[2:3]}}},
		{"x-mask", []engine.StreamSpec{{Name: "orders", Rules: pol.Rules[3:4]}}},
		{"x-exclude", []engine.StreamSpec{{Name: "orders", Rules: pol.Rules[0:2]}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEngine(b, engine.Config{Streams: tc.specs})
			batch, size := benchBatch(benchDocs())
			if out, err := e.Push(batch, syncedAt); err != nil {
				b.Fatal(err)
			} else {
				out.Record.Release()
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out, err := e.Push(batch, syncedAt)
				if err != nil {
					b.Fatal(err)
				}
				if n := int(out.Record.NumRows()) + out.Filtered; n != benchRows || (tc.name == "policies" && out.Filtered == 0) {
					b.Fatalf("%d rows out + filtered, %d filtered", n, out.Filtered)
				}
				out.Record.Release()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(benchRows)/float64(b.N), "ns/row")
		})
	}
}

// benchKafkaRows returns the Kafka benchmark's events (benchKafkaDocs)
// as declared rows in text form, as the Avro and Protobuf decoders
// write them, and their spec.
func benchKafkaRows() ([][]byte, engine.StreamSpec) {
	spec := rowSpec("ev", source.TypesPostgres, "id", "int8", "name", "text", "amount", "float8", "ok", "bool", "pad", "text")
	pad := strings.Repeat("x", 120)
	rows := make([][]byte, benchRows)
	for i := range rows {
		rows[i] = row(fmt.Sprint(i), fmt.Sprintf("customer %d", i), fmt.Sprintf("%d.25", i%1000), "t", pad)
	}
	return rows, spec
}

// BenchmarkPushKafkaRows pushes the Kafka benchmark's events as declared
// rows (compare BenchmarkPushKafkaDocs: the same values as JSON).
func BenchmarkPushKafkaRows(b *testing.B) {
	rows, spec := benchKafkaRows()
	e := newEngine(b, engine.Config{Streams: []engine.StreamSpec{spec}})
	batch, size := benchBatch(rows)
	batch.Stream = "ev"
	benchPush(b, e, batch, size)
}
