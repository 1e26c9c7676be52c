package engine_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
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
		b.Append(source.OpInsert, int64(i), fmt.Appendf(nil, "%d", 1_000_000+i), d)
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
func BenchmarkArrowGoJSONReader(b *testing.B) {
	e := newEngine(b, engine.Config{})
	docs := benchDocs()
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
