package avrorow

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/avro"

	"github.com/openetl/etl/source"
)

// encode encodes v with schema text, through an independent encoder
// (twmb/avro).
func encode(t testing.TB, schema string, v any) []byte {
	t.Helper()
	s, err := avro.Parse(schema)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Encode(v)
	if err != nil {
		t.Fatalf("encode %v: %v", v, err)
	}
	return b
}

// row decodes payload with d and returns each column's text ("<null>"
// for a null).
func row(t testing.TB, d *Decoder, payload []byte) []string {
	t.Helper()
	out, err := d.Row(nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	return entries(t, out)
}

func entries(t testing.TB, out []byte) []string {
	t.Helper()
	vals, err := source.DecodeRow(nil, out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vals {
		if v.Null {
			got = append(got, "<null>")
		} else {
			got = append(got, string(v.Text))
		}
	}
	return got
}

func mustParse(t testing.TB, schema string, debezium bool) *Schema {
	t.Helper()
	s, err := Parse(schema, nil, debezium)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func colTypes(cols []Col) []string {
	var out []string
	for _, c := range cols {
		out = append(out, c.Name+" "+c.Type())
	}
	return out
}

const allTypes = `{"type":"record","name":"All","namespace":"t","fields":[
 {"name":"n","type":"null"},
 {"name":"b","type":"boolean"},
 {"name":"i","type":"int"},
 {"name":"l","type":"long"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"by","type":"bytes"},
 {"name":"s","type":"string"},
 {"name":"fx","type":{"type":"fixed","name":"F3","size":3}},
 {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN","it_s"]}},
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"decfx","type":{"type":"fixed","name":"D16","size":16,"logicalType":"decimal","precision":38,"scale":4}},
 {"name":"wide","type":{"type":"bytes","logicalType":"decimal","precision":60,"scale":3}},
 {"name":"u","type":{"type":"string","logicalType":"uuid"}},
 {"name":"ufx","type":{"type":"fixed","name":"U16","size":16,"logicalType":"uuid"}},
 {"name":"dt","type":{"type":"int","logicalType":"date"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"tu","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"tsm","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tsu","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"tsn","type":{"type":"long","logicalType":"timestamp-nanos"}},
 {"name":"ltm","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"ltu","type":{"type":"long","logicalType":"local-timestamp-micros"}},
 {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}},
 {"name":"arr","type":{"type":"array","items":"long"}},
 {"name":"sarr","type":{"type":"array","items":["null","string"]}},
 {"name":"m","type":{"type":"map","values":"int"}},
 {"name":"rec","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"},{"name":"y","type":["null","string"]}]}},
 {"name":"opt","type":["null","long"]},
 {"name":"multi","type":["null","int","string"]},
 {"name":"cplx","type":["null","string",{"type":"array","items":"int"}]},
 {"name":"_openetl_x","type":"int"}
]}`

func TestColumnsAndText(t *testing.T) {
	s := mustParse(t, allTypes, false)
	want := []string{"n text", "b bool", "i int4", "l int8", "f float4", "d float8", "by bytea", "s text",
		"fx bytea", "e enum('RED','GREEN','it_s')", "dec numeric(10,2)", "decfx numeric(38,4)", "wide numeric",
		"u uuid", "ufx uuid", "dt date", "tm time", "tu time", "tsm timestamptz", "tsu timestamptz", "tsn timestamptz",
		"ltm timestamp", "ltu timestamp", "dur interval", "arr _int8", "sarr _text", "m jsonb", "rec jsonb",
		"opt int8", "multi text", "cplx jsonb"}
	if got := colTypes(s.Cols()); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("columns\n got %v\nwant %v", got, want)
	}
	wide, _ := new(big.Rat).SetString("-123456789012345678901234567890123456789012345.678")
	v := map[string]any{
		"n": nil, "b": true, "i": int32(-7), "l": int64(math.MaxInt64), "f": float32(0.1), "d": 1e21,
		"by": []byte{0, 0xab, 0xff}, "s": "héllo, \"w\"", "fx": []byte{1, 2, 3}, "e": "it_s",
		"dec": "-12.05", "decfx": "0.0001", "wide": wide,
		"u": "123e4567-e89b-12d3-a456-426614174000", "ufx": "123e4567-e89b-12d3-a456-426614174000",
		"dt": int32(-719163), // 0000-12-31: 1 BC
		"tm": int32(45296789), "tu": int64(86399999999),
		"tsm": int64(-1), "tsu": int64(1700000000123456), "tsn": int64(1700000000123456789),
		"ltm": int64(0), "ltu": int64(253402300799999999),
		"dur":  avro.Duration{Months: 14, Days: 3, Milliseconds: 3723004},
		"arr":  []int64{1, -2, 3},
		"sarr": []any{"a b", nil, "NULL", "", "x,y", `q"\`},
		"m":    map[string]int32{"k": 1},
		"rec":  map[string]any{"x": int32(5), "y": "z"},
		"opt":  int64(9), "multi": "txt", "cplx": []int32{1, 2},
		"_openetl_x": int32(1),
	}
	d, err := NewDecoder(s, s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	got := row(t, d, encode(t, allTypes, v))
	wantText := []string{"<null>", "true", "-7", "9223372036854775807", "0.1", "1e+21", `\x00abff`, "héllo, \"w\"",
		`\x010203`, "it_s", "-12.05", "0.0001", "-123456789012345678901234567890123456789012345.678",
		"123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000",
		"0001-12-31 BC", "12:34:56.789", "23:59:59.999999", "1969-12-31 23:59:59.999", "2023-11-14 22:13:20.123456",
		"2023-11-14 22:13:20.123456789", "1970-01-01 00:00:00.000", "9999-12-31 23:59:59.999999",
		"14 mons 3 days 01:02:03.004000", "{1,-2,3}", `{a b,NULL,"NULL","","x,y","q\"\\"}`, `{"k":1}`,
		`{"x":5,"y":"z"}`, "9", "txt", `{"array":[1,2]}`}
	if len(got) != len(wantText) {
		t.Fatalf("got %d values, want %d: %q", len(got), len(wantText), got)
	}
	for i := range got {
		if got[i] != wantText[i] {
			t.Errorf("column %s: got %q, want %q", s.Cols()[i].Name, got[i], wantText[i])
		}
	}
}

func TestDecimals(t *testing.T) {
	for _, c := range []struct {
		b     []byte
		scale int
		want  string
	}{
		{nil, 2, "0.00"},
		{[]byte{0}, 0, "0"},
		{[]byte{0xff}, 0, "-1"},
		{[]byte{0xff}, 3, "-0.001"},
		{[]byte{0x00, 0x80}, 1, "12.8"},
		{[]byte{0xff, 0xff, 0x7f}, 0, "-129"},
		{[]byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, "-170141183460469231731687303715884105728"},
		{[]byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 38, "1.70141183460469231731687303715884105727"},
		{[]byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, "340282366920938463463374607431768211456"},
		{[]byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0, "-340282366920938463463374607431768211457"},
		{[]byte{0x05}, -2, "500"},
		{[]byte{0x00}, -2, "0"},
		{[]byte{0x0a}, 19, "0.0000000000000000010"},
	} {
		var bs bigScratch
		if got := string(appendDecimal(nil, c.b, c.scale, &bs)); got != c.want {
			t.Errorf("%x scale %d: got %s, want %s", c.b, c.scale, got, c.want)
		}
	}
}

func TestDatesAndTimestamps(t *testing.T) {
	for _, c := range []struct {
		days int64
		want string
	}{
		{0, "1970-01-01"}, {-1, "1969-12-31"}, {19723, "2024-01-01"}, {-719162, "0001-01-01"},
		{-719163, "0001-12-31 BC"}, {2932896, "9999-12-31"}, {2932897, "10000-01-01"},
		{-719528, "0001-01-01 BC"}, {-719529, "0002-12-31 BC"},
	} {
		got := string(appendBC(appendDate(nil, c.days), c.days))
		if got != c.want {
			t.Errorf("day %d: got %s, want %s", c.days, got, c.want)
		}
	}
	if got := string(appendTimestamp(nil, -86400000001, lTsMicros, ' ')); got != "1969-12-30 23:59:59.999999" {
		t.Errorf("negative micros: %s", got)
	}
	if got := string(appendTimestamp(nil, 1500, lTsNanos, 'T')); got != "1970-01-01T00:00:00.000001500" {
		t.Errorf("nanos: %s", got)
	}
	if got := string(appendTimestamp(nil, 2000, lTsNanos, 'T')); got != "1970-01-01T00:00:00.000002" {
		t.Errorf("whole-microsecond nanos: %s", got)
	}
}

func TestJoin(t *testing.T) {
	v1 := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"id","type":"int"},{"name":"f","type":"float"},
		{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}},{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}},
		{"name":"s","type":"string"},{"name":"x","type":"int"}]}`, false)
	v2 := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"f","type":"double"},
		{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":8,"scale":4}},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
		{"name":"s","type":"long"},{"name":"new","type":["null","string"],"default":null}]}`, false)
	j := Join(v1.Cols(), v2.Cols())
	want := "id int8|f float8|d numeric(8,4)|e enum('A','B')|s text|x int4|new text"
	if got := strings.Join(colTypes(j), "|"); got != want {
		t.Fatalf("join: %s\nwant %s", got, want)
	}
	if Covers(v1.Cols(), v2.Cols()) || !Covers(j, v1.Cols()) || !Covers(j, v2.Cols()) {
		t.Fatal("Covers")
	}
	// An enum gaining a label needs no new columns.
	e1 := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}]}`, false)
	e2 := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}]}`, false)
	if !Covers(e1.Cols(), e2.Cols()) {
		t.Error("an added enum label needs a reopen")
	}
	// Old values decode into the joined columns: a float widened to
	// double is the float's exact value.
	d, err := NewDecoder(v1, j)
	if err != nil {
		t.Fatal(err)
	}
	got := row(t, d, encode(t, `{"type":"record","name":"R","fields":[{"name":"id","type":"int"},{"name":"f","type":"float"},
		{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":5,"scale":2}},{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}},
		{"name":"s","type":"string"},{"name":"x","type":"int"}]}`, map[string]any{"id": int32(1), "f": float32(0.1), "d": "1.50", "e": "A", "s": "t", "x": int32(2)}))
	wantRow := []string{"1", "0.10000000149011612", "1.50", "A", "t", "2", "<null>"}
	if strings.Join(got, "|") != strings.Join(wantRow, "|") {
		t.Fatalf("row %q, want %q", got, wantRow)
	}
	if _, err := NewDecoder(v2, v1.Cols()); err == nil {
		t.Error("a decoder into columns that don't hold the schema's")
	}
}

const envSchema = `{"type":"record","name":"Envelope","namespace":"db.inv.customers","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"int"},
   {"name":"name","type":["null","string"],"default":null},
   {"name":"born","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null},
   {"name":"seen","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},
   {"name":"zoned","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.time.ZonedTimestamp"}],"default":null},
   {"name":"doc","type":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}],"default":null},
   {"name":"amount","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null},
   {"name":"price","type":["null",{"type":"bytes","scale":2,"precision":10,"connect.version":1,"connect.parameters":{"scale":"2","connect.decimal.precision":"10"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
   {"name":"mood","type":["null",{"type":"string","connect.version":1,"connect.parameters":{"allowed":"sad,ok"},"connect.name":"io.debezium.data.Enum"}],"default":null},
   {"name":"t","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}],"default":null}
 ],"connect.name":"db.inv.customers.Value"}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[{"name":"version","type":"string"},{"name":"lsn","type":["null","long"],"default":null}]}},
 {"name":"op","type":"string"},
 {"name":"ts_ms","type":["null","long"],"default":null},
 {"name":"transaction","type":["null",{"type":"record","name":"block","namespace":"event","fields":[{"name":"id","type":"string"}]}],"default":null}
]}`

func TestEnvelope(t *testing.T) {
	s := mustParse(t, envSchema, true)
	want := "id int4|name text|born date|seen timestamp|zoned timestamptz|doc jsonb|amount numeric|price numeric(10,2)|mood enum('sad','ok')|t time"
	if got := strings.Join(colTypes(s.Cols()), "|"); got != want {
		t.Fatalf("columns %s\nwant %s", got, want)
	}
	if _, err := Parse(envSchema, nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}`, nil, true); err == nil {
		t.Fatal("not an envSchema, parsed as one")
	}
	d, err := NewDecoder(s, s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	row := map[string]any{"id": int32(7), "name": "Ann", "born": int32(-1), "seen": int64(1), "zoned": "2024-03-01T10:00:00.5+02:00",
		"doc": `{"a":[1]}`, "amount": map[string]any{"scale": int32(3), "value": []byte{0xfb, 0x2e}}, "price": "3.10",
		"mood": "ok", "t": int64(3600000001)}
	payload := encode(t, envSchema, map[string]any{"before": nil, "after": row,
		"source": map[string]any{"version": "3.6", "lsn": int64(5)}, "op": "c", "ts_ms": int64(1), "transaction": nil})
	op, before, after, err := d.Envelope(payload)
	if err != nil {
		t.Fatal(err)
	}
	if string(op) != "c" || before || !after {
		t.Fatalf("op %q before %v after %v", op, before, after)
	}
	got := entries(t, d.AppendRow(nil, 1))
	wantRow := "7|Ann|1969-12-31|1970-01-01 00:00:00.000001|2024-03-01T10:00:00.5+02:00|{\"a\":[1]}|-1.234|3.10|ok|01:00:00.000001"
	if strings.Join(got, "|") != wantRow {
		t.Fatalf("after row %q\nwant %s", strings.Join(got, "|"), wantRow)
	}
	payload = encode(t, envSchema, map[string]any{"before": row, "after": nil,
		"source": map[string]any{"version": "3.6", "lsn": nil}, "op": "d", "ts_ms": nil, "transaction": map[string]any{"id": "x"}})
	op, before, after, err = d.Envelope(payload)
	if err != nil || string(op) != "d" || !before || after {
		t.Fatalf("delete: op %q before %v after %v err %v", op, before, after, err)
	}
	if got := entries(t, d.AppendRow(nil, 0)); got[0] != "7" {
		t.Fatalf("before row %q", got)
	}
}

