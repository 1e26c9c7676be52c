package parquet_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// codecRows is the rows of each workload of BenchmarkCodecs.
const codecRows = 262_144

// codecWorkloads returns the engine's output for the three workloads of
// the writer measurements, in batches of 8192 rows as the runner pushes
// them: the Kafka benchmark's JSON events, the 16-column Postgres table
// of make bench-compare (bench16, as declared rows in the source's text
// form, keyed by id) and faker orders.
func codecWorkloads(b *testing.B) map[string][]arrow.RecordBatch {
	b.Helper()
	pad := strings.Repeat("x", 120)
	pgSpec := engine.StreamSpec{Name: "bench16", Declared: true, Types: source.TypesPostgres, Keyed: true, Key: []string{"id"}}
	for _, c := range [][2]string{{"id", "int8"}, {"a", "int4"}, {"b", "int8"}, {"c", "float8"}, {"d", "numeric(12,2)"},
		{"e", "text"}, {"f", "bool"}, {"g", "timestamptz"}, {"h", "date"}, {"i", "uuid"}, {"j", "text"}, {"k", "int2"},
		{"l", "float4"}, {"m", "varchar(32)"}, {"n", "int8"}, {"o", "timestamp"}} {
		pgSpec.Columns = append(pgSpec.Columns, engine.Column{Name: c[0], Type: c[1], Nullable: true})
	}
	fk, err := faker.New(faker.Config{Rows: codecRows, Streams: []string{faker.Orders}})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)
	d0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	gen := map[string]func(g int64, buf []byte) (key, payload []byte){
		"kafka": func(g int64, buf []byte) ([]byte, []byte) {
			return nil, fmt.Appendf(buf, `{"id":%d,"name":"customer %d","amount":%d.25,"ok":true,"pad":%q}`, g, g, g%1000, pad)
		},
		"bench16": func(g int64, buf []byte) ([]byte, []byte) {
			v := func(s string) { buf = source.AppendRowValue(buf, []byte(s)) }
			v(fmt.Sprint(g))
			v(fmt.Sprint(g % 100000))
			v(fmt.Sprint(g * 7919))
			v(fmt.Sprint(float64(g) / 7.0))
			v(fmt.Sprintf("%d.%02d", (g%1000000)/100, (g%1000000)%100))
			v(fmt.Sprintf("customer %d", g))
			v(fmt.Sprint(g%3 == 0))
			v(t0.Add(time.Duration(g) * time.Second).Format("2006-01-02 15:04:05-07"))
			v(d0.AddDate(0, 0, int(g%3000)).Format("2006-01-02"))
			h := md5.Sum(strconv.AppendInt(nil, g, 10))
			v(fmt.Sprintf("%x-%x-%x-%x-%x", h[:4], h[4:6], h[6:8], h[8:10], h[10:]))
			v(strings.Repeat("x", int(g%40)))
			v(fmt.Sprint(g % 30000))
			v(fmt.Sprint(float32(g%1000) / 8))
			v(fmt.Sprintf("status-%d", g%7))
			v(fmt.Sprint(g * 31))
			v(t1.Add(time.Duration(g) * time.Millisecond).Format("2006-01-02 15:04:05.000"))
			return fmt.Appendf(nil, "%d", g), buf
		},
		faker.Orders: func(g int64, buf []byte) ([]byte, []byte) {
			_, _, key, payload := fk.Generate(faker.Orders, g, buf)
			return key, payload
		},
	}
	e, err := engine.New(engine.Config{Streams: []engine.StreamSpec{pgSpec}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	out := map[string][]arrow.RecordBatch{}
	var rb engine.RawBatch
	var buf []byte
	for name, g := range gen {
		rb.Stream = name
		for i := int64(1); i <= codecRows; i++ {
			key, payload := g(i, buf[:0])
			rb.Append(uint8(source.OpInsert), i, key, payload)
			buf = payload
			if rb.Len() == 8192 || i == codecRows {
				o, err := e.Push(&rb, t0)
				if err != nil {
					b.Fatal(err)
				}
				if len(o.Quarantined) != 0 {
					b.Fatalf("%s: quarantined %+v", name, o.Quarantined[0])
				}
				out[name] = append(out[name], o.Record)
				rb.Reset()
			}
		}
	}
	b.Cleanup(func() {
		for _, recs := range out {
			for _, r := range recs {
				r.Release()
			}
		}
	})
	if dir := os.Getenv("OPENETL_BENCH_IPC_DIR"); dir != "" {
		for name, recs := range out {
			writeIPC(b, filepath.Join(dir, name+".arrow"), recs)
		}
	}
	return out
}

func writeIPC(b *testing.B, path string, recs []arrow.RecordBatch) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(recs[0].Schema()), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkCodecs writes the engine's output for three workloads
// (codecWorkloads) through the destination, into an in-memory bucket,
// under each codec setting and with each encoder (arrow-go, the
// engine; named last): Write, PreCommit and Commit of one epoch, as a
// lane does. It reports CPU nanoseconds a row (this process's,
// over the loop) and file bytes a row. With OPENETL_BENCH_IPC_DIR set it
// also writes each workload as an Arrow IPC file there, for the arrow-rs
// writer's measurement of the same batches (scripts/bench-parquet.sh).
func BenchmarkCodecs(b *testing.B) {
	workloads := codecWorkloads(b)
	variants := []struct {
		name string
		cfg  parquet.Config
	}{
		{"zstd-3", parquet.Config{CompressionLevel: 3}},
		{"zstd-1", parquet.Config{CompressionLevel: 1}},
		{"zstd-6", parquet.Config{CompressionLevel: 6}},
		{"snappy", parquet.Config{Compression: parquet.Snappy}},
		{"lz4raw", parquet.Config{Compression: parquet.Lz4Raw}},
		{"none", parquet.Config{Compression: parquet.Uncompressed}},
		{"zstd-1-dictall", parquet.Config{CompressionLevel: 1, Dictionary: parquet.DictionaryAll}},
		{"zstd-1-dictnone", parquet.Config{CompressionLevel: 1, Dictionary: parquet.DictionaryNone}},
	}
	encoders := []parquet.Encoder{parquet.EncoderArrowGo}
	if engine.ParquetAvailable() {
		encoders = append(encoders, parquet.EncoderEngine)
	}
	for _, wl := range []string{"kafka", "bench16", faker.Orders} {
		recs := workloads[wl]
		for _, v := range variants {
			for _, enc := range encoders {
				b.Run(wl+"/"+v.name+"/"+enc.String(), func(b *testing.B) {
					codecRun(b, recs, wl, v.cfg, enc)
				})
			}
		}
	}
}

// codecRun is one sub-benchmark of BenchmarkCodecs.
func codecRun(b *testing.B, recs []arrow.RecordBatch, wl string, cfg parquet.Config, enc parquet.Encoder) {
	ctx := context.Background()
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	cfg.Encoder = enc
	cfg.Bucket = bucket
	d, err := parquet.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var fileBytes int64
	c0 := cpuNanos()
	for i := 0; b.Loop(); i++ {
		w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: fmt.Sprintf("p%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Recover(ctx, 1, nil); err != nil {
			b.Fatal(err)
		}
		stream := fmt.Sprintf("%s%d", wl, i)
		for _, r := range recs {
			if err := w.Write(ctx, stream, r); err != nil {
				b.Fatal(err)
			}
		}
		c, err := w.PreCommit(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
			b.Fatal(err)
		}
		w.Close(ctx)
		m, err := parquet.ReadManifest(ctx, bucket, "", stream)
		if err != nil {
			b.Fatal(err)
		}
		fileBytes = 0
		for _, f := range m.Files {
			fileBytes += f.Bytes
		}
	}
	rows := float64(codecRows) * float64(b.N)
	b.ReportMetric(float64(cpuNanos()-c0)/rows, "cpu-ns/row")
	b.ReportMetric(float64(fileBytes)/codecRows, "B/row")
}
