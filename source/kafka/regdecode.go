package kafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// regDecoder decodes one split's registry-framed messages (the Confluent
// wire format: a zero byte, the schema ID as 4 bytes big-endian, for
// Protobuf the message index, then the Avro binary, Protobuf binary or
// JSON value) into rows of the stream's declared columns.
type regDecoder struct {
	sch       *schemas
	topic     string
	debezium  bool
	cols      []avrorow.Col // the stream's declared columns this attempt, but Config.Columns'
	cols0     Columns       // Config.Columns: metadata columns after cols
	partition int32

	vals    decoders // value decoders
	keys    decoders // key decoders (JSON text); nil: keep the key's bytes
	keyRows decoders // key schemas' decoders into rows of cols (Debezium deletes)

	buf, key, bad, hexKey []byte
	idx                   []int // scratch for message indexes
}

// maxDecoders bounds a split's decoders of each kind; past it they are
// dropped and made again as needed.
const maxDecoders = 256

// msgDecoder is a split's decoder of the messages of one schema ID (and
// Protobuf message type), or why they can't be decoded (bad); dec nil
// with no bad: a key kept as its bytes.
type msgDecoder struct {
	dec avrorow.RowDecoder
	bad string
	// fast is the engine's Avro fast path registration of dec (see
	// fast.go) when fastOK; otherwise its messages take the Go path.
	fast   uint64
	fastOK bool
}

// decoders is a split's decoders of one kind by schema ID, then by
// Protobuf message index bytes ("" for the other schema types).
type decoders struct {
	ids map[int]*idDecoders
	n   int
	// The last one found, for a run of messages of one schema.
	lastID  int
	lastIdx []byte
	last    *msgDecoder
}

type idDecoders struct {
	e     *schemaEntry
	byIdx map[string]*msgDecoder
}

// decoder kinds, for lookup.
const (
	kindValue = iota
	kindKey
	kindKeyRow
)

func newRegDecoder(sch *schemas, topic string, partition int32, cols []avrorow.Col, meta Columns) *regDecoder {
	return &regDecoder{sch: sch, topic: topic, partition: partition, debezium: sch.debezium, cols: cols, cols0: meta}
}

// framed returns the schema ID of a value in the wire format.
func framed(b []byte) (int, bool) {
	if len(b) < 5 || b[0] != 0 {
		return 0, false
	}
	return int(int32(binary.BigEndian.Uint32(b[1:5]))), true
}

// badIndex is the answer for a Protobuf message whose index can't be
// read.
var badIndex = &msgDecoder{bad: "protobuf message index unreadable"}

// lookup returns c's decoder of schema id for a message whose bytes
// after the ID are body, and the bytes after the message index; the
// decoder is made (of kind) the first time.
func (d *regDecoder) lookup(ctx context.Context, c *decoders, kind, id int, body []byte) (*msgDecoder, []byte, error) {
	if c.last != nil && c.lastID == id && bytes.HasPrefix(body, c.lastIdx) {
		return c.last, body[len(c.lastIdx):], nil
	}
	ids, ok := c.ids[id]
	if !ok {
		e, err := d.sch.byID(ctx, d.topic, id)
		if err != nil {
			return nil, nil, err
		}
		ids = &idDecoders{e: e, byIdx: map[string]*msgDecoder{}}
		if c.ids == nil {
			c.ids = map[int]*idDecoders{}
		}
		c.ids[id] = ids
	}
	n := 0
	if ids.e.proto != nil {
		if d.idx, n = avrorow.MessageIndex(body, d.idx); n == 0 {
			return badIndex, body, nil
		}
	}
	md, ok := ids.byIdx[string(body[:n])]
	if !ok {
		var err error
		if md, err = d.make(ids.e, kind, id, d.idx); err != nil {
			return nil, nil, err
		}
		if c.n >= maxDecoders {
			c.ids, c.n = map[int]*idDecoders{id: ids}, 0
			clear(ids.byIdx)
		}
		c.n++
		ids.byIdx[string(body[:n])] = md
	}
	c.lastID, c.lastIdx, c.last = id, append(c.lastIdx[:0], body[:n]...), md
	return md, body[n:], nil
}

