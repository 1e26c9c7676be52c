package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// benchSchema is the Avro form of the benchmark's JSON events
// (preload): an id, a short string, an amount, a flag and a 120-byte
// string; about 150 bytes in Avro, 200 in JSON.
const benchSchema = `{"type":"record","name":"Event","fields":[{"name":"id","type":"long"},
 {"name":"name","type":"string"},{"name":"amount","type":"double"},{"name":"ok","type":"boolean"},
 {"name":"pad","type":"string"}]}`

// benchProto is the Protobuf form of the same events (about 155 bytes).
const benchProto = `syntax = "proto3"; message Event { int64 id = 1; string name = 2; double amount = 3; bool ok = 4; string pad = 5; }`

// benchProtos returns n events as registry-framed Protobuf values
// (schema ID 2, message index [0]), encoded with protowire.
func benchProtos(n int) [][]byte {
	pad := strings.Repeat("x", 120)
	var out [][]byte
	for i := range n {
		b := append(binary.BigEndian.AppendUint32([]byte{0}, 2), 0)
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(i))
		b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), fmt.Sprintf("customer %d", i))
		b = protowire.AppendFixed64(protowire.AppendTag(b, 3, protowire.Fixed64Type), math.Float64bits(float64(i%1000)+0.25))
		b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), 1)
		out = append(out, protowire.AppendString(protowire.AppendTag(b, 5, protowire.BytesType), pad))
	}
	return out
}

// benchEvents returns n events as JSON documents and as registry-framed
// Avro values (schema ID 1) of the same values.
func benchEvents(b testing.TB, n int) (docs, avros [][]byte) {
	sch, err := avro.Parse(benchSchema)
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 120)
	for i := range n {
		docs = append(docs, fmt.Appendf(nil, `{"id":%d,"name":"customer %d","amount":%d.25,"ok":true,"pad":%q}`, i, i, i%1000, pad))
		v, err := sch.AppendEncode(binary.BigEndian.AppendUint32([]byte{0}, 1), map[string]any{
			"id": int64(i), "name": fmt.Sprintf("customer %d", i), "amount": float64(i%1000) + 0.25, "ok": true, "pad": pad})
		if err != nil {
			b.Fatal(err)
		}
		avros = append(avros, v)
	}
	return docs, avros
}

// BenchmarkDecodeAvroVsJSON: the same ~200-byte events turned into
// Arrow by the engine, in batches of 8192 as the runner pushes them: as
// JSON documents (parsed and typed by inference in the engine), as Avro
// decoded in the engine (the fast path: Avro bodies straight into Arrow),
// as Avro and as Protobuf decoded in Go into declared rows, which the
// engine coerces (avro-go: the path before the fast path). Reports each
// path's messages per CPU-second of this process and their ratios to
// JSON (goal ≥ 1.5).
func BenchmarkDecodeAvroVsJSON(b *testing.B) {
	const n, batchRows = 200_000, 8192
	docs, avros := benchEvents(b, n)
	s, err := avrorow.Parse(benchSchema, nil, false)
	if err != nil {
		b.Fatal(err)
	}
	var cols []engine.Column
	for _, c := range s.Cols() {
		cols = append(cols, engine.Column{Name: c.Name, Type: c.Type(), Nullable: true})
	}
	dec, err := avrorow.NewDecoder(s, s.Cols())
	if err != nil {
		b.Fatal(err)
	}
	protos := benchProtos(n)
	pf, err := avrorow.ParseProto(benchProto, nil)
	if err != nil {
		b.Fatal(err)
	}
	ps, err := pf.Message([]int{0})
	if err != nil {
		b.Fatal(err)
	}
	pdec, err := ps.NewDecoder(ps.Cols())
	if err != nil {
		b.Fatal(err)
	}
	newEngine := func(specs ...engine.StreamSpec) engine.Engine {
		e, err := engine.New(engine.Config{Streams: specs})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		return e
	}
	fastReg, ok := kafka.FastRegistration(s, dec, 1)
	if !ok {
		b.Fatal("no fast path for the benchmark's schema")
	}
	je := newEngine()
	ae := newEngine(engine.StreamSpec{Name: "avro", Declared: true, Types: source.TypesPostgres, Columns: cols})
	fe := newEngine(engine.StreamSpec{Name: "avro", Declared: true, Types: source.TypesPostgres, Columns: cols})
	pe := newEngine(engine.StreamSpec{Name: "proto", Declared: true, Types: source.TypesPostgres, Columns: cols})
	syncedAt := time.Now()
	var batch engine.RawBatch
	var row []byte
	push := func(e engine.Engine) {
		out, err := e.Push(&batch, syncedAt)
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Quarantined) != 0 || out.Record.NumRows() != int64(batch.Len()) {
			b.Fatalf("%d quarantined: %+v", len(out.Quarantined), out.Quarantined[0])
		}
		out.Record.Release()
		batch.Reset()
	}
	runJSON := func() {
		batch.Stream = "json"
		for i, d := range docs {
			batch.Append(uint8(source.OpInsert), int64(i), nil, d)
			if batch.Len() == batchRows {
				push(je)
			}
		}
		push(je)
	}
	runAvro := func() {
		batch.Stream = "avro"
		for i, v := range avros {
			if row, err = dec.Row(row[:0], v[5:]); err != nil {
				b.Fatal(err)
			}
			batch.Append(uint8(source.OpInsert), int64(i), nil, row)
			if batch.Len() == batchRows {
				push(ae)
			}
		}
		push(ae)
	}
	runFast := func() {
		batch.Stream = "avro"
		for i, v := range avros {
			row = engine.AppendAvroRow(row[:0], fastReg, nil, v[5:])
			batch.Append(uint8(source.OpInsert), int64(i), nil, row)
			if batch.Len() == batchRows {
				push(fe)
			}
		}
		push(fe)
	}
	runProto := func() {
		batch.Stream = "proto"
		for i, v := range protos {
			if row, err = pdec.Row(row[:0], v[6:]); err != nil {
				b.Fatal(err)
			}
			batch.Append(uint8(source.OpInsert), int64(i), nil, row)
			if batch.Len() == batchRows {
				push(pe)
			}
		}
		push(pe)
	}
	runJSON() // warm up all
	runFast()
	runAvro()
	runProto()
	var cj, cf, ca, cp float64
	b.ResetTimer()
	for range b.N {
		c0 := cpuSeconds()
		runJSON()
		c1 := cpuSeconds()
		runFast()
		c2 := cpuSeconds()
		runAvro()
		c3 := cpuSeconds()
		runProto()
		cj, cf, ca, cp = cj+c1-c0, cf+c2-c1, ca+c3-c2, cp+cpuSeconds()-c3
	}
	msgs := float64(n * b.N)
	b.ReportMetric(msgs/cj, "json-msgs/cpu-s")
	b.ReportMetric(msgs/cf, "avro-msgs/cpu-s")
	b.ReportMetric(msgs/ca, "avro-go-msgs/cpu-s")
	b.ReportMetric(msgs/cp, "proto-msgs/cpu-s")
	b.ReportMetric(cj/cf, "avro-vs-json")
	b.ReportMetric(cj/ca, "avro-go-vs-json")
	b.ReportMetric(cj/cp, "proto-vs-json")
}

