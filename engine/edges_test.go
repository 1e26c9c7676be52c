package engine_test

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/engine"
)

// writable fails the test when dt holds a type no destination can write:
// a struct without fields, or (when noNull) the null type.
func writable(t *testing.T, what string, dt arrow.DataType, noNull bool) {
	t.Helper()
	switch d := dt.(type) {
	case *arrow.StructType:
		if d.NumFields() == 0 {
			t.Errorf("%s: a struct with no fields", what)
		}
		for _, f := range d.Fields() {
			writable(t, what+"."+f.Name, f.Type, noNull)
		}
	case *arrow.ListType:
		writable(t, what+".element", d.Elem(), noNull)
	case *arrow.NullType:
		if noNull {
			t.Errorf("%s: the null type, which the destination can't take", what)
		}
	}
}

// heldOf returns the held values of column col by input row.
func heldOf(out engine.Output, col string) map[int]string {
	m := map[int]string{}
	for _, h := range out.Held {
		if h.Column == col {
			m[h.Row] = string(h.Value)
		}
	}
	return m
}

// TestEmptyObjects: an empty object has no struct type (a struct needs a
// field: Parquet can't write one without), so where a column's shape has
// only ever seen empty objects that part is left out of the Arrow type,
// and a row whose value holds an empty object there keeps the column's
// whole value under held, so nothing is lost. Once the object gets
// fields, they are the struct's.
func TestEmptyObjects(t *testing.T) {
	e := newEngine(t, engine.Config{})
	out := push(t, e, docs("s",
		`{"id":1,"o":{},"q":{"a":1,"p":{}}}`,
		`{"id":2,"o":null,"q":{"a":2}}`,
		`{"id":3,"q":{"a":3,"p":null}}`,
	))
	r := out.Record
	for _, f := range r.Schema().Fields() {
		writable(t, f.Name, f.Type, false)
	}
	equal(t, "columns", colNames(r)[:2], []string{"id", "q"})
	q := column(t, r, "q").(*array.Struct)
	equal(t, "q type", q.DataType().String(), "struct<a: int64 nullable>")
	equal(t, "q.a", q.Field(0).(*array.Int64).Int64Values(), []int64{1, 2, 3})
	equal(t, "held o", heldOf(out, "o"), map[int]string{0: `{}`})
	equal(t, "held q", heldOf(out, "q"), map[int]string{0: `{"a":1,"p":{}}`})

	out = push(t, e, docs("s", `{"id":4,"o":{"x":"y"},"q":{"a":4,"p":{"z":true}}}`, `{"id":5,"o":{},"q":{"p":{}}}`))
	r = out.Record
	equal(t, "o type", column(t, r, "o").DataType().String(), "struct<x: utf8 nullable>")
	equal(t, "q type", column(t, r, "q").DataType().String(), "struct<a: int64 nullable, p: struct<z: bool nullable> nullable>")
	equal(t, "nothing held once typed", len(out.Held), 0)
	o := column(t, r, "o").(*array.Struct)
	if o.IsNull(1) || !o.Field(0).IsNull(1) {
		t.Errorf("o of row 5: want a struct with a null field")
	}

	// A list of empty objects, and empty objects in lists.
	e = newEngine(t, engine.Config{})
	out = push(t, e, docs("l", `{"l":[{}],"m":[{},{"a":1}]}`))
	for _, f := range out.Record.Schema().Fields() {
		writable(t, f.Name, f.Type, false)
	}
	equal(t, "held l", heldOf(out, "l"), map[int]string{0: `[{}]`})
	equal(t, "m type", column(t, out.Record, "m").DataType().String(), "list<item: struct<a: int64 nullable>, nullable>")
}

// TestNullPositionsHeldForDestinationsWithoutNull: a destination without
// the null type (Iceberg v2) gets no null-typed part of a nested column:
// a struct field only ever null is left out (nothing is lost), and a list
// whose elements were only ever null keeps each non-null value under
// held.
func TestNullPositionsHeldForDestinationsWithoutNull(t *testing.T) {
	e := newEngine(t, engine.Config{Unsupported: []string{"null"}})
	out := push(t, e, docs("s", `{"id":1,"s":{"x":null,"y":1},"l":[],"m":[null],"n":null}`, `{"id":2,"l":null}`))
	r := out.Record
	for _, f := range r.Schema().Fields() {
		writable(t, f.Name, f.Type, true)
	}
	equal(t, "columns", colNames(r)[:2], []string{"id", "s"})
	equal(t, "s type", column(t, r, "s").DataType().String(), "struct<y: int64 nullable>")
	equal(t, "held l", heldOf(out, "l"), map[int]string{0: `[]`})
	equal(t, "held m", heldOf(out, "m"), map[int]string{0: `[null]`})
	equal(t, "held s", heldOf(out, "s"), map[int]string{})
	out = push(t, e, docs("s", `{"id":3,"s":{"x":"a"},"l":[1]}`))
	equal(t, "s type", column(t, out.Record, "s").DataType().String(), "struct<x: utf8 nullable, y: int64 nullable>")
	equal(t, "l type", column(t, out.Record, "l").DataType().String(), "list<item: int64, nullable>")
}

