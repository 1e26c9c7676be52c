package engine_test

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

func rowSpec(name, types string, cols ...string) engine.StreamSpec {
	s := engine.StreamSpec{Name: name, Declared: true, Types: types}
	for i := 0; i+1 < len(cols); i += 2 {
		s.Columns = append(s.Columns, engine.Column{Name: cols[i], Type: cols[i+1], Nullable: true})
	}
	return s
}

// row encodes values; "\x00NULL" stands for null.
func row(vals ...string) []byte {
	var b []byte
	for _, v := range vals {
		if v == "\x00NULL" {
			b = source.AppendRowNull(b)
		} else {
			b = source.AppendRowValue(b, []byte(v))
		}
	}
	return b
}

const null = "\x00NULL"

func TestRowEncoding(t *testing.T) {
	p := source.AppendRow(nil, [][]byte{[]byte("42"), nil, []byte("")}, []bool{false, true, false})
	p = source.AppendRowUnchanged(p)
	vals, err := source.DecodeRow(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 4 || string(vals[0].Text) != "42" || !vals[1].Null || vals[2].Null || len(vals[2].Text) != 0 || !vals[3].Unchanged {
		t.Fatalf("decoded %+v", vals)
	}
	if _, err := source.DecodeRow(nil, []byte{9, 'a'}); err == nil {
		t.Fatal("a truncated row decoded")
	}
}

func TestDeclaredPostgresRows(t *testing.T) {
	spec := rowSpec("t", source.TypesPostgres,
		"id", "int8", "amount", "numeric(10,2)", "at", "timestamptz", "d", "date",
		"tags", "_text", "blob", "bytea", "u", "uuid", "doc", "jsonb", "big", "numeric")
	spec.Keyed, spec.Key = true, []string{"id"}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	b := &engine.RawBatch{Stream: "t"}
	b.Append(uint8(source.OpInsert), 1, []byte("1"), row("1", "12.30", "2024-01-02 03:04:05.5+02:00", "2024-01-02",
		`{a,"b c",NULL}`, `\x0102`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `{"x":1}`, "123456789012345678901234567890.123456789"))
	b.Append(uint8(source.OpUpdate), 2, []byte("2"), row("2", null, null, null, null, null, null, null, null))
	b.Append(uint8(source.OpInsert), 3, []byte("3"), row("3", "1.234", null, null, null, null, null, null, null))                 // scale: the cell is held
	b.Append(uint8(source.OpInsert), 4, []byte("4"), row("4", "1", null, "2023-02-30", null, null, null, null, null))             // bad date
	b.Append(uint8(source.OpInsert), 5, []byte("5"), row("99999999999999999999", null, null, null, null, null, null, null, null)) // a key column
	b.Append(uint8(source.OpInsert), 6, []byte("6"), append(row("6", null, null, null, null, null, null, null), 1))               // unchanged TOAST
	b.Append(uint8(source.OpDelete), 7, []byte("7"), nil)
	out := push(t, e, b)
	var reasons []engine.Reason
	for _, q := range out.Quarantined {
		reasons = append(reasons, q.Reason)
	}
	equal(t, "reasons", reasons, []engine.Reason{engine.ReasonTypeConflict, engine.ReasonOutOfRange, engine.ReasonUnchanged})
	equal(t, "held", len(out.Held), 1)
	h := out.Held[0]
	equal(t, "held cell", []any{h.Row, h.Column, string(h.Value), h.Reason}, []any{2, "amount", "1.234", engine.ReasonOutOfRange})
	r := out.Record
	equal(t, "rows", r.NumRows(), int64(4))
	wantTypes := map[string]arrow.DataType{
		"id":     arrow.PrimitiveTypes.Int64,
		"amount": &arrow.Decimal128Type{Precision: 10, Scale: 2},
		"at":     &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
		"d":      arrow.FixedWidthTypes.Date32,
		"tags":   arrow.ListOf(arrow.BinaryTypes.String),
		"blob":   arrow.BinaryTypes.Binary,
		"u":      &arrow.FixedSizeBinaryType{ByteWidth: 16},
		"doc":    arrow.BinaryTypes.String,
		"big":    arrow.BinaryTypes.String,
	}
	for name, want := range wantTypes {
		if got := column(t, r, name).DataType(); !arrow.TypeEqual(got, want) {
			t.Errorf("%s: type %s, want %s", name, got, want)
		}
	}
	equal(t, "amount", column(t, r, "amount").(*array.Decimal128).Value(0), decimal128.FromI64(1230))
	at := column(t, r, "at").(*array.Timestamp).Value(0)
	equal(t, "at", at.ToTime(arrow.Microsecond).UTC().Format("2006-01-02T15:04:05.000Z07:00"), "2024-01-02T01:04:05.500Z")
	tags := column(t, r, "tags").(*array.List)
	vals := tags.ListValues().(*array.String)
	equal(t, "tags", []string{vals.Value(0), vals.Value(1)}, []string{"a", "b c"})
	equal(t, "tag null", vals.IsNull(2), true)
	equal(t, "blob", column(t, r, "blob").(*array.Binary).Value(0), []byte{1, 2})
	equal(t, "big", column(t, r, "big").(*array.String).Value(0), "123456789012345678901234567890.123456789")
	equal(t, "ops", cells(t, r, "_openetl_op"), []string{"insert", "update", "insert", "delete"})
	for i := 1; i < 9; i++ {
		if !r.Column(i).IsNull(1) || !r.Column(i).IsNull(2) || !r.Column(i).IsNull(3) {
			t.Errorf("column %d: want nulls in rows 1 to 3", i)
		}
	}
}

func TestDeclaredMySQLRows(t *testing.T) {
	spec := rowSpec("m", source.TypesMySQL, "u", "bigint unsigned", "d", "decimal(20,4)", "dt", "datetime", "e", "enum('a','b')")
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	b := &engine.RawBatch{Stream: "m"}
	b.Append(uint8(source.OpInsert), 1, nil, row("18446744073709551615", "-0.5", "2024-01-02 03:04:05", "b"))
	b.Append(uint8(source.OpInsert), 2, nil, row("-1", null, null, null))
	out := push(t, e, b)
	// -1 is no bigint unsigned: the cell is held, the row lands.
	equal(t, "quarantined", len(out.Quarantined), 0)
	equal(t, "held", len(out.Held), 1)
	equal(t, "held cell", []any{out.Held[0].Row, out.Held[0].Column, string(out.Held[0].Value), out.Held[0].Reason},
		[]any{1, "u", "-1", engine.ReasonOutOfRange})
	equal(t, "u null", column(t, out.Record, "u").IsNull(1), true)
	equal(t, "u", column(t, out.Record, "u").(*array.Uint64).Value(0), uint64(18446744073709551615))
	equal(t, "d", column(t, out.Record, "d").(*array.Decimal128).Value(0), decimal128.FromI64(-5000))
	equal(t, "e", cells(t, out.Record, "e"), []string{"b", "<nil>"})
}

func TestDeclaredStateAndID(t *testing.T) {
	spec := rowSpec("orders", "", "id", "int4", "n", "text", "b", "bool")
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	v := loadIDVectors(t)[6]
	r := push(t, e, batch("orders", rec{source.OpInsert, v.Seq, v.Key, v.Payload})).Record
	equal(t, "id", cells(t, r, "_openetl_id"), []string{v.ID})
	st, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	// The declared schema survives without a spec.
	e2 := newEngine(t, engine.Config{State: st})
	r2 := push(t, e2, batch("orders", rec{source.OpInsert, v.Seq, v.Key, v.Payload})).Record
	if !array.RecordEqual(r, r2) {
		t.Fatalf("restored engine differs:\n%v\n%v", r, r2)
	}
	st2, _ := e2.State()
	equal(t, "state", string(st2), string(st))
}

func TestSchemaPolicies(t *testing.T) {
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{{Name: "f", Policy: engine.PolicyFreeze}, {Name: "d", Policy: engine.PolicyDiscard}}})
	// An empty frozen schema takes nothing new.
	out := push(t, e, docs("f", `{"a":1}`))
	equal(t, "frozen", out.Quarantined[0].Reason, engine.ReasonTypeConflict)
	equal(t, "blocked", out.SchemaChanges, []engine.SchemaChange{{Stream: "f", Column: "a", Kind: engine.ChangeBlocked, To: "int64"}})
	out = push(t, e, docs("d", `{"a":1}`))
	equal(t, "discarded", out.SchemaChanges, []engine.SchemaChange{{Stream: "d", Column: "a", Kind: engine.ChangeDiscarded}})
	equal(t, "discard columns", colNames(out.Record)[0], "_openetl_id")

	e = newEngine(t, engine.Config{})
	out = push(t, e, docs("s", `{"a":1}`))
	equal(t, "added", out.SchemaChanges, []engine.SchemaChange{{Stream: "s", Column: "a", Kind: engine.ChangeAdded, To: "int64"}})
	out = push(t, e, docs("s", `{"a":1.5}`))
	equal(t, "widened", out.SchemaChanges, []engine.SchemaChange{{Stream: "s", Column: "a", Kind: engine.ChangeWidened, From: "int64", To: "float64"}})
	out = push(t, e, docs("s", `{"a":2.5}`))
	equal(t, "no change", len(out.SchemaChanges), 0)
}

