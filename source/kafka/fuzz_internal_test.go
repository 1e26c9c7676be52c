package kafka

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzDecode: no decoder panics on any message; a JSON object stays a
// valid JSON object with its fields when columns are merged in; DecodeRaw
// always yields an object; DecodeDebezium yields an object row or the
// quarantine array.
func FuzzDecode(f *testing.F) {
	for _, s := range [][2]string{
		{`{"id":1}`, `{"a":1,"b":"x"}`},
		{``, `{}`},
		{`k`, ` { "a" : [1,2] } `},
		{`{"schema":{},"payload":{"id":1}}`, `{"schema":{},"payload":{"op":"c","after":{"id":1}}}`},
		{`{"id":2}`, `{"op":"d","before":null}`},
		{`{"id":3}`, `{"op":"u","after":"nope"}`},
		{"\xff", "\xff\xfe"},
		{`x`, `[1,2]`},
		{`x`, `{"a":1`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		rec := &kgo.Record{Topic: "t", Partition: 3, Offset: 42, Key: key, Value: value, Timestamp: time.UnixMilli(5),
			Headers: []kgo.RecordHeader{{Key: "h", Value: key}}}
		for _, kind := range []Decoder{DecodeJSON, DecodeDebezium, DecodeRaw} {
			for _, cols := range []Columns{0, AllColumns} {
				var d decoder
				d.init(&Config{Decoder: kind, Columns: cols}, "t", 3)
				_, _, payload, ok := d.decode(rec)
				if !ok {
					continue
				}
				var obj map[string]any
				isObj := json.Unmarshal(payload, &obj) == nil
				switch kind {
				case DecodeRaw:
					if !isObj {
						t.Fatalf("raw: payload %q is not an object", payload)
					}
				case DecodeJSON:
					var in map[string]any
					if json.Unmarshal(value, &in) == nil && in != nil {
						if !isObj {
							t.Fatalf("json %q with columns %d: payload %q is not an object", value, cols, payload)
						}
						for k := range in {
							if _, ok := obj[k]; !ok {
								t.Fatalf("json: field %q lost: %q → %q", k, value, payload)
							}
						}
						if cols != 0 && obj["_kafka_offset"] != float64(42) {
							t.Fatalf("json: _kafka_offset missing in %q", payload)
						}
					}
				case DecodeDebezium:
					if !isObj && !strings.HasPrefix(string(payload), `["kafka: bad debezium envelope: `) {
						t.Fatalf("debezium: payload %q is neither a row nor a quarantine array", payload)
					}
				}
			}
		}
	})
}
