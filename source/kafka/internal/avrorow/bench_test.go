package avrorow

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The benchmark event (source/kafka's bench_avro_test.go): an id, a
// short name, an amount, a flag and a 120-byte pad, in each format.
const (
	benchAvro  = `{"type":"record","name":"Event","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"amount","type":"double"},{"name":"ok","type":"boolean"},{"name":"pad","type":"string"}]}`
	benchProto = `syntax = "proto3"; message Event { int64 id = 1; string name = 2; double amount = 3; bool ok = 4; string pad = 5; }`
	benchJSON  = `{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"},"amount":{"type":"number"},"ok":{"type":"boolean"},"pad":{"type":"string"}}}`
)

func benchProtoEvent(i int, pad string) []byte {
	var b []byte
	b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(i))
	b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), fmt.Sprintf("customer %d", i))
	b = protowire.AppendFixed64(protowire.AppendTag(b, 3, protowire.Fixed64Type), math.Float64bits(float64(i%1000)+0.25))
	b = protowire.AppendVarint(protowire.AppendTag(b, 4, protowire.VarintType), 1)
	return protowire.AppendString(protowire.AppendTag(b, 5, protowire.BytesType), pad)
}

// BenchmarkDecodeRow: one event decoded into a declared row by each
// format's decoder (the Go side of DecodeRegistry; the engine's push is
// not included).
func BenchmarkDecodeRow(b *testing.B) {
	const n = 1024
	pad := strings.Repeat("x", 120)
	var avros, protos, jsons [][]byte
	for i := range n {
		avros = append(avros, encode(b, benchAvro, map[string]any{"id": int64(i), "name": fmt.Sprintf("customer %d", i),
			"amount": float64(i%1000) + 0.25, "ok": true, "pad": pad}))
		protos = append(protos, benchProtoEvent(i, pad))
		jsons = append(jsons, fmt.Appendf(nil, `{"id":%d,"name":"customer %d","amount":%d.25,"ok":true,"pad":%q}`, i, i, i%1000, pad))
	}
	as := mustParse(b, benchAvro, false)
	ad, _ := NewDecoder(as, as.Cols())
	ps, err := mustProto(b, benchProto).Message([]int{0})
	if err != nil {
		b.Fatal(err)
	}
	pd, _ := ps.NewDecoder(ps.Cols())
	js, err := ParseJSONSchema(benchJSON, nil)
	if err != nil {
		b.Fatal(err)
	}
	jd, _ := js.NewDecoder(js.Cols())
	for _, c := range []struct {
		name string
		dec  RowDecoder
		msgs [][]byte
	}{{"avro", ad, avros}, {"protobuf", pd, protos}, {"jsonschema", jd, jsons}} {
		b.Run(c.name, func(b *testing.B) {
			var dst []byte
			var err error
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if dst, err = c.dec.Row(dst[:0], c.msgs[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