// FuzzPushRows pushes declared rows built from fuzzed values (and raw
// fuzzed payloads) through the binding: no error, every row is output or
// quarantined, the record has the declared types, and UTF-8 stays valid.
func FuzzPushRows(f *testing.F) {
	f.Add(uint8(1), "1", "12.34", "2024-01-02 03:04:05+02", `{a,"b c",NULL}`, `\x00ff`, false)
	f.Add(uint8(2), "99999999999999999999", "1.234", "infinity", `{{1}}`, `zz`, false)
	f.Add(uint8(3), "", "", "", "", "", true)
	f.Add(uint8(1), "-1", "NaN", "2024-01-02T03:04:05Z", `{"\\"",x}`, `\x`, false)
	f.Add(uint8(1), "\x01", "\x80", "\x02\x41", "\xff", "\x00", true)
	spec := rowSpec("rows", "", "i", "int4", "n", "numeric(6,2)", "ts", "timestamptz", "a", "text[]", "b", "bytea")
	e, err := engine.New(engine.Config{Lanes: 2, Streams: []engine.StreamSpec{spec}})
	if errors.Is(err, engine.ErrUnavailable) {
		f.Skip("engine not available in this build")
	}
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = e.Close() })
	want := []arrow.DataType{
		arrow.PrimitiveTypes.Int32, &arrow.Decimal128Type{Precision: 6, Scale: 2},
		&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
		arrow.ListOf(arrow.BinaryTypes.String), arrow.BinaryTypes.Binary,
	}
	b := &engine.RawBatch{Stream: "rows"}
	f.Fuzz(func(t *testing.T, op uint8, i, n, ts, a, by string, raw bool) {
		b.Reset()
		b.Append(uint8(op), 1, []byte(i), row(i, n, ts, a, by))
		b.Append(uint8(source.OpInsert), 2, nil, row(null, n, null, a, null))
		if raw {
			b.Append(uint8(op), 3, nil, []byte(i+n+ts+a+by))
		}
		out, err := e.Push(b, syncedAt)
		if err != nil {
			t.Fatalf("Push: %v", err)
		}
		taken := 0
		if out.Record != nil {
			defer out.Record.Release()
			taken = int(out.Record.NumRows())
			for c, w := range want {
				if got := out.Record.Column(c).DataType(); !arrow.TypeEqual(got, w) {
					t.Fatalf("column %d: %s, want %s", c, got, w)
				}
			}
			l := out.Record.Column(3).(*array.List).ListValues().(*array.String)
			for k := 0; k < l.Len(); k++ {
				if !utf8.ValidString(l.Value(k)) {
					t.Fatalf("invalid UTF-8 %q", l.Value(k))
				}
			}
		}
		if taken+len(out.Quarantined) != b.Len() {
			t.Fatalf("rows in %d != out %d + quarantined %d", b.Len(), taken, len(out.Quarantined))
		}
	})
}