// BenchmarkPipelineAvroVsJSON: the same events in three topics of kfake
// (in memory: it flatters all), one JSON, one Avro and one Protobuf in a
// registry's wire format, each read to its end by a Sync into a null
// destination. Reports each pipeline's messages per CPU-second of this
// process (kfake included) and their ratios to JSON.
func BenchmarkPipelineAvroVsJSON(b *testing.B) {
	const n = 300_000
	brokers := newCluster(b, 4, "ev-json", "ev-avro", "ev-proto")
	reg, rcl := newRegistry(b)
	if id := register(b, reg, "ev-avro-value", benchSchema); id != 1 {
		b.Fatalf("schema id %d, want 1", id)
	}
	if id := registerTyped(b, reg, "ev-proto-value", benchProto, sr.TypeProtobuf); id != 2 {
		b.Fatalf("schema id %d, want 2", id)
	}
	docs, avros := benchEvents(b, n)
	cl := newClient(b, brokers)
	recs := make([]*kgo.Record, 0, 10_000)
	for topic, vals := range map[string][][]byte{"ev-json": docs, "ev-avro": avros, "ev-proto": benchProtos(n)} {
		for i, v := range vals {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 4), Key: fmt.Appendf(nil, "%d", i), Value: v})
			if len(recs) == cap(recs) {
				produce(b, cl, recs...)
				recs = recs[:0]
			}
		}
		produce(b, cl, recs...)
		recs = recs[:0]
	}
	run := func(topic string, cfg kafka.Config) {
		cfg.Opts, cfg.Topics = []kgo.Opt{kgo.SeedBrokers(brokers...)}, []string{topic}
		src, err := kafka.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close(context.Background())
		store, err := checkpoint.OpenDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("bench").From(src).To(nullDest{}).Checkpoints(store).Build()
		if err != nil {
			b.Fatal(err)
		}
		res, err := p.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if c := res.Streams[topic]; c.Read != n || c.Written != n {
			b.Fatalf("%s: %+v, want %d read and written", topic, c, n)
		}
	}
	regCfg := kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl}
	goAvro := func() { // the Go path, as before the engine's fast path
		defer kafka.SetFastPath(false)()
		run("ev-avro", regCfg)
	}
	run("ev-json", kafka.Config{}) // warm up all
	run("ev-avro", regCfg)
	goAvro()
	run("ev-proto", regCfg)
	var cj, cf, ca, cp float64
	b.ResetTimer()
	for range b.N {
		c0 := cpuSeconds()
		run("ev-json", kafka.Config{})
		c1 := cpuSeconds()
		run("ev-avro", regCfg)
		c2 := cpuSeconds()
		goAvro()
		c3 := cpuSeconds()
		run("ev-proto", regCfg)
		cj, cf, ca, cp = cj+c1-c0, cf+c2-c1, ca+c3-c2, cp+cpuSeconds()-c3
	}
	msgs := float64(n * b.N)
	b.ReportMetric(msgs/cj, "json-msgs/cpu-s")
	b.ReportMetric(msgs/cf, "avro-msgs/cpu-s")
	b.ReportMetric(msgs/ca, "avro-go-msgs/cpu-s")
	b.ReportMetric(msgs/cp, "proto-msgs/cpu-s")
	b.ReportMetric(cj/cf, "avro-vs-json")
	b.ReportMetric(cj/ca, "avro-go-vs-json")
	b.ReportMetric(cj/cp, "proto-vs-json")
}
