package engine_test

import (
	"testing"
	"time"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source/faker"
)

// BenchmarkPushFaker pushes 4096 faker documents per stream, once with
// nested values (objects and arrays) built as Arrow structs and lists
// ("structs") and once with them kept as JSON text ("text"), so the cost
// of the nested path shows against the flat one. It reports rows/s.
func BenchmarkPushFaker(b *testing.B) {
	for _, stream := range []string{faker.Customers, faker.Orders} {
		b.Run(stream, func(b *testing.B) {
			src, _ := faker.New(faker.Config{Rows: 4096})
			var rb engine.RawBatch
			rb.Stream = stream
			var buf []byte
			for i := range int64(4096) {
				op, seq, key, payload := src.Generate(stream, i, buf)
				rb.Append(uint8(op), seq, key, payload)
				buf = key[:0]
			}
			for _, nested := range []bool{false, true} {
				name := "structs"
				if nested {
					name = "text"
				}
				b.Run(name, func(b *testing.B) {
					e, err := engine.New(engine.Config{Streams: []engine.StreamSpec{{Name: stream, NestedAsText: nested}}})
					if err != nil {
						b.Fatal(err)
					}
					defer e.Close()
					b.SetBytes(int64(rb.Bytes()))
					for b.Loop() {
						out, err := e.Push(&rb, time.Now())
						if err != nil {
							b.Fatal(err)
						}
						out.Record.Release()
					}
					b.ReportMetric(float64(b.N*4096)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		})
	}
}
