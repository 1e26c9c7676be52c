package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
)

// avroSchema is the benchmark message (message) as an Avro record: the
// same nine fields and values, ts as timestamp-micros.
const avroSchema = `{"type":"record","name":"Event","namespace":"openetl.bench","fields":[
 {"name":"id","type":"long"},
 {"name":"user","type":"string"},
 {"name":"event","type":"string"},
 {"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"amount","type":"double"},
 {"name":"ok","type":"boolean"},
 {"name":"ratio","type":"double"},
 {"name":"country","type":"string"},
 {"name":"note","type":"string"}]}`

// benchTS is the day and hour of every message's ts.
var benchTS = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func appendString(dst []byte, s string) []byte {
	return append(appendLong(dst, int64(len(s))), s...)
}

func appendDouble(dst []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
}

// avroMessage appends the i-th benchmark message in a registry's wire
// format (magic byte, schema id, Avro body), the values of message(i).
// Encoded by hand (the producer's time is not what is measured);
// checkAvroMessages holds it to twmb/avro's encoding of message's JSON.
func avroMessage(dst []byte, id int, i int64) []byte {
	dst = binary.BigEndian.AppendUint32(append(dst, 0), uint32(id))
	dst = appendLong(dst, i)
	dst = appendLong(dst, int64(len("user-"))+int64(digits(i%100_000)))
	dst = append(dst, "user-"...)
	dst = strconv.AppendInt(dst, i%100_000, 10)
	dst = appendString(dst, [...]string{"view", "click", "purchase", "refund"}[i%4])
	dst = appendLong(dst, benchTS.Add(time.Duration(10+i%50)*time.Minute).UnixMicro())
	dst = appendDouble(dst, float64(i%10_000)+0.25)
	ok := byte(0)
	if i%3 != 0 {
		ok = 1
	}
	dst = append(dst, ok)
	dst = appendDouble(dst, float64(1000+i%9000)/10000)
	dst = appendString(dst, [...]string{"DE", "FR", "US", "JP", "BR"}[i%5])
	return appendString(dst, "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor")
}

func digits(v int64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// checkAvroMessages: the first n hand-encoded messages are byte for byte
// what twmb/avro encodes from the values of message's JSON, so the Avro
// and JSON topics carry the same logical messages.
func checkAvroMessages(n int64) error {
	sch, err := avro.Parse(avroSchema)
	if err != nil {
		return err
	}
	var jb, ab []byte
	for i := int64(1); i <= n; i++ {
		jb = message(jb[:0], i)
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(jb))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return err
		}
		ts, err := time.Parse(time.RFC3339, m["ts"].(string))
		if err != nil {
			return err
		}
		num := func(k string) float64 { f, _ := m[k].(json.Number).Float64(); return f }
		id, _ := m["id"].(json.Number).Int64()
		want, err := sch.AppendEncode(binary.BigEndian.AppendUint32([]byte{0}, 7), map[string]any{
			"id": id, "user": m["user"], "event": m["event"], "ts": ts, "amount": num("amount"),
			"ok": m["ok"], "ratio": num("ratio"), "country": m["country"], "note": m["note"]})
		if err != nil {
			return err
		}
		if ab = avroMessage(ab[:0], 7, i); !bytes.Equal(ab, want) {
			return fmt.Errorf("avro message %d: encoded %x, twmb/avro %x", i, ab, want)
		}
	}
	return nil
}

// registerAvro registers avroSchema under topic's value subject and
// returns its id.
func registerAvro(ctx context.Context, url, topic string) (int, error) {
	rcl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		return 0, err
	}
	ss, err := rcl.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: avroSchema})
	if err != nil {
		return 0, fmt.Errorf("registering the schema: %w", err)
	}
	return ss.ID, nil
}