func TestKeyJSON(t *testing.T) {
	k := mustParse(t, `{"type":"record","name":"Key","fields":[{"name":"id","type":"int"},{"name":"region","type":"string"}]}`, false)
	d, _ := NewDecoder(k, k.Cols())
	got, err := d.JSON(nil, encode(t, `{"type":"record","name":"Key","fields":[{"name":"id","type":"int"},{"name":"region","type":"string"}]}`,
		map[string]any{"id": int32(42), "region": "eu\n"}))
	if err != nil || string(got) != `{"id":42,"region":"eu\n"}` {
		t.Fatalf("%s %v", got, err)
	}
}

func TestRecursive(t *testing.T) {
	const sch = `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}`
	s := mustParse(t, sch, false)
	if got := strings.Join(colTypes(s.Cols()), "|"); got != "v int4|next jsonb" {
		t.Fatal(got)
	}
	d, _ := NewDecoder(s, s.Cols())
	v := map[string]any{"v": int32(1), "next": map[string]any{"v": int32(2), "next": nil}}
	if got := row(t, d, encode(t, sch, v)); got[1] != `{"v":2,"next":null}` {
		t.Fatalf("%q", got)
	}
}

func TestBadData(t *testing.T) {
	s := mustParse(t, allTypes, false)
	d, _ := NewDecoder(s, s.Cols())
	good := encode(t, `{"type":"record","name":"R","fields":[{"name":"a","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}]}`,
		map[string]any{"a": "x", "e": "A"})
	small := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"a","type":["null","string"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}]}`, false)
	sd, _ := NewDecoder(small, small.Cols())
	for name, p := range map[string][]byte{
		"truncated":       {},
		"union branch":    {0x08},
		"enum symbol":     {0x00, 0x02},
		"length":          {0x02, 0x40, 'x'},
		"trailing":        append(append([]byte{}, good...), 0),
		"varint too long": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		dec := sd
		if name == "truncated" {
			dec = d
		}
		if _, err := dec.Row(nil, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := sd.Row(nil, good); err != nil {
		t.Fatal(err)
	}
	// A block count of zero-size items past the payload's bound.
	nulls := mustParse(t, `{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"null"}}]}`, false)
	nd, _ := NewDecoder(nulls, nulls.Cols())
	if _, err := nd.Row(nil, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f, 0}); err == nil {
		t.Error("a billion null items taken")
	}
}

// FuzzRow: no input makes the decoder panic, and what it accepts is a
// row of the columns' count.
func FuzzRow(f *testing.F) {
	s := mustParse(f, allTypes, false)
	d, _ := NewDecoder(s, s.Cols())
	f.Add([]byte{})
	f.Add([]byte{0x01, 0x02})
	v := map[string]any{"n": nil, "b": false, "i": int32(1), "l": int64(2), "f": float32(1), "d": 2.0, "by": []byte{}, "s": "",
		"fx": []byte{1, 2, 3}, "e": "RED", "dec": "1", "decfx": "1", "wide": "1", "u": "123e4567-e89b-12d3-a456-426614174000",
		"ufx": "123e4567-e89b-12d3-a456-426614174000", "dt": int32(0), "tm": int32(0), "tu": int64(0), "tsm": int64(0),
		"tsu": int64(0), "tsn": int64(0), "ltm": int64(0), "ltu": int64(0), "dur": avro.Duration{}, "arr": []int64{1},
		"sarr": []any{"x"}, "m": map[string]int32{}, "rec": map[string]any{"x": int32(1), "y": nil}, "opt": nil,
		"multi": int32(3), "cplx": nil, "_openetl_x": int32(0)}
	f.Add(encode(f, allTypes, v))
	f.Fuzz(func(t *testing.T, p []byte) {
		out, err := d.Row(nil, p)
		if err != nil {
			return
		}
		vals, err := source.DecodeRow(nil, out)
		if err != nil || len(vals) != len(s.Cols()) {
			t.Fatalf("row of %d values (%v) for %d columns", len(vals), err, len(s.Cols()))
		}
	})
}

func TestNullableRecordRoot(t *testing.T) {
	const sch = `["null",{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"string"}]}]`
	s := mustParse(t, sch, false)
	if got := strings.Join(colTypes(s.Cols()), "|"); got != "a int4|b text" {
		t.Fatal(got)
	}
	d, _ := NewDecoder(s, s.Cols())
	if got := strings.Join(row(t, d, encode(t, sch, map[string]any{"a": int32(3), "b": "x"})), "|"); got != "3|x" {
		t.Fatal(got)
	}
	if got := strings.Join(row(t, d, encode(t, sch, nil)), "|"); got != "<null>|<null>" {
		t.Fatal(got)
	}
}

// TestRowDirect: a row written in place (fields in column order) is the
// row the spans path writes, for values around the one-byte length
// header's limit, nulls, skipped fields and columns the schema lacks.
func TestRowDirect(t *testing.T) {
	const schema = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"},
	 {"name":"_openetl_x","type":"long"},{"name":"b","type":["null","string"]},{"name":"c","type":{"type":"array","items":"string"}}]}`
	s := mustParse(t, schema, false)
	cols := Join([]Col{{Name: "z", t: ctype{b: tInt8}}}, s.Cols()) // a column before, which this schema lacks
	cols = Join(cols, []Col{{Name: "y", t: ctype{b: tText}}})      // and one after
	direct, err := NewDecoder(s, cols)
	if err != nil {
		t.Fatal(err)
	}
	spans, _ := NewDecoder(s, cols)
	spans.ordered = false
	if !direct.ordered {
		t.Fatal("a decoder of fields in column order is not ordered")
	}
	for _, n := range []int{0, 1, 124, 125, 126, 127, 200, 16383, 16384, 70000} {
		v := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		for _, b := range []any{nil, v} {
			payload := encode(t, schema, map[string]any{"a": v, "_openetl_x": int64(n), "b": b, "c": []any{v, "q"}})
			want, err := spans.Row([]byte("prefix"), payload)
			if err != nil {
				t.Fatal(err)
			}
			got, err := direct.Row([]byte("prefix"), payload)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("n %d, b %v: direct row differs", n, b != nil)
			}
			if e := entries(t, got[len("prefix"):]); len(e) != 5 || e[0] != "<null>" || e[1] != v || e[4] != "<null>" {
				t.Fatalf("n %d: entries %.40q", n, e)
			}
		}
	}
	if _, err := direct.Row(nil, []byte{0x06, 'a'}); !errors.Is(err, ErrData) {
		t.Errorf("truncated: %v", err)
	}
}