// TestNULInFieldNames: a field name holding a NUL byte, at the top level
// or in a nested object, can't name an Arrow field, and an empty nested
// one can't name an Iceberg field: the document is quarantined as a
// parse error, and the batch's other documents land. Under NestedAsText
// nested names are only text, and fine.
func TestNULInFieldNames(t *testing.T) {
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{{Name: "text", NestedAsText: true}}})
	out := push(t, e, docs("s", `{"id":1,"a\u0000b":1}`, `{"id":2,"o":{"x\u0000":1}}`, `{"id":3,"o":[{"\u0000":1}]}`,
		`{"id":4,"o":{"":1}}`, `{"id":5}`))
	if len(out.Quarantined) != 4 {
		t.Fatalf("quarantined %+v, want rows 0-3", out.Quarantined)
	}
	for i, q := range out.Quarantined {
		want := "NUL"
		if i == 3 {
			want = "empty"
		}
		if q.Row != i || q.Reason != engine.ReasonParse || !strings.Contains(q.Detail, want) {
			t.Errorf("quarantined %+v", q)
		}
	}
	equal(t, "columns", colNames(out.Record)[0], "id")
	out = push(t, e, docs("text", `{"o":{"x\u0000":1}}`))
	equal(t, "as text", cells(t, out.Record, "o"), []string{`{"x\u0000":1}`})
}

// TestReservedPrefixAnyCase: "_openetl_" is reserved whatever the case,
// since readers of Parquet and Iceberg may fold case.
func TestReservedPrefixAnyCase(t *testing.T) {
	e := newEngine(t, engine.Config{})
	out := push(t, e, docs("s", `{"_OPENETL_ID":"x"}`, `{"_Openetl_op":"delete"}`, `{"_openetlx":1}`))
	if len(out.Quarantined) != 2 || out.Quarantined[0].Reason != engine.ReasonParse || out.Quarantined[1].Row != 1 {
		t.Fatalf("quarantined %+v", out.Quarantined)
	}
	equal(t, "columns", colNames(out.Record)[0], "_openetlx")
	_, err := engine.New(engine.Config{Streams: []engine.StreamSpec{rowSpec("r", "", "_OpenETL_seq", "int4")}})
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("a declared column _OpenETL_seq: %v, want an error saying it is reserved", err)
	}
}

// TestCaseCollisions: names that differ only in case get distinct
// destination names (the first keeps its name, the others the first free
// suffix _2, _3, ...) with or without naming rules, for documents and
// declared rows, because readers of Parquet and Iceberg fold case.
func TestCaseCollisions(t *testing.T) {
	e := newEngine(t, engine.Config{})
	out := push(t, e, docs("s", `{"Name":1,"name":2,"NAME":3}`))
	equal(t, "columns", colNames(out.Record)[:3], []string{"Name", "name_2", "NAME_3"})
	equal(t, "values", cells(t, out.Record, "name_2"), []string{"2"})
	out = push(t, e, docs("s", `{"name":4,"Name_2":5}`))
	equal(t, "stable", colNames(out.Record)[:4], []string{"Name", "name_2", "NAME_3", "Name_2_2"})

	// Nested fields are not renamed: an object whose names clash but for
	// case is JSON text, whichever document brings the clash.
	out = push(t, e, docs("n", `{"o":{"A":1,"b":2}}`, `{"o":{"a":3}}`, `{"p":{"X":1,"x":2}}`))
	equal(t, "o", column(t, out.Record, "o").DataType(), arrow.BinaryTypes.String)
	equal(t, "o values", cells(t, out.Record, "o"), []string{`{"A":1,"b":2}`, `{"a":3}`, "<nil>"})
	equal(t, "p", column(t, out.Record, "p").DataType(), arrow.BinaryTypes.String)

	e = newEngine(t, engine.Config{Streams: []engine.StreamSpec{rowSpec("r", "", "Name", "text", "name", "int4")}})
	out = push(t, e, batch("r", rec{op: 1, seq: 1, payload: string(row("a", "1"))}))
	equal(t, "declared columns", colNames(out.Record)[:2], []string{"Name", "name_2"})
}

