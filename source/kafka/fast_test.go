package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/openetl/etl/source/kafka"
)

const (
	fastV1 = `{"type":"record","name":"Ev","namespace":"openetl.fast","fields":[
 {"name":"id","type":"long"},{"name":"n","type":"int"},{"name":"f","type":"float"},
 {"name":"ok","type":"boolean"},{"name":"name","type":"string"},{"name":"raw","type":"bytes"},
 {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"ltu","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
 {"name":"opt","type":["null","string"],"default":null}]}`
	// fastV2 promotes n to long and f to double and adds a field.
	fastV2 = `{"type":"record","name":"Ev","namespace":"openetl.fast","fields":[
 {"name":"id","type":"long"},{"name":"n","type":"long"},{"name":"f","type":"double"},
 {"name":"ok","type":"boolean"},{"name":"name","type":"string"},{"name":"raw","type":"bytes"},
 {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"ltu","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
 {"name":"opt","type":["null","string"],"default":null},
 {"name":"added","type":["null","long"],"default":null}]}`
)

// TestFastPathRealServers: flat Avro messages through Apache Kafka and
// Apicurio Registry (its Confluent-compatible API), one schema evolved
// mid-topic (int → long, float → double, a field added, then the old
// version again) with a truncated message and a keyless one among them,
// read by two pipelines into Parquet: one with the engine's Avro fast
// path, one with the Go decoder's rows only. pyarrow reads back the same
// values (a widened table), the same quarantine lines, and the Go path's
// expected values for a few rows.
func TestFastPathRealServers(t *testing.T) {
	brokers := realBrokers(t)
	url := realRegistry(t)
	rcl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	topic := fmt.Sprintf("fast-%d", time.Now().UnixNano())
	cl := newClient(t, brokers)
	createTopic(t, cl, topic, 2)
	var ids [2]int
	var schs [2]*avro.Schema
	for i, s := range []string{fastV1, fastV2} {
		ss, err := rcl.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: s})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = ss.ID
		if schs[i], err = avro.Parse(s); err != nil {
			t.Fatal(err)
		}
	}
	value := func(v, i int) []byte {
		m := map[string]any{"id": int64(i), "n": int32(i * 7), "f": float32(i) + 0.5, "ok": i%2 == 0,
			"name": fmt.Sprintf("name %d ü", i), "raw": []byte{byte(i), 0, 0xff}, "color": []string{"RED", "GREEN"}[i%2],
			"day": int32(19000 + i), "tm": int32(i * 1000), "tsm": int64(1_700_000_000_000 + i), "ltu": int64(1_700_000_000_000_000 + i),
			"uid": fmt.Sprintf("123e4567-e89b-12d3-a456-%012d", i), "opt": nil}
		if i%3 == 0 {
			m["opt"] = fmt.Sprintf("o%d", i)
		}
		if v == 1 {
			m["n"], m["f"], m["added"] = int64(i)<<33, float64(i)+0.1, nil
			if i%2 == 0 {
				m["added"] = int64(-i)
			}
		}
		b, err := schs[v].AppendEncode(binary.BigEndian.AppendUint32([]byte{0}, uint32(ids[v])), m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var recs []*kgo.Record
	for i := range 300 {
		v := 0
		if i >= 100 && i < 200 {
			v = 1
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i), Value: value(v, i)})
	}
	bad := value(0, 1000)
	recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("bad"), Value: bad[:len(bad)-3]},
		&kgo.Record{Topic: topic, Partition: 1, Value: value(1, 1001)}) // keyless: the Go path
	produce(t, cl, recs...)

	cols := []string{"id", "n", "f", "ok", "name", "raw", "color", "day", "tm", "tsm", "ltu", "uid", "opt", "added"}
	run := func(fast bool) ([][]string, []map[string]any) {
		defer kafka.SetFastPath(fast)()
		dir := t.TempDir()
		res, err := syncOnce(ctx, brokers, topic, dir, kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl})
		if err != nil {
			t.Fatal(err)
		}
		if c := res.Streams[topic]; c.Read != 302 || c.Written != 301 || c.Quarantined != 1 {
			t.Fatalf("fast %v: counts %+v", fast, c)
		}
		q := quarantineLines(t, filepath.Join(dir, "checkpoints"), pipelineName, topic)
		for _, l := range q {
			delete(l, "epoch") // when it was staged
			delete(l, "generation")
		}
		rows := parquetRows(t, filepath.Join(dir, "tables"), topic, cols...)
		sortRows(rows)
		return rows, q
	}
	before := kafka.FastGoRows()
	fastRows, fastQ := run(true)
	// Batches of 512: the one with the bad message fell back to Go, the
	// others were decoded by the engine.
	if n := kafka.FastGoRows() - before; n == 0 || n > 200 {
		t.Fatalf("%d of 301 fast path messages written by the Go decoder", n)
	} else {
		t.Logf("%d of 301 fast path messages written by the Go decoder", n)
	}
	goRows, goQ := run(false)
	if len(fastRows) != 301 || !reflect.DeepEqual(fastRows, goRows) {
		for i := range min(len(fastRows), len(goRows)) {
			if !reflect.DeepEqual(fastRows[i], goRows[i]) {
				t.Fatalf("row %d\n fast %v\n go   %v", i, fastRows[i], goRows[i])
			}
		}
		t.Fatalf("%d rows fast, %d go", len(fastRows), len(goRows))
	}
	if !reflect.DeepEqual(fastQ, goQ) || len(fastQ) != 1 {
		t.Fatalf("quarantine\n fast %v\n go   %v", fastQ, goQ)
	}
	// A v1 row in the widened table and a v2 row, as pyarrow reads them.
	for _, want := range [][]string{
		{"3", "21", "3.5", "False", "name 3 ü", "b'\\x03\\x00\\xff'", "GREEN", "2022-01-11", "00:00:03", "2023-11-14 22:13:20.003000+00:00", "2023-11-14 22:13:20.000003", `b'\x12>Eg\xe8\x9b\x12\xd3\xa4V\x00\x00\x00\x00\x00\x03'`, "o3", "<nil>"},
		{"102", "876173328384", "102.1", "True", "name 102 ü", "b'f\\x00\\xff'", "RED", "2022-04-20", "00:01:42", "2023-11-14 22:13:20.102000+00:00", "2023-11-14 22:13:20.000102", `b'\x12>Eg\xe8\x9b\x12\xd3\xa4V\x00\x00\x00\x00\x01\x02'`, "o102", "-102"},
	} {
		found := false
		for _, r := range fastRows {
			found = found || reflect.DeepEqual(r, want)
		}
		if !found {
			for _, r := range fastRows {
				if r[0] == want[0] {
					t.Errorf("row %q, want %q", r, want)
				}
			}
		}
	}
}

// sortRows sorts rows by their text.
func sortRows(rows [][]string) {
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(strings.Join(a, "\x00"), strings.Join(b, "\x00")) })
}