// TestAppendFloat: every double's text parses back to it, the short
// decimal form and strconv's alike.
func TestAppendFloat(t *testing.T) {
	check := func(f float64) {
		t.Helper()
		if math.IsNaN(f) {
			return // "NaN", as before
		}
		s := string(appendFloat(nil, f, 64))
		g, err := strconv.ParseFloat(s, 64)
		if err != nil || g != f || math.Signbit(g) != math.Signbit(f) {
			t.Fatalf("appendFloat(%v) = %q, parses as %v, %v", f, s, g, err)
		}
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 0.25, -12.5, 1e-7, 123.456, 999999999999999.9,
		1e15, -1e15, 1e21, 0.000001, 0.0000015, 1.0 / 3, 2.675, 9007199254740993, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		check(f)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50_000 {
		check(math.Float64frombits(r.Uint64()))
		check(float64(r.Int64N(2_000_000_000)-1_000_000_000) / float64([]int{1, 10, 100, 1000, 10000, 1000000, 3, 7}[r.IntN(8)]))
		check((r.Float64() - 0.5) * 2e15) // up to the fast form's bound, where f·10^6 passes 2^63
		check(math.Round(r.Float64()*1e17) / 100)
	}
	if got := string(appendFloat(nil, 1234.5, 64)); got != "1234.5" {
		t.Errorf("1234.5 is %s", got)
	}
	if got := string(appendFloat(nil, -0.05, 64)); got != "-0.05" {
		t.Errorf("-0.05 is %s", got)
	}
}
