package avrorow

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

const protoAll = `syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
message Other { string x = 1; }
message Ev {
  enum Color { RED = 0; GREEN = 1; }
  message Addr { string city = 1; optional int32 zip = 2; }
  int64 id = 1;
  bool flag = 2;
  int32 i32 = 3;
  sint32 s32 = 4;
  sint64 s64 = 5;
  uint32 u32 = 6;
  uint64 u64 = 7;
  fixed32 f32 = 8;
  fixed64 f64 = 9;
  sfixed32 sf32 = 10;
  sfixed64 sf64 = 11;
  float fl = 12;
  double db = 13;
  string name = 14;
  bytes raw = 15;
  Color color = 16;
  google.protobuf.Timestamp ts = 17;
  google.protobuf.Duration dur = 18;
  google.protobuf.StringValue sv = 19;
  google.protobuf.Int64Value iv = 20;
  google.protobuf.Struct st = 21;
  Addr addr = 22;
  repeated int64 nums = 23;
  repeated string tags = 24;
  map<string, int32> attrs = 25;
  repeated Addr addrs = 26;
  optional string opt = 27;
  oneof choice { string cs = 28; int32 ci = 29; }
  google.protobuf.Value val = 30;
  repeated google.protobuf.Timestamp tss = 31;
  repeated Color colors = 32;
  string _openetl_x = 33;
}`