// make makes the decoder of kind for schema entry e (message type idx,
// for Protobuf).
func (d *regDecoder) make(e *schemaEntry, kind, id int, idx []int) (*msgDecoder, error) {
	if e.proto == nil {
		idx = nil
	}
	switch kind {
	case kindValue:
		s, why := e.value(d.debezium, idx)
		if s == nil {
			return &msgDecoder{bad: why}, nil
		}
		var key string
		if e.proto != nil {
			key = string(avrorow.AppendMessageIndex(nil, idx))
		}
		d.sch.saw(d.topic, id, key)
		if !avrorow.Covers(d.cols, s.Cols()) {
			return nil, &SchemaChangeError{Topic: d.topic, ID: id}
		}
		dec, err := s.RowDecoder(d.cols)
		if err != nil {
			return nil, err
		}
		md := &msgDecoder{dec: dec}
		if !d.debezium {
			md.fast, md.fastOK = fastPath(s, d.cols, dec, id)
		}
		return md, nil
	case kindKey:
		s, _ := e.plainValue(idx)
		if s != nil {
			if dec, err := s.RowDecoder(s.Cols()); err == nil {
				return &msgDecoder{dec: dec}, nil
			}
		}
	case kindKeyRow:
		s, _ := e.plainValue(idx)
		if s != nil && avrorow.Covers(d.cols, s.Cols()) {
			if dec, err := s.RowDecoder(d.cols); err == nil {
				return &msgDecoder{dec: dec}, nil
			}
		}
	}
	return &msgDecoder{}, nil
}

// decode returns the record for rec; ok is false for a tombstone. An
// undecodable message is a record the engine quarantines (see badRow);
// err is a *RegistryError (the registry could not be asked) or a
// *SchemaChangeError (the stream's columns must grow first).
func (d *regDecoder) decode(ctx context.Context, rec *kgo.Record) (op source.Op, key, payload []byte, ok bool, err error) {
	if rec.Value == nil {
		return 0, nil, nil, false, nil
	}
	id, isFramed := framed(rec.Value)
	if !isFramed {
		b := byte(0)
		if len(rec.Value) > 0 {
			b = rec.Value[0]
		}
		return d.badRow(rec, fmt.Sprintf("value not in the registry wire format (%d bytes, first 0x%02x)", len(rec.Value), b))
	}
	md, body, err := d.lookup(ctx, &d.vals, kindValue, id, rec.Value[5:])
	if err != nil {
		return 0, nil, nil, false, err
	}
	if md.dec == nil {
		return d.badRow(rec, md.bad)
	}
	if key, err = d.decodeKey(ctx, rec.Key); err != nil {
		return 0, nil, nil, false, err
	}
	if md.fastOK && len(key) > 0 {
		// Decoded by the engine (fast.go); a keyless message's record ID
		// hashes its payload, so it always takes the Go path.
		var raw []byte
		if !bytes.Equal(key, rec.Key) {
			raw = rec.Key
		}
		d.buf = d.meta(engine.AppendAvroRow(d.buf[:0], md.fast, raw, body), rec)
		return source.OpInsert, key, d.buf, true, nil
	}
	if !d.debezium {
		if d.buf, err = md.dec.Row(d.buf[:0], body); err != nil {
			return d.badRow(rec, fmt.Sprintf("schema id %d: %v", id, err))
		}
		d.buf = d.meta(d.buf, rec)
		return source.OpInsert, key, d.buf, true, nil
	}
	dec := md.dec.(*avrorow.Decoder) // envelopes are Avro's
	opText, before, after, err := dec.Envelope(body)
	if err != nil {
		return d.badRow(rec, fmt.Sprintf("schema id %d: %v", id, err))
	}
	d.buf = d.buf[:0]
	switch string(opText) {
	case "c", "r":
		if !after {
			return d.badRow(rec, "op "+string(opText)+" without an after row")
		}
		d.buf = d.meta(dec.AppendRow(d.buf, 1), rec)
		return source.OpInsert, key, d.buf, true, nil
	case "u":
		if !after {
			return d.badRow(rec, "op u without an after row")
		}
		d.buf = d.meta(dec.AppendRow(d.buf, 1), rec)
		return source.OpUpdate, key, d.buf, true, nil
	case "d":
		if before {
			d.buf = d.meta(dec.AppendRow(d.buf, 0), rec)
			return source.OpDelete, key, d.buf, true, nil
		}
		// No before image: the key's fields are the row (others null),
		// or, when the key can't be a row, an empty payload (all null).
		row, err := d.keyRow(ctx, rec.Key)
		if err != nil {
			return 0, nil, nil, false, err
		}
		if len(row) == 0 && d.cols0 != 0 {
			for range d.cols {
				row = source.AppendRowNull(row)
			}
		}
		if d.cols0 != 0 {
			row = d.meta(row, rec)
		}
		d.buf = row
		return source.OpDelete, key, row, true, nil
	}
	return d.badRow(rec, fmt.Sprintf("unsupported op %q", opText))
}