// TestNumbersKeepTheirText: a nested number kept as text (one float64
// can't hold) is its source text, as at the top level; -0 is -0.0 in a
// float64 column (top level and nested) and 0 in a decimal one.
func TestNumbersKeepTheirText(t *testing.T) {
	e := newEngine(t, engine.Config{})
	out := push(t, e, docs("s", `{"n":1e400,"o":{"n":1e400,"m":[1E400,"x",2.50]},"f":1.5,"d":12345678901234567890.5,"g":{"f":0.5}}`,
		`{"f":-0,"d":-0,"g":{"f":-0}}`))
	r := out.Record
	equal(t, "top level", cells(t, r, "n")[0], "1e400")
	o := column(t, r, "o").(*array.Struct)
	equal(t, "nested", o.Field(1).(*array.String).Value(0), "1e400")
	l := o.Field(0).(*array.List).ListValues().(*array.String)
	equal(t, "in a list", []string{l.Value(0), l.Value(1), l.Value(2)}, []string{"1E400", "x", "2.50"})
	f := column(t, r, "f").(*array.Float64).Value(1)
	if f != 0 || !math.Signbit(f) {
		t.Errorf("-0 in a float64 column: %v (sign %v)", f, math.Signbit(f))
	}
	g := column(t, r, "g").(*array.Struct).Field(0).(*array.Float64).Value(1)
	if g != 0 || !math.Signbit(g) {
		t.Errorf("nested -0 in a float64 field: %v (sign %v)", g, math.Signbit(g))
	}
	d := column(t, r, "d").(*array.Decimal128)
	equal(t, "decimal", d.ValueStr(0), "12345678901234567890.5")
	if d.IsNull(1) || d.Value(1).Sign() != 0 {
		t.Errorf("-0 in a decimal column: %v, want 0", d.ValueStr(1))
	}
}

// TestNotAnObject: a document that is not a JSON object is quarantined
// parse_error with what it is: valid JSON of another kind is named, and
// anything else is invalid JSON at the byte where it stops being JSON,
// never taken for the kind its first byte starts (not JSON is no null,
// "trouble" no boolean).
func TestNotAnObject(t *testing.T) {
	e := newEngine(t, engine.Config{})
	cases := []struct{ doc, detail string }{
		{`not JSON`, "invalid JSON at byte 0: invalid literal"},
		{`nope`, "invalid JSON at byte 0: invalid literal"},
		{`trouble`, "invalid JSON at byte 0: invalid literal"},
		{`-x`, "invalid JSON at byte 1: invalid number"},
		{`"abc`, "invalid JSON: unexpected end of document: unterminated string"},
		{`[1`, "invalid JSON: unexpected end of document: expected ',' or ']' in an array"},
		{`[1,]`, "invalid JSON at byte 3: expected a value"},
		{`x`, "invalid JSON at byte 0: expected a value"},
		{"\xff", "invalid JSON at byte 0: expected a value"},
		{`[1] 2`, "invalid JSON at byte 4: trailing characters after the document"},
		{`null`, "document is not a JSON object: found null"},
		{`true`, "document is not a JSON object: found a boolean"},
		{` -1.5e3 `, "document is not a JSON object: found a number"},
		{`"abc"`, "document is not a JSON object: found a string"},
		{`[1,{"a":[]}]`, "document is not a JSON object: found an array"},
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), "document is not a JSON object: found an array nested deeper than 64 levels"},
		{``, "document is not a JSON object: found an empty document"},
	}
	var docsIn []string
	for _, c := range cases {
		docsIn = append(docsIn, c.doc)
	}
	out := push(t, e, docs("s", docsIn...))
	if len(out.Quarantined) != len(cases) {
		t.Fatalf("%d quarantined, want %d", len(out.Quarantined), len(cases))
	}
	for _, q := range out.Quarantined {
		c := cases[q.Row]
		if q.Reason != engine.ReasonParse || q.Detail != c.detail {
			t.Errorf("%q: %s %q, want parse_error %q", c.doc, q.Reason, q.Detail, c.detail)
		}
	}
}