// protoEncode encodes the message named by md from its proto3 JSON with
// the Protobuf module's own codec (independent of the decoder).
func protoEncode(t testing.TB, md protoreflect.MessageDescriptor, js string) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatalf("protojson %s: %v", js, err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustProto(t testing.TB, text string) *ProtoFile {
	t.Helper()
	f, err := ParseProto(text, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestProtoTypes(t *testing.T) {
	f := mustProto(t, protoAll)
	s, err := f.Message([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	want := "id int8, flag bool, i32 int4, s32 int4, s64 int8, u32 int8, u64 numeric(20,0), f32 int8, f64 numeric(20,0), " +
		"sf32 int4, sf64 int8, fl float4, db float8, name text, raw bytea, color enum('RED','GREEN'), ts timestamptz, " +
		"dur interval, sv text, iv int8, st jsonb, addr jsonb, nums _int8, tags _text, attrs jsonb, addrs jsonb, " +
		"opt text, cs text, ci int4, val jsonb, tss _timestamptz, colors _enum('RED','GREEN')"
	if got := strings.Join(colTypes(s.Cols()), ", "); got != want {
		t.Fatalf("columns\n%s\nwant\n%s", got, want)
	}
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	md := f.fd.Messages().Get(1)
	full := protoEncode(t, md, `{"id":"-9000000000","flag":true,"i32":-5,"s32":-6,"s64":"-7","u32":4294967295,
	 "u64":"18446744073709551615","f32":7,"f64":"8","sf32":-9,"sf64":"-10","fl":0.1,"db":1e300,
	 "name":"a \"b\" ü","raw":"AAH/","color":"GREEN","ts":"1969-12-31T23:59:59.999999Z","dur":"-3723.000004s",
	 "sv":"","iv":"42","st":{"k":[1,"x",null,{"n":true}]},"addr":{"city":"Oslo"},
	 "nums":["1","-2","4611686018427387904"],"tags":["a b","","NULL","c,d","q\"x"],"attrs":{"k":1},
	 "addrs":[{"city":"A","zip":1},{"city":"B"}],"opt":"o","ci":7,"val":"s","tss":["2024-02-29T12:00:00Z"],
	 "colors":["GREEN","RED"],"_openetl_x":"dropped"}`)
	got := strings.Join(protoRow(t, d, full), "|")
	wantRow := `-9000000000|true|-5|-6|-7|4294967295|18446744073709551615|7|8|-9|-10|0.1|1e+300|a "b" ü|\x0001ff|GREEN|` +
		`1969-12-31 23:59:59.999999|0 mons 0 days -01:02:03.000004||42|{"k":[1,"x",null,{"n":true}]}|{"city":"Oslo"}|` +
		`{1,-2,4611686018427387904}|{a b,"","NULL","c\,d","q\"x"}|{"k":1}|[{"city":"A","zip":1},{"city":"B"}]|o|<null>|7|"s"|` +
		`{2024-02-29 12:00:00.000000}|{GREEN,RED}`
	// (a comma in an array element is quoted: c,d is "c,d")
	wantRow = strings.Replace(wantRow, `"c\,d"`, `"c,d"`, 1)
	if got != wantRow {
		t.Errorf("row\n%s\nwant\n%s", got, wantRow)
	}
	// Absent fields: presence is null, no presence is the default.
	got = strings.Join(protoRow(t, d, nil), "|")
	wantRow = `0|false|0|0|0|0|0|0|0|0|0|0|0||\x|RED|<null>|<null>|<null>|<null>|<null>|<null>|{}|{}|{}|[]|<null>|<null>|<null>|<null>|{}|{}`
	if got != wantRow {
		t.Errorf("empty row\n%s\nwant\n%s", got, wantRow)
	}
	// A message as JSON (keys), and a field given twice (last wins; a
	// message merges), unpacked repeated values, an unknown enum number.
	js, err := d.JSON(nil, protoEncode(t, md, `{"id":"1","addr":{"city":"X","zip":5},"color":7,"ts":"2024-01-01T00:00:00.5Z"}`))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		t.Fatalf("JSON %s: %v", js, err)
	}
	if obj["id"] != 1.0 || obj["color"] != 7.0 || obj["ts"] != "2024-01-01T00:00:00.500000Z" || obj["name"] != "" ||
		obj["addr"].(map[string]any)["zip"] != 5.0 || obj["opt"] != nil || obj["nums"] == nil {
		t.Errorf("JSON %s", js)
	}
	twice := append(protoEncode(t, md, `{"id":"1","addr":{"city":"X"},"nums":["1"]}`),
		protoEncode(t, md, `{"id":"2","addr":{"zip":3},"nums":["2"],"color":5}`)...)
	got = strings.Join(protoRow(t, d, twice), "|")
	if !strings.HasPrefix(got, "2|") || !strings.Contains(got, `|{"city":"X","zip":3}|{1,2}|`) || !strings.Contains(got, "|5|") {
		t.Errorf("merged row %s", got)
	}
	// Bytes that don't match.
	// (A known field with another wire type is no such case: an unknown
	// field, see TestProtoWrongWireType.)
	for _, bad := range [][]byte{{0x08}, {0x0a, 0x05, 'a'}, {0x0b}, {0xff}} {
		if _, err := d.Row(nil, bad); !errors.Is(err, ErrData) {
			t.Errorf("Row(%x): %v", bad, err)
		}
	}
	// A sub-microsecond timestamp is written with its nanoseconds, for
	// the engine to hold.
	got = strings.Join(protoRow(t, d, protoEncode(t, md, `{"ts":"2024-01-01T00:00:00.000000001Z"}`)), "|")
	if !strings.Contains(got, "|2024-01-01 00:00:00.000000001|") {
		t.Errorf("nanosecond row %s", got)
	}
}

func protoRow(t testing.TB, d *ProtoDecoder, payload []byte) []string {
	t.Helper()
	out, err := d.Row(nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	return entries(t, out)
}

// TestProtoIndex: message indexes as the wire format writes them, the
// file given as base64 of its descriptor, a schema reference, and the
// columns of two versions joining.
func TestProtoIndex(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want []int
		n    int
	}{
		{[]byte{0}, []int{0}, 1}, {[]byte{2, 2}, []int{1}, 2}, {[]byte{4, 2, 4, 9}, []int{1, 2}, 3},
		{[]byte{}, nil, 0}, {[]byte{3}, nil, 0}, {[]byte{2}, nil, 0},
	} {
		got, n := MessageIndex(c.b, nil)
		if n != c.n || n > 0 && !slices.Equal(got, c.want) {
			t.Errorf("MessageIndex(%x) = %v, %d; want %v, %d", c.b, got, n, c.want, c.n)
		}
	}
	f := mustProto(t, protoAll)
	if _, err := f.Message([]int{5}); !errors.Is(err, ErrData) {
		t.Errorf("message 5: %v", err)
	}
	nested, err := f.Message([]int{1, 0})
	if err != nil || strings.Join(colTypes(nested.Cols()), ", ") != "city text, zip int4" {
		t.Fatalf("nested message: %v %v", nested, err)
	}
	// The same file as a base64 descriptor, importing a reference.
	ref := `syntax = "proto3"; package r; message Money { string currency = 1; int64 units = 2; }`
	main := `syntax = "proto3"; package m; import "money.proto"; message Order { int32 n = 1; r.Money price = 2; repeated r.Money fees = 3; }`
	pf, err := ParseProto(main, []Ref{{Name: "money.proto", Text: ref}})
	if err != nil {
		t.Fatal(err)
	}
	fdp := protodesc.ToFileDescriptorProto(pf.fd)
	for _, m := range fdp.MessageType {
		for _, f := range m.Field {
			f.JsonName = nil // as confluent-kafka's Python serializer registers it
		}
	}
	raw, _ := proto.Marshal(fdp)
	pf2, err := ParseProto(base64.StdEncoding.EncodeToString(raw), []Ref{{Name: "money.proto", Text: ref}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := pf2.Message([]int{0})
	if got := strings.Join(colTypes(s.Cols()), ", "); got != "n int4, price jsonb, fees jsonb" {
		t.Errorf("descriptor columns %s", got)
	}
	if _, err := ParseProto(main, nil); !errors.Is(err, ErrSchema) {
		t.Errorf("without its reference: %v", err)
	}
	// Version 2 adds a field and widens n: the join holds both.
	v2 := mustProto(t, `syntax = "proto3"; message Order { int64 n = 1; string city = 4; }`)
	s2, _ := v2.Message([]int{0})
	j := Join(s.Cols(), s2.Cols())
	if got := strings.Join(colTypes(j), ", "); got != "n int8, price jsonb, fees jsonb, city text" {
		t.Errorf("joined %s", got)
	}
	d, err := s.NewDecoder(j)
	if err != nil {
		t.Fatal(err)
	}
	b := protoEncode(t, pf.fd.Messages().Get(0), `{"n":3,"price":{"currency":"EUR","units":"5"}}`)
	if got := strings.Join(protoRow(t, d, b), "|"); got != `3|{"currency":"EUR","units":5}|[]|<null>` {
		t.Errorf("v1 in joined columns: %s", got)
	}
}

// TestProtoNoAlloc: decoding allocates nothing once the decoder's
// buffers have grown.
func TestProtoNoAlloc(t *testing.T) {
	f := mustProto(t, protoAll)
	s, _ := f.Message([]int{1})
	d, _ := s.NewDecoder(s.Cols())
	b := protoEncode(t, f.fd.Messages().Get(1), `{"id":"5","name":"n","ts":"2024-01-01T00:00:00Z","nums":["1","2"],
	 "tags":["a"],"attrs":{"k":1},"addr":{"city":"c"},"sv":"x","st":{"a":1},"colors":["GREEN"]}`)
	var dst []byte
	n := testing.AllocsPerRun(100, func() {
		var err error
		if dst, err = d.Row(dst[:0], b); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations a row", n)
	}
}

// TestProtoWellKnown: the well-known types' values, as columns and as
// JSON inside a message.
func TestProtoWellKnown(t *testing.T) {
	f := mustProto(t, `syntax = "proto3";
import "google/protobuf/any.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";
message W {
  google.protobuf.Any any = 1;
  google.protobuf.Empty empty = 2;
  google.protobuf.FieldMask mask = 3;
  google.protobuf.ListValue list = 4;
  google.protobuf.BytesValue bv = 5;
  google.protobuf.UInt64Value u64 = 6;
  google.protobuf.FloatValue fv = 7;
  google.protobuf.Int32Value i32 = 8;
  google.protobuf.UInt32Value u32 = 9;
  repeated google.protobuf.Int64Value ivs = 10;
  Inner inner = 11;
  message Inner { google.protobuf.Duration d = 1; google.protobuf.BoolValue b = 2; map<int32, string> m = 3; bytes raw = 4; }
}`)
	s, err := f.Message([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	want := "any jsonb, empty jsonb, mask jsonb, list jsonb, bv bytea, u64 numeric(20,0), fv float4, i32 int4, u32 int8, ivs _int8, inner jsonb"
	if got := strings.Join(colTypes(s.Cols()), ", "); got != want {
		t.Fatalf("columns %s", got)
	}
	d, _ := s.NewDecoder(s.Cols())
	md := f.fd.Messages().Get(0)
	b := protoEncode(t, md, `{"any":{"@type":"type.googleapis.com/google.protobuf.Int32Value","value":5},"empty":{},
	 "mask":"a.b,cD","list":[1,"x",null,true,{"k":[]}],"bv":"AP8=","u64":"18446744073709551615","fv":0.5,"i32":0,
	 "ivs":["1","-2"],"inner":{"d":"-1.000000500s","b":false,"m":{"7":"seven"},"raw":"AQ=="}}`)
	got := protoRow(t, d, b)
	wantRow := []string{`{"@type":"type.googleapis.com/google.protobuf.Int32Value","value":"CAU="}`, `{}`, `"a.b,c_d"`,
		`[1,"x",null,true,{"k":[]}]`, `\x00ff`, "18446744073709551615", "0.5", "0", "<null>", "{1,-2}",
		`{"d":"-1.000000500s","b":false,"m":{"7":"seven"},"raw":"AQ=="}`}
	if strings.Join(got, "|") != strings.Join(wantRow, "|") {
		t.Errorf("row\n%s\nwant\n%s", strings.Join(got, "|"), strings.Join(wantRow, "|"))
	}
	for i, v := range got {
		if strings.HasSuffix(s.Cols()[i].Type(), "jsonb") && !json.Valid([]byte(v)) {
			t.Errorf("column %d: not JSON: %s", i, v)
		}
	}
}