// decodeKey returns the record's key: a framed key with a schema as
// compact JSON text ({"id":42} for a record key, 42 for a long), any
// other key as its bytes.
func (d *regDecoder) decodeKey(ctx context.Context, k []byte) ([]byte, error) {
	id, ok := framed(k)
	if !ok {
		return k, nil
	}
	md, body, err := d.lookup(ctx, &d.keys, kindKey, id, k[5:])
	if err != nil {
		return nil, err
	}
	if md.dec == nil {
		return k, nil
	}
	out, err := md.dec.JSON(d.key[:0], body)
	if err != nil {
		return k, nil // not the key's schema after all: its bytes
	}
	d.key = out
	return out, nil
}

// keyRow returns a row of d.cols holding a framed key's fields, for a
// Debezium delete without a before image; an empty payload (all columns
// null) when the key can't be one.
func (d *regDecoder) keyRow(ctx context.Context, k []byte) ([]byte, error) {
	id, ok := framed(k)
	if !ok {
		return d.buf[:0], nil
	}
	md, body, err := d.lookup(ctx, &d.keyRows, kindKeyRow, id, k[5:])
	if err != nil {
		return nil, err
	}
	if md.dec == nil {
		return d.buf[:0], nil
	}
	row, err := md.dec.Row(d.buf[:0], body)
	if err != nil {
		return d.buf[:0], nil
	}
	d.buf = row
	return row, nil
}

// meta appends the entries of the Config.Columns columns of rec to row,
// in declared order (Columns.declared).
func (d *regDecoder) meta(row []byte, rec *kgo.Record) []byte {
	c := d.cols0
	if c == 0 {
		return row
	}
	if c&ColumnKey != 0 {
		if rec.Key == nil {
			row = source.AppendRowNull(row)
		} else {
			d.hexKey = hex.AppendEncode(append(d.hexKey[:0], '\\', 'x'), rec.Key)
			row = source.AppendRowValue(row, d.hexKey)
		}
	}
	if c&ColumnHeaders != 0 {
		hs := map[string]string{}
		for _, h := range rec.Headers {
			if utf8.Valid(h.Value) {
				hs[h.Key] = string(h.Value)
			} else {
				hs[h.Key] = base64.StdEncoding.EncodeToString(h.Value)
			}
		}
		b, _ := json.Marshal(hs) // strings only: cannot fail
		row = source.AppendRowValue(row, b)
	}
	var num [20]byte
	if c&ColumnPartition != 0 {
		row = source.AppendRowValue(row, strconv.AppendInt(num[:0], int64(d.partition), 10))
	}
	if c&ColumnOffset != 0 {
		row = source.AppendRowValue(row, strconv.AppendInt(num[:0], rec.Offset, 10))
	}
	if c&ColumnTimestamp != 0 {
		row = source.AppendRowValue(row, strconv.AppendInt(num[:0], rec.Timestamp.UnixMilli(), 10))
	}
	if c&ColumnTopic != 0 {
		row = source.AppendRowValue(row, []byte(d.topic))
	}
	return row
}

// declared returns the declared columns of c for the registry decoders,
// in the order meta writes them.
func (c Columns) declared() []source.Column {
	var out []source.Column
	for _, m := range []struct {
		bit       Columns
		name, typ string
	}{
		{ColumnKey, "_kafka_key", "bytea"}, {ColumnHeaders, "_kafka_headers", "jsonb"},
		{ColumnPartition, "_kafka_partition", "int4"}, {ColumnOffset, "_kafka_offset", "int8"},
		{ColumnTimestamp, "_kafka_timestamp", "int8"}, {ColumnTopic, "_kafka_topic", "text"},
	} {
		if c&m.bit != 0 {
			out = append(out, source.Column{Name: m.name, Type: m.typ, Nullable: true})
		}
	}
	return out
}

// maxBadText is the most text a bad record's payload carries (see
// badRow).
const maxBadText = 124

// badRow returns a record the engine quarantines (reason parse_error,
// "row payload: entry runs past the payload"), keeping the message's key
// and, as its payload's text, why it could not be decoded: a first entry
// whose header (0x7f: a value of 125 bytes) promises more bytes than
// follow, then "kafka: <why>" in printable ASCII, at most maxBadText
// bytes. The quarantine line's split (topic/partition) and seq
// (Position: the offset) find the message itself.
func (d *regDecoder) badRow(rec *kgo.Record, why string) (source.Op, []byte, []byte, bool, error) {
	d.bad = appendBad(d.bad[:0], why)
	return source.OpInsert, rec.Key, d.bad, true, nil
}

// appendBad appends the payload of badRow's record to dst.
func appendBad(dst []byte, why string) []byte {
	dst = append(dst, 0x7f)
	start := len(dst)
	for _, c := range []byte("kafka: " + why) {
		if len(dst)-start+1 > maxBadText {
			break
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		dst = append(dst, c)
	}
	return dst
}