func TestNestedStructsAndLists(t *testing.T) {
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{{Name: "ts", Timestamps: true}}})
	out := push(t, e, docs("s",
		`{"tags":["x","y"],"addr":{"city":"Paris","zip":75001},"m":{"a":1}}`,
		`{"tags":[],"addr":{"zip":1.5},"m":[1]}`,
	))
	r := out.Record
	want := map[string]arrow.DataType{
		"tags": arrow.ListOf(arrow.BinaryTypes.String),
		"addr": arrow.StructOf(arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Float64, Nullable: true}),
		"m": arrow.BinaryTypes.String, // an object meeting an array: JSON text
	}
	for name, w := range want {
		if got := column(t, r, name).DataType(); !arrow.TypeEqual(got, w) {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	equal(t, "m", cells(t, r, "m"), []string{`{"a":1}`, `[1]`})
	addr := column(t, r, "addr").(*array.Struct)
	equal(t, "zip", addr.Field(1).(*array.Float64).Value(0), 75001.0)

	out = push(t, e, docs("ts", `{"at":"2024-01-02T03:04:05.5+02:00"}`))
	at := column(t, out.Record, "at").(*array.Timestamp)
	equal(t, "at", at.Value(0).ToTime(arrow.Microsecond).UTC().Format("2006-01-02T15:04:05.0Z07:00"), "2024-01-02T01:04:05.5Z")
	equal(t, "changes", out.SchemaChanges, []engine.SchemaChange{{Stream: "ts", Column: "at", Kind: engine.ChangeAdded, To: "timestamp"}})
}

func TestDestinationNames(t *testing.T) {
	rules := &engine.NamingRules{MaxLength: 12, Case: engine.CaseLower, Simple: true, Reserved: []string{"order"}}
	spec := rowSpec("Order", "", "Id", "int4", "ID", "int4", "first name", "text")
	e := newEngine(t, engine.Config{Naming: rules, Streams: []engine.StreamSpec{spec}})
	b := &engine.RawBatch{Stream: "Order"}
	b.Append(uint8(source.OpInsert), 1, nil, row("1", "2", "x"))
	out := push(t, e, b)
	equal(t, "columns", colNames(out.Record)[:4], []string{"id", "id_2", "first_name", "_openetl_id"})
	equal(t, "table", out.Table, "order_")
	out = push(t, e, docs("ORDER", `{"Zip Code":1,"zip_code":2}`))
	equal(t, "json columns", colNames(out.Record)[:2], []string{"zip_code", "zip_code_2"})
	equal(t, "json table", out.Table, "order__2")
	st, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	names, err := engine.NamesFromState(st)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "names", names["Order"], engine.StreamNames{Table: "order_", Columns: map[string]string{"Id": "id", "ID": "id_2", "first name": "first_name"}})
	// Other rules later change nothing already given.
	e2 := newEngine(t, engine.Config{State: st, Naming: &engine.NamingRules{Case: engine.CaseUpper}})
	out = push(t, e2, docs("ORDER", `{"zip_code":1,"new":2}`))
	equal(t, "restored", colNames(out.Record)[:3], []string{"zip_code", "zip_code_2", "NEW"})
	equal(t, "restored table", out.Table, "order__2")
	if _, err := engine.New(engine.Config{Naming: &engine.NamingRules{MaxLength: 3}}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Errorf("MaxLength 3: %v", err)
	}
}

