package avrorow

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

const oneofProto = `syntax = "proto3";
package o;
message In { int32 x = 1; int32 y = 2; }
message One {
  oneof c { int32 a = 1; string s = 2; In m = 3; }
  int32 after = 4;
  optional int32 opt = 5;
}
message Outer { One o = 1; }
`

func tagVarint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func tagBytes(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// TestProtoOneofLast: of a oneof's members on the wire only the last one
// is set (a later member clears an earlier one, and a message member set
// again after another starts anew, not merged with its earlier value),
// in rows and in messages written as JSON; fields outside the oneof are
// not affected.
func TestProtoOneofLast(t *testing.T) {
	f := mustProto(t, oneofProto)
	one, err := f.Message([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := one.NewDecoder(one.Cols())
	if err != nil {
		t.Fatal(err)
	}
	outer, _ := f.Message([]int{2})
	od, err := outer.NewDecoder(outer.Cols())
	if err != nil {
		t.Fatal(err)
	}
	in := func(x, y uint64) []byte {
		var b []byte
		if x != 0 {
			b = tagVarint(b, 1, x)
		}
		if y != 0 {
			b = tagVarint(b, 2, y)
		}
		return b
	}
	for _, c := range []struct {
		name    string
		payload []byte
		row     string // a|s|m|after|opt
		json    string
	}{
		{"a then s", tagBytes(tagVarint(nil, 1, 1), 2, []byte("two")), `<null>|two|<null>|0|<null>`, `{"s":"two","after":0}`},
		{"s then a", tagVarint(tagBytes(nil, 2, []byte("two")), 1, 7), `7|<null>|<null>|0|<null>`, `{"a":7,"after":0}`},
		{"a, after, s, a", tagVarint(tagBytes(tagVarint(tagVarint(nil, 1, 1), 4, 9), 2, []byte("x")), 1, 3),
			`3|<null>|<null>|9|<null>`, `{"a":3,"after":9}`},
		{"m merged", tagBytes(tagBytes(nil, 3, in(1, 0)), 3, in(0, 2)), `<null>|<null>|{"x":1,"y":2}|0|<null>`,
			`{"m":{"x":1,"y":2},"after":0}`},
		{"m, a, m: the last m alone", tagBytes(tagVarint(tagBytes(nil, 3, in(1, 0)), 1, 5), 3, in(0, 2)),
			`<null>|<null>|{"x":0,"y":2}|0|<null>`, `{"m":{"x":0,"y":2},"after":0}`},
		{"m then a", tagVarint(tagBytes(nil, 3, in(1, 0)), 1, 5), `5|<null>|<null>|0|<null>`, `{"a":5,"after":0}`},
		{"proto3 optional is no oneof", tagVarint(tagVarint(nil, 1, 1), 5, 6), `1|<null>|<null>|0|6`, `{"a":1,"after":0,"opt":6}`},
		{"a member with another wire type sets nothing", protowire.AppendFixed32(protowire.AppendTag(tagVarint(nil, 1, 1), 2, protowire.Fixed32Type), 0),
			`1|<null>|<null>|0|<null>`, `{"a":1,"after":0}`},
	} {
		if got := strings.Join(protoRow(t, d, c.payload), "|"); got != c.row {
			t.Errorf("%s: row %s, want %s", c.name, got, c.row)
		}
		if got := protoRow(t, od, tagBytes(nil, 1, c.payload)); got[0] != c.json {
			t.Errorf("%s: JSON %s, want %s", c.name, got[0], c.json)
		}
		js, err := d.JSON(nil, c.payload)
		if err != nil || string(js) != c.json {
			t.Errorf("%s: key JSON %s (%v), want %s", c.name, js, err, c.json)
		}
	}
}

// TestProtoWrongWireType: a known field that comes with another wire
// type than its own is an unknown field, skipped (as protobuf-go reads
// it), in rows and in JSON: the message is not undecodable.
func TestProtoWrongWireType(t *testing.T) {
	f := mustProto(t, `syntax = "proto3";
message S { int32 a = 1; string b = 2; repeated int32 r = 3; }
message T { S s = 1; }`)
	s, _ := f.Message([]int{0})
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := f.Message([]int{1})
	td, err := ts.NewDecoder(ts.Cols())
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = protowire.AppendFixed32(protowire.AppendTag(b, 1, protowire.Fixed32Type), 1) // a as fixed32
	b = tagVarint(b, 2, 5)                                                           // b as a varint
	b = protowire.AppendFixed64(protowire.AppendTag(b, 3, protowire.Fixed64Type), 1) // r as fixed64
	b = tagVarint(b, 3, 4)
	if got := strings.Join(protoRow(t, d, b), "|"); got != "0||{4}" {
		t.Errorf("row %s, want 0||{4}", got)
	}
	if got := protoRow(t, td, tagBytes(nil, 1, b)); got[0] != `{"a":0,"b":"","r":[4]}` {
		t.Errorf("JSON %s", got[0])
	}
}

// TestProtoTimeRange: Timestamps and Durations outside their types'
// ranges (years 1 to 9999; ±315,576,000,000 s; nanos within a second, of
// the seconds' sign) make the message undecodable (ErrData: quarantined,
// saying why), in rows and in JSON, instead of wrapping; the ranges'
// edges are values.
func TestProtoTimeRange(t *testing.T) {
	f := mustProto(t, `syntax = "proto3";
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";
message D { google.protobuf.Duration d = 1; google.protobuf.Timestamp t = 2; }
message W { D x = 1; }`)
	s, _ := f.Message([]int{0})
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := f.Message([]int{1})
	wd, err := ws.NewDecoder(ws.Cols())
	if err != nil {
		t.Fatal(err)
	}
	pair := func(secs, nanos int64) []byte {
		var b []byte
		if secs != 0 {
			b = tagVarint(b, 1, uint64(secs))
		}
		if nanos != 0 {
			b = tagVarint(b, 2, uint64(nanos))
		}
		return b
	}
	for _, c := range []struct {
		field       protowire.Number
		secs, nanos int64
		want        string // the column text, or "" for undecodable
	}{
		{1, 315576000000, 999999999, "0 mons 0 days 87660000:00:00.999999999"},
		{1, -315576000000, 0, "0 mons 0 days -87660000:00:00.000000"},
		{1, 315576000001, 0, ""},
		{1, -315576000001, 0, ""},
		{1, 10_000_000_000_000, 0, ""}, // wrapped to a negative interval before
		{1, math.MaxInt64, 0, ""},
		{1, 1, -1, ""},
		{1, -1, 1, ""},
		{1, 0, 1_000_000_000, ""},
		{2, 253402300799, 999999999, "9999-12-31 23:59:59.999999999"},
		{2, -62135596800, 0, "0001-01-01 00:00:00.000000"},
		{2, 253402300800, 0, ""},
		{2, -62135596801, 0, ""},
		{2, math.MaxInt64, 999999999, ""}, // year 292277026596 before
		{2, 0, -1, ""},
		{2, 0, 1_000_000_000, ""},
	} {
		v := tagBytes(nil, c.field, pair(c.secs, c.nanos))
		out, err := d.Row(nil, v)
		_, jerr := wd.Row(nil, tagBytes(nil, 1, v))
		if c.want == "" {
			if !errors.Is(err, ErrData) || !strings.Contains(err.Error(), "out of range") {
				t.Errorf("field %d %d s %d ns: row %q, err %v", c.field, c.secs, c.nanos, entriesOr(out), err)
			}
			if !errors.Is(jerr, ErrData) {
				t.Errorf("field %d %d s %d ns as JSON: err %v", c.field, c.secs, c.nanos, jerr)
			}
			continue
		}
		if err != nil || jerr != nil {
			t.Errorf("field %d %d s %d ns: %v, %v", c.field, c.secs, c.nanos, err, jerr)
			continue
		}
		if got := entries(t, out)[c.field-1]; got != c.want {
			t.Errorf("field %d %d s %d ns: %s, want %s", c.field, c.secs, c.nanos, got, c.want)
		}
	}
}

func entriesOr(out []byte) string {
	if out == nil {
		return "<none>"
	}
	return string(out)
}

// TestProtoMergeLinear: a singular message field given many times, in a
// message written as JSON, is merged by concatenating its parts once:
// the bytes copied are at most the payload's size per level of nesting,
// and in steady state a row allocates nothing.
func TestProtoMergeLinear(t *testing.T) {
	f := mustProto(t, `syntax = "proto3";
message Inner { int32 x = 1; }
message Mid { Inner in = 1; }
message Top { Mid m = 1; }`)
	s, _ := f.Message([]int{2})
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1000, 8000} {
		var mid []byte
		for i := range n {
			mid = tagBytes(mid, 1, tagVarint(nil, 1, uint64(i+1))) // Mid.in given n times: merged
		}
		top := tagBytes(nil, 1, mid)
		d.merged = 0
		if got := protoRow(t, d, top); got[0] != `{"in":{"x":`+itoa(n)+`}}` {
			t.Fatalf("%d parts: %s", n, got[0])
		}
		if d.merged > len(top) {
			t.Errorf("%d parts (%d bytes): %d bytes copied merging", n, len(top), d.merged)
		}
		var out []byte
		if a := testing.AllocsPerRun(5, func() { out, _ = d.Row(out[:0], top) }); a != 0 {
			t.Errorf("%d parts: %v allocations a row", n, a)
		}
	}
	// The same in a row's top-level field given twice, nested merges
	// included.
	part := tagBytes(nil, 1, tagBytes(tagBytes(nil, 1, tagVarint(nil, 1, 1)), 1, tagVarint(nil, 1, 2)))
	two := append(append([]byte(nil), part...), part...)
	var out []byte
	if got := protoRow(t, d, two); got[0] != `{"in":{"x":2}}` {
		t.Errorf("merged top-level field: %s", got[0])
	}
	if a := testing.AllocsPerRun(5, func() { out, _ = d.Row(out[:0], two) }); a != 0 {
		t.Errorf("merged top-level field: %v allocations a row", a)
	}
}

func itoa(n int) string { return string(appendInt(nil, int64(n))) }

// TestMessageIndexKey: every encoding of a message index has one key,
// its shortest encoding.
func TestMessageIndexKey(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want []byte
	}{
		{[]byte{0}, []byte{0}},
		{[]byte{0x80, 0}, []byte{0}},
		{[]byte{2, 0}, []byte{0}},
		{[]byte{2, 0x80, 0x80, 0}, []byte{0}},
		{[]byte{2, 2}, []byte{2, 2}},
		{[]byte{0x82, 0, 0x82, 0}, []byte{2, 2}},
		{[]byte{4, 2, 6}, []byte{4, 2, 6}},
	} {
		idx, n := MessageIndex(c.b, nil)
		if n != len(c.b) {
			t.Fatalf("% x: read %d bytes", c.b, n)
		}
		if got := AppendMessageIndex(nil, idx); string(got) != string(c.want) {
			t.Errorf("% x (%v): key % x, want % x", c.b, idx, got, c.want)
		}
	}
}
