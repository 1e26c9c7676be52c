package engine_test

import (
	"encoding/binary"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

// avroPlan is a plan (engine/rust/src/avro.rs) of one Avro long field
// into column 0 of ncols.
func avroPlan(ncols uint32) []byte {
	p := append([]byte("AVP1"), 0)
	p = binary.LittleEndian.AppendUint32(p, ncols)
	p = binary.LittleEndian.AppendUint32(p, 1)
	p = append(p, 5, 0) // long → int8, not in a union
	p = binary.LittleEndian.AppendUint32(p, 0)
	return binary.LittleEndian.AppendUint32(p, 0)
}

// TestAvroRows: a registered plan's marked rows are decoded by the
// engine (a metadata entry after the body read as usual); a batch with a
// message the plan can't decode takes the Go rows of RegisterAvro's
// function instead, whole, its bad message keeping the raw key; a plan
// the engine refuses is not registered.
func TestAvroRows(t *testing.T) {
	if _, err := engine.New(engine.Config{}); errors.Is(err, engine.ErrUnavailable) {
		t.Skip(err)
	}
	if _, ok := engine.RegisterAvro("t", []byte("AVP1junk"), nil); ok {
		t.Fatal("a malformed plan was registered")
	}
	calls := 0
	goRows := func(dst, body []byte) ([]byte, bool) {
		calls++
		v, n := binary.Varint(body)
		if n <= 0 || n != len(body) {
			return append(dst, "\x7fbad"...), false
		}
		return source.AppendRowValue(dst, strconv.AppendInt(nil, v, 10)), true
	}
	id, ok := engine.RegisterAvro("t", avroPlan(1), goRows)
	if !ok {
		t.Fatal("plan refused")
	}
	if id2, _ := engine.RegisterAvro("t", avroPlan(1), goRows); id2 != id {
		t.Fatalf("the same plan registered twice: %x, %x", id, id2)
	}
	e, err := engine.New(engine.Config{Streams: []engine.StreamSpec{rowSpec("s", "", "n", "int8", "m", "int4")}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	marked := func(v int64, trunc bool) []byte {
		body := binary.AppendVarint(nil, v)
		if trunc {
			body = []byte{0x80}
		}
		return source.AppendRowValue(engine.AppendAvroRow(nil, id, []byte("raw"), body), []byte("7"))
	}
	var b engine.RawBatch
	b.Stream = "s"
	b.Append(1, 1, []byte("k1"), marked(42, false))
	b.Append(1, 2, []byte("k2"), marked(-1<<40, false))
	out, err := e.Push(&b, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := out.Record.Column(0).(*array.Int64)
	if calls != 0 || got.Value(0) != 42 || got.Value(1) != -1<<40 || out.Record.Column(1).(*array.Int32).Value(1) != 7 {
		t.Fatalf("calls %d, record %v", calls, out.Record)
	}
	out.Record.Release()

	b.Reset()
	b.Append(1, 1, []byte("k1"), marked(5, false))
	b.Append(1, 2, []byte("k2"), marked(0, true))
	out, err = e.Push(&b, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Record.Release()
	if calls != 2 || out.Record.NumRows() != 1 || out.Record.Column(0).(*array.Int64).Value(0) != 5 ||
		len(out.Quarantined) != 1 || out.Quarantined[0].Row != 1 {
		t.Fatalf("calls %d, record %v, quarantined %+v", calls, out.Record, out.Quarantined)
	}
	if _, _, key, p := b.Row(1); string(key) != "raw" || string(p) != "\x7fbad" {
		t.Fatalf("the bad message's record: key %q payload %q", key, p)
	}
	if _, _, key, p := b.Row(0); string(key) != "k1" || string(p) != string(source.AppendRowValue(source.AppendRowValue(nil, []byte("5")), []byte("7"))) {
		t.Fatalf("the good message's record: key %q payload %q", key, p)
	}
}