func TestHoldBackAndRelease(t *testing.T) {
	spec := rowSpec("t", "", "id", "int4", "iv", "interval", "u", "uuid")
	e := newEngine(t, engine.Config{Unsupported: []string{"interval", "struct"}, Streams: []engine.StreamSpec{spec}})
	b := &engine.RawBatch{Stream: "t"}
	b.Append(uint8(source.OpInsert), 1, []byte("k1"), row("1", "1 day", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"))
	b.Append(uint8(source.OpInsert), 2, []byte("k2"), row("2", null, null))
	b.Append(uint8(source.OpInsert), 3, []byte("k3"), row("3", "1 fortnight", null))
	out := push(t, e, b)
	equal(t, "quarantined", len(out.Quarantined), 1)
	equal(t, "columns", colNames(out.Record)[:3], []string{"id", "u", "_openetl_id"})
	equal(t, "held", out.Held, []engine.Held{{Row: 0, Column: "iv", Value: []byte("1 day")}})
	_, _, key, _ := b.Row(out.Held[0].Row)
	equal(t, "held key", string(key), "k1")

	rel, ok := e.(engine.Releaser)
	if !ok {
		t.Fatal("the engine is not a Releaser")
	}
	a, err := rel.Release("t", "iv", [][]byte{[]byte("1 day"), []byte("2 mons 00:00:01")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	iv := a.(*array.MonthDayNanoInterval)
	equal(t, "released", []arrow.MonthDayNanoInterval{iv.Value(0), iv.Value(1)},
		[]arrow.MonthDayNanoInterval{{Days: 1}, {Months: 2, Nanoseconds: 1e9}})
	if _, err := rel.Release("t", "iv", [][]byte{[]byte("x")}); !errors.Is(err, engine.ErrInvalidInput) {
		t.Errorf("bad held value: %v", err)
	}

	out = push(t, e, docs("j", `{"a":1,"s":{"x":"y"}}`))
	equal(t, "json held", out.Held, []engine.Held{{Row: 0, Column: "s", Value: []byte(`{"x":"y"}`)}})
	equal(t, "json columns", colNames(out.Record)[0], "a")
	out = push(t, e, docs("j", `{"a":1}`))
	equal(t, "no held", len(out.Held), 0)
}

func TestJSONDecimals(t *testing.T) {
	e := newEngine(t, engine.Config{})
	out := push(t, e, docs("d",
		`{"big":123456789012345678901234567890,"pi":3.14159265358979323846,"f":0.6046602879796196,"n":1}`,
		`{"big":-1,"pi":2.5,"f":0.5,"n":12345678901234567890}`,
	))
	r := out.Record
	want := map[string]arrow.DataType{
		"big": &arrow.Decimal128Type{Precision: 38, Scale: 0},
		"pi":  arrow.BinaryTypes.String, // a decimal meeting a float: exact text
		"f":   arrow.PrimitiveTypes.Float64,
		"n":   &arrow.Decimal128Type{Precision: 38, Scale: 0},
	}
	for name, w := range want {
		if got := column(t, r, name).DataType(); !arrow.TypeEqual(got, w) {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	equal(t, "big", cells(t, r, "big"), []string{"123456789012345678901234567890", "-1"})
	equal(t, "pi", cells(t, r, "pi"), []string{"3.14159265358979323846", "2.5"})
	equal(t, "n", cells(t, r, "n"), []string{"1", "12345678901234567890"})
}

func TestMissingKey(t *testing.T) {
	spec := engine.StreamSpec{Name: "k", Declared: true, Keyed: true, Key: []string{"id"},
		Columns: []engine.Column{{Name: "id", Type: "int4"}}}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	b := &engine.RawBatch{Stream: "k"}
	b.Append(uint8(source.OpInsert), 1, []byte("1"), row("1"))
	b.Append(uint8(source.OpInsert), 2, nil, row("2"))
	out := push(t, e, b)
	equal(t, "quarantined", out.Quarantined, []engine.Quarantined{{Row: 1, Reason: engine.ReasonMissingKey, Detail: "the stream has a primary key but the record has none"}})
}

// TestNullKeyColumn: a row of a keyed stream whose key column is null
// (a Kafka Avro record whose key field is null, say) is quarantined
// missing_key naming the column, never merged under a null key; a
// delete without a payload still lands.
func TestNullKeyColumn(t *testing.T) {
	spec := engine.StreamSpec{Name: "k", Declared: true, Keyed: true, Key: []string{"a", "b"},
		Columns: []engine.Column{{Name: "a", Type: "int4", Nullable: true}, {Name: "b", Type: "text", Nullable: true}, {Name: "v", Type: "text", Nullable: true}}}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	b := &engine.RawBatch{Stream: "k"}
	b.Append(uint8(source.OpInsert), 1, []byte("1"), row("1", "x", null))
	b.Append(uint8(source.OpInsert), 2, []byte("2"), row("2", null, "v"))
	b.Append(uint8(source.OpUpdate), 3, []byte("3"), row(null, "y", "v"))
	b.Append(uint8(source.OpDelete), 4, []byte("4"), nil)
	out := push(t, e, b)
	equal(t, "quarantined", out.Quarantined, []engine.Quarantined{
		{Row: 1, Reason: engine.ReasonMissingKey, Detail: `key column "b" is null`},
		{Row: 2, Reason: engine.ReasonMissingKey, Detail: `key column "a" is null`}})
	equal(t, "ops", cells(t, out.Record, "_openetl_op"), []string{"insert", "delete"})
}

// TestJSONKeyFieldMissing: a document of a keyed JSON stream without a
// non-null value for each Key field (a Kafka JSON message whose payload
// lacks Config.PrimaryKey's field) is quarantined missing_key naming the
// field, and its fields add no column; a delete without a document, and
// an unkeyed stream's documents, are taken.
func TestJSONKeyFieldMissing(t *testing.T) {
	keyed := engine.StreamSpec{Name: "k", Keyed: true, Key: []string{"id"}}
	plain := engine.StreamSpec{Name: "p"}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{keyed, plain}})
	recs := []rec{
		{source.OpInsert, 1, "1", `{"id":1,"v":"a"}`},
		{source.OpInsert, 2, "2", `{"v":"b","extra":true}`},
		{source.OpUpdate, 3, "3", `{"id":null,"v":"c"}`},
		{source.OpDelete, 4, "4", ``},
		{source.OpUpdate, 5, "5", `{"id":5}`},
	}
	out := push(t, e, batch("k", recs...))
	equal(t, "quarantined", out.Quarantined, []engine.Quarantined{
		{Row: 1, Reason: engine.ReasonMissingKey, Detail: `key field "id" is missing or null`},
		{Row: 2, Reason: engine.ReasonMissingKey, Detail: `key field "id" is missing or null`}})
	equal(t, "id", cells(t, out.Record, "id"), []string{"1", "<nil>", "5"})
	equal(t, "columns", colNames(out.Record)[:2], []string{"id", "v"})
	if len(out.Record.Schema().FieldIndices("extra")) != 0 {
		t.Errorf("a quarantined document's field became a column: %v", colNames(out.Record))
	}
	out = push(t, e, batch("p", recs...))
	if len(out.Quarantined) != 0 || out.Record.NumRows() != 5 {
		t.Errorf("unkeyed stream: %d rows, quarantined %+v", out.Record.NumRows(), out.Quarantined)
	}
}

// TestDeclaredEnumsMarked: an enum(...) column, MySQL's or the Postgres
// source's, is utf8 with LogicalTypeKey = LogicalTypeEnum in its field
// metadata; no other field has metadata; a declaration with an added
// label gives the same schema and a label no declaration lists is taken.
func TestDeclaredEnumsMarked(t *testing.T) {
	for _, types := range []string{source.TypesPostgres, source.TypesMySQL} {
		t.Run(types, func(t *testing.T) {
			spec := rowSpec("t", types, "id", "int4", "mood", "enum('sad','ok','happy')", "name", "text", "s", "set('a','b')")
			e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
			r := push(t, e, batch("t",
				rec{source.OpInsert, 1, "1", string(row("1", "happy", "x", "a"))},
				rec{source.OpInsert, 2, "2", string(row("2", "ecstatic", null, null))},
				rec{source.OpInsert, 3, "3", string(row("3", null, null, null))})).Record
			sc := r.Schema()
			for i, f := range sc.Fields() {
				v, ok := f.Metadata.GetValue(engine.LogicalTypeKey)
				switch {
				case f.Name == "mood":
					if !arrow.TypeEqual(f.Type, arrow.BinaryTypes.String) || !ok || v != engine.LogicalTypeEnum || f.Metadata.Len() != 1 {
						t.Fatalf("field %d %v: want utf8 with %s=%s", i, f, engine.LogicalTypeKey, engine.LogicalTypeEnum)
					}
				case f.HasMetadata():
					t.Fatalf("field %d %v has metadata", i, f)
				}
			}
			equal(t, "mood", cells(t, r, "mood"), []string{"happy", "ecstatic", "<nil>"})

			// ALTER TYPE ... ADD VALUE: the next discovery declares one
			// more label; the schema (metadata included) is the same.
			st, err := e.State()
			if err != nil {
				t.Fatal(err)
			}
			spec2 := rowSpec("t", types, "id", "int4", "mood", "enum('sad','ok','happy','ecstatic')", "name", "text", "s", "set('a','b')")
			e2 := newEngine(t, engine.Config{State: st, Streams: []engine.StreamSpec{spec2}})
			r2 := push(t, e2, batch("t", rec{source.OpInsert, 4, "4", string(row("4", "ecstatic", null, null))})).Record
			if !r2.Schema().Equal(sc) {
				t.Fatalf("schema changed with a label added:\n%v\n%v", sc, r2.Schema())
			}
		})
	}
}
