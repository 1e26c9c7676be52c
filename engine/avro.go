package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// AvroRows turns one message's Avro body into the row payload the Go
// decoder gives the same message (AppendRow entries of the plan's
// columns, appended to dst), or, when it can't (ok false), into the
// complete payload of the record the source would quarantine instead. It
// must be safe for concurrent use.
type AvroRows func(dst, body []byte) (row []byte, ok bool)

// maxAvroConverters bounds the converters a process registers; past it
// RegisterAvro refuses new ones (their messages take the Go path).
const maxAvroConverters = 4096

// avroMarker starts a row payload that holds an Avro body: ten 0xff
// bytes, an entry header no row payload can start with (it overflows).
var avroMarker = [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

type avroConv struct {
	rows AvroRows
}

var avroReg struct {
	sync.RWMutex
	byKey map[string]uint32
	convs []avroConv
}

// RegisterAvro registers the Avro fast path of one writer schema for a
// source that decodes registry-framed Avro (source/kafka's
// DecodeRegistry): plan is the schema's compiled plan into the stream's
// declared columns (avrorow's Decoder.FastPlan), rows the Go decoder of
// the same messages, used for a batch the fast path leaves to Go. key
// names what rows depends on beyond plan (the topic and schema ID); the
// same key and plan get the same IDs. ok is false when the fast path is
// not available (no Rust engine in this build, a plan it refuses, or the
// process's bound of registrations reached): the source then pushes the
// Go decoder's rows itself.
//
// Rows of the fast path are payloads AppendAvroRow makes; the Rust engine
// decodes them straight into Arrow, exactly as it would coerce the Go
// decoder's row (tested differentially in source/kafka).
func RegisterAvro(key string, plan []byte, rows AvroRows) (id uint64, ok bool) {
	k := key + "\x00" + string(plan)
	avroReg.RLock()
	c, found := avroReg.byKey[k]
	avroReg.RUnlock()
	if found {
		p, err := registerAvroPlan(plan)
		if err != nil {
			return 0, false
		}
		return uint64(p)<<32 | uint64(c), true
	}
	p, err := registerAvroPlan(plan)
	if err != nil {
		return 0, false
	}
	avroReg.Lock()
	defer avroReg.Unlock()
	if c, found = avroReg.byKey[k]; !found {
		if len(avroReg.convs) >= maxAvroConverters {
			return 0, false
		}
		if avroReg.byKey == nil {
			avroReg.byKey = map[string]uint32{}
		}
		c = uint32(len(avroReg.convs))
		avroReg.convs = append(avroReg.convs, avroConv{rows: rows})
		avroReg.byKey[k] = c
	}
	return uint64(p)<<32 | uint64(c), true
}

// AppendAvroRow appends to dst the row payload of a message of the
// RegisterAvro registration id: its Avro body (the bytes after the wire
// format's header) stands for the plan's columns; entries of the stream's
// remaining columns (source.AppendRowValue) follow it, appended by the
// caller. rawKey, when not nil, is the key the record takes should the Go
// path quarantine the message (the message's undecoded key).
func AppendAvroRow(dst []byte, id uint64, rawKey, body []byte) []byte {
	dst = append(dst, avroMarker[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(id>>32))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(id))
	if rawKey == nil {
		dst = append(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(len(rawKey))+1)
		dst = append(dst, rawKey...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// errAvroFallback is the Rust status of a push the Avro fast path leaves
// to the Go decoders (status 6).
var errAvroFallback = errors.New("engine: avro rows left to the Go decoder")

// avroMarked reports whether a row payload holds an Avro body.
func avroMarked(p []byte) bool {
	return len(p) >= len(avroMarker) && [10]byte(p[:10]) == avroMarker
}

// avroGoRows replaces b's Avro-marked rows with the Go decoder's rows
// (or the records the Go path quarantines), keeping every other row.
func avroGoRows(b *RawBatch) error {
	var nb RawBatch
	nb.Grow(b.Len(), b.KeyBytes(), 2*len(b.payload))
	var row []byte
	for i := range b.Len() {
		op, seq, key, p := b.Row(i)
		if !avroMarked(p) {
			nb.Append(op, seq, key, p)
			continue
		}
		r := p[len(avroMarker):]
		if len(r) < 8 {
			return fmt.Errorf("%w: avro row %d: truncated", ErrInternal, i)
		}
		c := binary.LittleEndian.Uint32(r[4:8])
		r = r[8:]
		tag, n := binary.Uvarint(r)
		if n <= 0 || tag > uint64(len(r)-n) {
			return fmt.Errorf("%w: avro row %d: bad key tag", ErrInternal, i)
		}
		r = r[n:]
		var rawKey []byte
		if tag > 0 {
			rawKey, r = r[:tag-1], r[tag-1:]
		}
		blen, n := binary.Uvarint(r)
		if n <= 0 || blen > uint64(len(r)-n) {
			return fmt.Errorf("%w: avro row %d: bad body length", ErrInternal, i)
		}
		body, rest := r[n:n+int(blen)], r[n+int(blen):]
		avroReg.RLock()
		var conv AvroRows
		if int(c) < len(avroReg.convs) {
			conv = avroReg.convs[c].rows
		}
		avroReg.RUnlock()
		if conv == nil {
			return fmt.Errorf("%w: avro row %d: unknown converter %d", ErrInternal, i, c)
		}
		var ok bool
		row, ok = conv(row[:0], body)
		if ok {
			row = append(row, rest...)
		} else if tag > 0 {
			key = rawKey
		}
		nb.Append(op, seq, key, row)
	}
	stream := b.Stream
	*b = nb
	b.Stream = stream
	return nil
}
