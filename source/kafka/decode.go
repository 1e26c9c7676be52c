package kafka

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl/source"
)

// decoder turns messages into records, reusing its buffers: what decode
// returns is valid until the next call (the Emitter copies it).
type decoder struct {
	kind      Decoder
	cols      Columns
	topic     string
	partition int32
	buf       []byte
	key       []byte
	reg       *regDecoder // the registry decoders' part; nil for the others
}

func (d *decoder) init(cfg *Config, topic string, partition int32) {
	d.kind, d.cols, d.topic, d.partition = cfg.Decoder, cfg.Columns, topic, partition
}

// decode returns the record for rec, or ok=false for a message that
// carries none (a tombstone, where the decoder skips them).
func (d *decoder) decode(rec *kgo.Record) (op source.Op, key, payload []byte, ok bool) {
	switch d.kind {
	case DecodeDebezium:
		return d.debezium(rec)
	case DecodeRaw:
		d.buf = append(d.buf[:0], `{"value":`...)
		if rec.Value == nil {
			d.buf = append(d.buf, "null"...)
		} else {
			d.buf = append(d.buf, '"')
			d.buf = base64.StdEncoding.AppendEncode(d.buf, rec.Value)
			d.buf = append(d.buf, '"')
		}
		d.buf = append(d.buf, '}')
		return source.OpInsert, rec.Key, d.withColumns(d.buf, rec), true
	default:
		if rec.Value == nil {
			return 0, nil, nil, false
		}
		return source.OpInsert, rec.Key, d.withColumns(rec.Value, rec), true
	}
}

// withColumns merges the selected _kafka_* fields into doc when it is a
// JSON object (judged by its first and last non-space bytes); anything
// else is returned unchanged, for the engine to quarantine.
func (d *decoder) withColumns(doc []byte, rec *kgo.Record) []byte {
	if d.cols == 0 {
		return doc
	}
	body := bytes.TrimSpace(doc)
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return doc
	}
	inner := bytes.TrimSpace(body[1 : len(body)-1])
	out := make([]byte, 0, len(doc)+128) // not d.buf: doc may live there
	out = append(out, '{')
	first := true
	field := func(name string) {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, '"')
		out = append(out, name...)
		out = append(out, `":`...)
	}
	if d.cols&ColumnTopic != 0 {
		field("_kafka_topic")
		out = appendString(out, d.topic)
	}
	if d.cols&ColumnPartition != 0 {
		field("_kafka_partition")
		out = strconv.AppendInt(out, int64(d.partition), 10)
	}
	if d.cols&ColumnOffset != 0 {
		field("_kafka_offset")
		out = strconv.AppendInt(out, rec.Offset, 10)
	}
	if d.cols&ColumnTimestamp != 0 {
		field("_kafka_timestamp")
		out = strconv.AppendInt(out, rec.Timestamp.UnixMilli(), 10)
	}
	if d.cols&ColumnKey != 0 {
		switch {
		case rec.Key == nil:
			field("_kafka_key")
			out = append(out, "null"...)
		case utf8.Valid(rec.Key):
			field("_kafka_key")
			out = appendString(out, string(rec.Key))
		default:
			field("_kafka_key_base64")
			out = append(out, '"')
			out = base64.StdEncoding.AppendEncode(out, rec.Key)
			out = append(out, '"')
		}
	}
	if d.cols&ColumnHeaders != 0 {
		field("_kafka_headers")
		hs := map[string]string{}
		for _, h := range rec.Headers {
			if utf8.Valid(h.Value) {
				hs[h.Key] = string(h.Value)
			} else {
				hs[h.Key] = base64.StdEncoding.EncodeToString(h.Value)
			}
		}
		b, _ := json.Marshal(hs) // strings only: cannot fail
		out = append(out, b...)
	}
	if len(inner) > 0 {
		out = append(out, ',')
		out = append(out, inner...)
	}
	return append(out, '}')
}

func appendString(out []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string: cannot fail
	return append(out, b...)
}

// envelope is a Debezium change event; with the schema wrapper, the
// event is under Payload.
type envelope struct {
	Schema  json.RawMessage `json:"schema"`
	Payload json.RawMessage `json:"payload"`
	Op      *string         `json:"op"`
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after"`
}

func (d *decoder) debezium(rec *kgo.Record) (source.Op, []byte, []byte, bool) {
	if rec.Value == nil {
		return 0, nil, nil, false // the tombstone after a delete
	}
	var env envelope
	if err := json.Unmarshal(rec.Value, &env); err != nil {
		return d.bad(rec, "value is not JSON: "+err.Error())
	}
	if env.Op == nil && len(env.Payload) > 0 && !isNull(env.Payload) {
		var inner envelope
		if err := json.Unmarshal(env.Payload, &inner); err != nil {
			return d.bad(rec, "payload is not an object")
		}
		env = inner
	}
	if env.Op == nil {
		return d.bad(rec, `no "op" field`)
	}
	key := d.debeziumKey(rec.Key)
	var op source.Op
	var row json.RawMessage
	switch *env.Op {
	case "c", "r":
		op, row = source.OpInsert, env.After
	case "u":
		op, row = source.OpUpdate, env.After
	case "d":
		op, row = source.OpDelete, env.Before
		if isNull(row) {
			row = key
		}
	default:
		return d.bad(rec, "unsupported op "+strconv.Quote(*env.Op))
	}
	if !isObject(row) {
		return d.bad(rec, "op "+strconv.Quote(*env.Op)+" without a row object")
	}
	return op, key, d.withColumns(row, rec), true
}

// debeziumKey returns the key's fields as compact JSON: the message key
// with the schema wrapper removed. A key that is not JSON is used as it is.
func (d *decoder) debeziumKey(k []byte) []byte {
	if len(k) == 0 {
		return nil
	}
	var w struct {
		Schema  json.RawMessage `json:"schema"`
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(k, &w) == nil && len(w.Schema) > 0 && len(w.Payload) > 0 {
		k = w.Payload
	}
	var b bytes.Buffer
	if json.Compact(&b, k) != nil {
		return k
	}
	d.key = append(d.key[:0], b.Bytes()...)
	return d.key
}

// bad returns a record the engine quarantines (a JSON array is never a
// document) that says why and keeps the value.
func (d *decoder) bad(rec *kgo.Record, why string) (source.Op, []byte, []byte, bool) {
	var raw any = string(rec.Value)
	if !utf8.Valid(rec.Value) {
		raw = map[string]string{"base64": base64.StdEncoding.EncodeToString(rec.Value)}
	}
	b, _ := json.Marshal([]any{"kafka: bad debezium envelope: " + why, raw})
	d.buf = append(d.buf[:0], b...)
	return source.OpInsert, rec.Key, d.buf, true
}

func isNull(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || string(b) == "null"
}

// isObject reports whether b is one valid JSON object. (The rows of a
// parsed envelope are valid JSON already; the check matters for a key
// used as a delete's row.)
func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) >= 2 && b[0] == '{' && json.Valid(b)
}
