package postgres_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// goldenCol is one column of the golden type table.
type goldenCol struct {
	name  string
	decl  string // the column's type in CREATE TABLE (%s: the enum's name)
	typ   string // the type name Discover must report
	arrow string // the pyarrow type the column must read back as
	// want is the SQL expression (%[1]s: the column) that makes Postgres
	// compute the value's canonical text, the one testdata/types_read.py
	// makes of the Arrow value (see there).
	want string
	cmp  cmpKind
	// held, when set, allows the destination to hold the column back
	// (sink.Capabilities: a type it can't take): the column is then
	// absent from the Parquet table and every value must be under _held/
	// with the text this SQL expression computes.
	held string
}

type cmpKind uint8

const (
	cmpExact   cmpKind = iota // the canonical texts are equal
	cmpFloat32                // both parse to the same float32 (NaN equals NaN; -0 is not 0)
	cmpFloat64
	cmpListExact // JSON arrays of canonical texts, equal element by element
	cmpListFloat64
)

// Canonical texts computed by the server: the same as testdata/types_read.py's.
const (
	wantText     = `%[1]s::text`
	wantOutput   = `CASE WHEN %[1]s IS NOT NULL THEN format('%%s', %[1]s) END` // the type's output function, as sent (char(n) keeps its padding)
	wantDays     = `CASE WHEN NOT isfinite(%[1]s) THEN 'infinite' ELSE (%[1]s - date '1970-01-01')::text END`
	wantMicros   = `CASE WHEN NOT isfinite(%[1]s) THEN 'infinite' ELSE trunc(extract(epoch FROM %[1]s) * 1000000)::text END`
	wantTimeUsec = `trunc(extract(epoch FROM %[1]s) * 1000000)::text`
	// months, days and the time part in nanoseconds: interval's three fields
	wantInterval = `(extract(year FROM %[1]s) * 12 + extract(month FROM %[1]s))::text || ' ' || extract(day FROM %[1]s)::text || ' ' ||
	trunc((extract(hour FROM %[1]s) * 3600 + extract(minute FROM %[1]s) * 60 + extract(second FROM %[1]s)) * 1000000000)::text`
)

// wantList applies elem (%[1]s: x) to each element of an array column.
func wantList(elem string) string {
	return `CASE WHEN %[1]s IS NULL THEN NULL ELSE (SELECT COALESCE(json_agg(CASE WHEN x IS NULL THEN NULL ELSE ` +
		strings.ReplaceAll(fmt.Sprintf(elem, "x"), "%", "%%") + ` END ORDER BY o), '[]')::text FROM unnest(%[1]s) WITH ORDINALITY u(x, o)) END`
}

// goldenCols has a column of every type of the engine's Postgres table
// (package engine's doc) and a few the engine doesn't know, which must
// arrive as their text form.
var goldenCols = []goldenCol{
	{"c_int2", "int2", "int2", "int16", wantText, cmpExact, ""},
	{"c_int4", "int4", "int4", "int32", wantText, cmpExact, ""},
	{"c_int8", "int8", "int8", "int64", wantText, cmpExact, ""},
	{"c_float4", "float4", "float4", "float", wantText, cmpFloat32, ""},
	{"c_float8", "float8", "float8", "double", wantText, cmpFloat64, ""},
	{"c_numeric", "numeric", "numeric", "string", wantText, cmpExact, ""},
	{"c_numeric_wide", "numeric(60,30)", "numeric(60,30)", "string", wantText, cmpExact, ""},
	{"c_decimal", "numeric(38,18)", "numeric(38,18)", "decimal128(38, 18)", wantText, cmpExact, ""},
	{"c_money", "numeric(10,2)", "numeric(10,2)", "decimal128(10, 2)", wantText, cmpExact, ""},
	{"c_bool", "bool", "bool", "bool", wantText, cmpExact, ""},
	{"c_text", "text", "text", "string", wantOutput, cmpExact, ""},
	{"c_varchar", "varchar(10)", "varchar", "string", wantOutput, cmpExact, ""},
	{"c_char", "char(5)", "bpchar", "string", wantOutput, cmpExact, ""},
	{"c_name", "name", "name", "string", wantOutput, cmpExact, ""},
	{"c_citext", "citext", "citext", "string", wantOutput, cmpExact, ""},
	{"c_bytea", "bytea", "bytea", "binary", `'\x' || encode(%[1]s, 'hex')`, cmpExact, ""},
	{"c_date", "date", "date", "date32[day]", wantDays, cmpExact, ""},
	{"c_time", "time", "time", "time64[us]", wantTimeUsec, cmpExact, ""},
	{"c_timetz", "timetz", "timetz", "string", wantOutput, cmpExact, ""},
	{"c_timestamp", "timestamp", "timestamp", "timestamp[us]", wantMicros, cmpExact, ""},
	{"c_timestamptz", "timestamptz", "timestamptz", "timestamp[us, tz=UTC]", wantMicros, cmpExact, ""},
	// sink/parquet holds intervals (arrow-go can't write month_day_nano).
	{"c_interval", "interval", "interval", "month_day_nano_interval", wantInterval, cmpExact, wantOutput},
	{"c_uuid", "uuid", "uuid", "fixed_size_binary[16]", wantText, cmpExact, ""},
	{"c_json", "json", "json", "string", wantOutput, cmpExact, ""},
	{"c_jsonb", "jsonb", "jsonb", "string", wantOutput, cmpExact, ""},
	{"c_int4s", "int4[]", "_int4", "list<int32>", wantList(wantText), cmpListExact, ""},
	{"c_int8s", "int8[]", "_int8", "list<int64>", wantList(wantText), cmpListExact, ""},
	{"c_texts", "text[]", "_text", "list<string>", wantList(wantOutput), cmpListExact, ""},
	{"c_bools", "bool[]", "_bool", "list<bool>", wantList(wantText), cmpListExact, ""},
	{"c_float8s", "float8[]", "_float8", "list<double>", wantList(wantText), cmpListFloat64, ""},
	{"c_numerics", "numeric(10,2)[]", "_numeric", "list<string>", wantList(wantText), cmpListExact, ""},
	{"c_dates", "date[]", "_date", "list<date32[day]>", wantList(wantDays), cmpListExact, ""},
	{"c_timestamptzs", "timestamptz[]", "_timestamptz", "list<timestamp[us, tz=UTC]>", wantList(wantMicros), cmpListExact, ""},
	// Enums are declared by their labels (the engine marks them enums).
	{"c_enum", "%s", "enum('sad','ok','happy')", "string", wantOutput, cmpExact, ""},
	// Types the engine doesn't know: text, never dropped.
	{"c_inet", "inet", "inet", "string", wantOutput, cmpExact, ""},
	{"c_point", "point", "point", "string", wantOutput, cmpExact, ""},
	{"c_tsvector", "tsvector", "tsvector", "string", wantOutput, cmpExact, ""},
	{"c_int4range", "int4range", "int4range", "string", wantOutput, cmpExact, ""},
}

// goldenRow is one row of the golden table: id and the SQL literals of the
// columns it sets (the others are null).
type goldenRow struct {
	id   int
	vals map[string]string
	// quarantine, when set, is the reason the engine must quarantine the
	// row with (a value its Arrow type can't hold, or an array shape it
	// doesn't take); mayQuarantine allows either an exact round trip or
	// that reason.
	quarantine    string
	mayQuarantine bool
	// heldCell, when set, is the reason the engine must hold the cells of
	// the columns the row sets (a value its Arrow type can't hold): the
	// row is written with nulls there, and each value is under _held/,
	// in the source's text form.
	heldCell string
}

var goldenRows = []goldenRow{
	{id: 1}, // all null
	{id: 2, vals: map[string]string{ // typical values
		"c_int2": "12", "c_int4": "-34", "c_int8": "5678901234", "c_float4": "1.5", "c_float8": "0.1",
		"c_numeric": "123.456", "c_numeric_wide": "12345678901234567890123456789.012345678901234567890123456789",
		"c_decimal": "12345678901234567890.123456789012345678", "c_money": "12345678.91", "c_bool": "true",
		"c_text": "'héllo wörld 日本語 🎉 e\u0301 עברית a\u200db'", "c_varchar": "'varchar'", "c_char": "'ab'",
		"c_name": "'a_name'", "c_citext": "'MiXeD'", "c_bytea": `'\xdeadbeef'`, "c_date": "'2024-02-29'",
		"c_time": "'13:45:56.123456'", "c_timetz": "'13:45:56.123456+05:30'", "c_timestamp": "'2024-02-29 23:59:59.999999'",
		"c_timestamptz": "'2024-02-29 23:59:59.999999+14'", "c_interval": "'1 year 2 mons 3 days 04:05:06.789012'",
		"c_uuid": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "c_json": `'{"a" : [1, 2.50, "\u00e9"],  "b":{}}'`,
		"c_jsonb": `'{"a" : [1, 2.50, "\u00e9"],  "b":{}}'`, "c_int4s": "'{1,NULL,-2}'", "c_int8s": "'{9000000000}'",
		"c_texts": "'{a,b}'", "c_bools": "'{t,f,NULL}'", "c_float8s": "'{1.5,-2.25}'", "c_numerics": "'{1.50,NULL,-3}'",
		"c_dates": "'{2024-02-29,NULL,1970-01-01}'", "c_timestamptzs": `'{"2024-01-02 03:04:05.678901+02",NULL}'`,
		"c_enum": "'happy'", "c_inet": "'192.168.1.0/24'", "c_point": "'(1.5,-2)'", "c_tsvector": "'a fat:1A cat'",
		"c_int4range": "'[1,10)'",
	}},
	{id: 3, vals: map[string]string{ // minimums and empties
		"c_int2": "-32768", "c_int4": "-2147483648", "c_int8": "-9223372036854775808", "c_float4": "-3.4028235e38",
		"c_float8": "-1.7976931348623157e308", "c_numeric": "'-0.000000000000000000000000000000000000001'",
		"c_numeric_wide": "-999999999999999999999999999999.999999999999999999999999999999",
		"c_decimal":      "-99999999999999999999.999999999999999999", "c_money": "-99999999.99", "c_bool": "false",
		"c_text": "''", "c_varchar": "''", "c_char": "''", "c_name": "''", "c_citext": "''", "c_bytea": `'\x'`,
		"c_time": "'00:00:00'", "c_timetz": "'00:00:00+15:59'", "c_interval": "'-178000000 years -2147483648 days -2562047 hours'",
		"c_uuid": "'00000000-0000-0000-0000-000000000000'", "c_json": "'null'", "c_jsonb": "'null'",
		"c_int4s": "'{}'", "c_int8s": "'{-9223372036854775808}'", "c_texts": "'{}'", "c_bools": "'{}'", "c_float8s": "'{}'",
		"c_numerics": "'{}'", "c_dates": "'{}'", "c_timestamptzs": "'{}'", "c_enum": "'sad'", "c_inet": "'::'",
		"c_point": "'(0,0)'", "c_tsvector": "''", "c_int4range": "'empty'",
	}},
	{id: 4, vals: map[string]string{ // maximums
		"c_int2": "32767", "c_int4": "2147483647", "c_int8": "9223372036854775807", "c_float4": "3.4028235e38",
		"c_float8": "1.7976931348623157e308", "c_numeric": "'1e1000'",
		"c_numeric_wide": "999999999999999999999999999999.999999999999999999999999999999",
		"c_decimal":      "99999999999999999999.999999999999999999", "c_money": "99999999.99", "c_bool": "true",
		"c_text": "repeat('xé', 100000)", "c_varchar": "'ééééééééé€'", "c_char": "'abcde'", "c_name": "repeat('n', 63)",
		"c_bytea": "(SELECT string_agg(set_byte('\\x00'::bytea, 0, i), ''::bytea ORDER BY i) FROM generate_series(0, 255) i)",
		"c_time":  "'23:59:59.999999'", "c_timetz": "'23:59:59.999999-15:59'",
		"c_interval": "'178000000 years 2147483647 days 2562047 hours'",
		"c_uuid":     "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "c_int4s": "'{2147483647,-2147483648}'",
		"c_int8s": "'{9223372036854775807}'", "c_texts": "array_fill('x'::text, ARRAY[1000])",
		"c_inet": "'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128'",
	}},
	{id: 5, vals: map[string]string{ // NaN
		"c_float4": "'NaN'", "c_float8": "'NaN'", "c_numeric": "'NaN'", "c_numeric_wide": "'NaN'",
		"c_float8s": "'{NaN,1}'", "c_numerics": "'{NaN}'",
	}},
	{id: 6, vals: map[string]string{ // +infinity
		"c_float4": "'Infinity'", "c_float8": "'Infinity'", "c_numeric": "'Infinity'", "c_float8s": "'{Infinity}'",
	}},
	{id: 7, vals: map[string]string{ // -infinity, negative zero
		"c_float4": "'-Infinity'", "c_float8": "'-Infinity'", "c_numeric": "'-Infinity'", "c_float8s": "'{-Infinity,-0}'",
	}},
	{id: 8, vals: map[string]string{ // negative zero, tiny values
		"c_float4": "'-0'", "c_float8": "'-0'", "c_numeric": "'-0.0'", "c_decimal": "0.000000000000000001",
		"c_float8s": "'{5e-324,2.2250738585072014e-308}'",
	}},
	{id: 9, vals: map[string]string{ // subnormals
		"c_float4": "'1e-45'", "c_float8": "'5e-324'",
	}},
	{id: 10, vals: map[string]string{ // time zones, BC
		"c_timestamptz": "'1850-01-01 12:00 Europe/Amsterdam'", // local mean time: +00:19:32
		"c_timetz":      "'12:00:00+05:30:15'",
		"c_timestamp":   "'0044-03-15 12:00:00 BC'",
		"c_date":        "'0001-01-01 BC'",
		"c_timestamptzs": "ARRAY['2024-03-10 02:30:00 America/New_York', '2024-11-03 01:30:00 America/New_York', " +
			"'2024-06-01 00:00:00 Asia/Kathmandu', '0044-03-15 12:00:00+00 BC']::timestamptz[]",
		"c_dates": "'{0044-03-15 BC,2000-01-01}'",
	}},
	{id: 11, vals: map[string]string{ // far future within range
		"c_timestamp": "'294000-12-31 23:59:59.999999'", "c_timestamptz": "'294000-12-31 23:59:59.999999+00'",
		"c_date": "'5874897-12-31'", "c_dates": "'{5874897-12-31}'",
	}},
	{id: 12, vals: map[string]string{ // far past
		"c_timestamp": "'4713-01-01 00:00:00 BC'", "c_timestamptz": "'4713-01-01 00:00:00+00 BC'", "c_date": "'4713-01-01 BC'",
		"c_dates": "'{4713-01-01 BC}'",
	}},
	{id: 13, vals: map[string]string{ // text that quoting must not change
		"c_text": `E'tab\there\nnewline\r\\ backslash "double" ''single'' \u0001 \u007f'`,
		"c_texts": `ARRAY['', NULL, 'NULL', 'null', 'with,comma', 'with "quote"', 'back\slash', '{brace}', ' spaced ', ` +
			`'ünï 🎉', E'new\nline']`,
		"c_json":  `'{"a":1,"a":2}'`, // json keeps duplicate keys and spacing
		"c_jsonb": `'{"big": 1e400, "small": -1e-400, "s": "\u0001 \" \\"}'`,
	}},
	{id: 14, vals: map[string]string{"c_timetz": "'24:00:00-15:59'"}}, // timetz's maximum
	{id: 17, vals: map[string]string{"c_timetz": "'24:00:00+00'"}},
	{id: 15, vals: map[string]string{"c_time": "'24:00:00'"}, heldCell: "out_of_range"},
	{id: 16, vals: map[string]string{"c_interval": "'-1 mons 40 days -00:00:00.000001'"}},

	// Values their Arrow type can't hold: the cell is held out_of_range,
	// the value kept with its reason, never changed or dropped, and the
	// row written with a null there.
	{id: 20, vals: map[string]string{"c_date": "'infinity'"}, heldCell: "out_of_range"},
	{id: 21, vals: map[string]string{"c_date": "'-infinity'"}, heldCell: "out_of_range"},
	{id: 22, vals: map[string]string{"c_timestamp": "'infinity'"}, heldCell: "out_of_range"},
	{id: 23, vals: map[string]string{"c_timestamp": "'-infinity'"}, heldCell: "out_of_range"},
	{id: 24, vals: map[string]string{"c_timestamptz": "'infinity'"}, heldCell: "out_of_range"},
	{id: 25, vals: map[string]string{"c_timestamptz": "'-infinity'"}, heldCell: "out_of_range"},
	{id: 26, vals: map[string]string{"c_decimal": "'NaN'"}, heldCell: "out_of_range"},
	{id: 27, vals: map[string]string{"c_money": "'NaN'"}, heldCell: "out_of_range"},
	// Microseconds since 1970 overflow int64 past about 294247 AD.
	{id: 28, vals: map[string]string{"c_timestamp": "'294276-12-31 23:59:59.999999'"}, heldCell: "out_of_range"},
	{id: 29, vals: map[string]string{"c_timestamptz": "'294276-12-31 23:59:59.999999+00'"}, heldCell: "out_of_range"},
	{id: 31, vals: map[string]string{"c_dates": "'{infinity}'"}, heldCell: "out_of_range"},
	// An interval's time part in nanoseconds overflows int64 past 2562047 hours.
	{id: 30, vals: map[string]string{"c_interval": "'2562048 hours'"}, heldCell: "out_of_range"},
	// Array shapes a list can't hold (package engine's doc).
	{id: 32, vals: map[string]string{"c_int4s": "'{{1,2},{3,4}}'"}, quarantine: "type_conflict"},
	{id: 33, vals: map[string]string{"c_int4s": "'[0:1]={1,2}'"}, quarantine: "type_conflict"},
}

// streamedOffset is added to the ids of the golden rows inserted again
// after the snapshot, so they come through pgoutput.
const streamedOffset = 1000

// TestTypesGolden syncs a table with a column of every supported type
// (and some the engine doesn't know) into sink/parquet, first through the
// snapshot, then the same rows inserted again through the change stream,
// reads it back with pyarrow and compares every value with what Postgres
// computes for the same row. Values an Arrow type can't hold must be
// quarantined with a reason, never changed or dropped.
func TestTypesGolden(t *testing.T) {
	runGolden(t, goldenCols, goldenRows)
}

// runGolden runs the golden table test over cols and rows.
func runGolden(t *testing.T, cols []goldenCol, rows []goldenRow) {
	d := dsn(t)
	tbl, pub, slot, enum := name("golden"), name("pub"), name("slot"), name("mood")
	execSQL(t, d, "CREATE EXTENSION IF NOT EXISTS citext",
		fmt.Sprintf("CREATE TYPE %s AS ENUM ('sad', 'ok', 'happy')", enum))
	var defs, names []string
	for _, c := range cols {
		defs = append(defs, c.name+" "+strings.ReplaceAll(c.decl, "%s", enum))
		names = append(names, c.name)
	}
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, %s)", tbl, strings.Join(defs, ", ")))
	for _, r := range rows {
		set, vals := []string{"id"}, []string{strconv.Itoa(r.id)}
		for _, c := range cols {
			if v, ok := r.vals[c.name]; ok {
				set, vals = append(set, c.name), append(vals, v)
			}
		}
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tbl, strings.Join(set, ", "), strings.Join(vals, ", ")))
	}
	dropSlotAtCleanup(t, d, slot)
	t.Cleanup(func() {
		execSQL(t, d, "DROP PUBLICATION IF EXISTS "+pub, "DROP TABLE IF EXISTS "+tbl, "DROP TYPE IF EXISTS "+enum)
	})

	dir := t.TempDir()
	tables, ckpts := filepath.Join(dir, "tables"), filepath.Join(dir, "checkpoints")
	cfg := postgres.Config{Publication: pub, CreatePublication: true, Tables: []string{tbl}, Slot: slot}

	// The catalog names every column's type, the unknown ones included.
	cat, err := newSource(t, d, cfg).Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st, ok := cat.Stream(tbl)
	if !ok || len(st.Columns) != len(cols)+1 {
		t.Fatalf("catalog %+v: want stream %s with %d columns", cat, tbl, len(cols)+1)
	}
	for i, c := range cols {
		if got, want := st.Columns[i+1], strings.ReplaceAll(c.typ, "%s", enum); got.Name != c.name || got.Type != want {
			t.Errorf("catalog column %d is %s %s, want %s %s", i+1, got.Name, got.Type, c.name, want)
		}
	}

	nQuar, nHeld := 0, 0
	for _, r := range rows {
		if r.quarantine != "" {
			nQuar++
		}
		if r.heldCell != "" {
			nHeld += len(r.vals)
		}
	}
	res := typesSync(t, d, cfg, tables, ckpts)
	if c := res.Streams[tbl]; c.Read != int64(len(rows)) || c.Written+c.Quarantined != c.Read || c.Quarantined < int64(nQuar) || c.Held < int64(nHeld) {
		t.Errorf("snapshot sync counts %+v: want %d read, %d or more quarantined, %d or more held", c, len(rows), nQuar, nHeld)
	}
	t.Run("snapshot", func(t *testing.T) {
		checkGolden(t, d, tbl, enum, cols, rows, tables, ckpts, 0)
	})

	// The same rows again, through pgoutput.
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s (id, %s) SELECT id + %d, %s FROM %s", tbl, strings.Join(names, ", "),
		streamedOffset, strings.Join(names, ", "), tbl))
	res = typesSync(t, d, cfg, tables, ckpts)
	if c := res.Streams[tbl]; c.Read != int64(len(rows)) || c.Written+c.Quarantined != c.Read {
		t.Errorf("streaming sync counts %+v: want %d read", c, len(rows))
	}
	t.Run("streaming", func(t *testing.T) {
		checkGolden(t, d, tbl, enum, cols, rows, tables, ckpts, streamedOffset)
	})
}

// typesSync runs one bounded sync of the golden table into Parquet.
func typesSync(t *testing.T, d string, cfg postgres.Config, tables, ckpts string) etl.Result {
	t.Helper()
	h := &harness{t: t, d: d, cfg: cfg, tables: tables, ckpts: ckpts}
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkGolden compares the rows with ids offset+goldenRows[i].id, as
// pyarrow reads them from the Parquet table (or finds them quarantined),
// with what Postgres computes for them.
func checkGolden(t *testing.T, d, tbl, enum string, cols []goldenCol, rows []goldenRow, tables, ckpts string, offset int) {
	got := readGolden(t, tables, tbl)
	quarantined := readQuarantine(t, ckpts, tbl)
	held := readHeld(t, ckpts, tbl)
	want := expectGolden(t, d, tbl, cols)

	isHeld := map[string]bool{}
	for _, c := range cols {
		if _, ok := got.Types[c.name]; !ok && c.held != "" {
			isHeld[c.name] = true
			t.Logf("column %s (%s) is held back by the destination: checking its values under _held/", c.name, c.decl)
			continue
		}
		if g, w := got.Types[c.name], c.arrow; normalizeListType(g) != w {
			t.Errorf("column %s (%s) reads back as Arrow %s, want %s", c.name, strings.ReplaceAll(c.decl, "%s", enum), g, w)
		}
	}
	byID := map[int]map[string]*string{}
	for _, r := range got.Rows {
		id, _ := strconv.Atoi(deref(r["id"]))
		if _, dup := byID[id]; dup {
			t.Errorf("id %d written twice", id)
		}
		byID[id] = r
	}
	for _, gr := range rows {
		id := gr.id + offset
		row, written := byID[id]
		q, isQuar := quarantined[id]
		switch {
		case written && isQuar:
			t.Errorf("row %d both written and quarantined (%s: %s)", id, q.Reason, q.Detail)
			continue
		case !written && !isQuar:
			t.Errorf("row %d neither written nor quarantined: dropped", id)
			continue
		case isQuar:
			if want := gr.quarantine; want == "" && !gr.mayQuarantine {
				t.Errorf("row %d (%s) quarantined %s: %s; want it written exactly", id, describe(gr), q.Reason, q.Detail)
			} else if want != "" && q.Reason != want || gr.mayQuarantine && q.Reason != "out_of_range" {
				t.Errorf("row %d (%s) quarantined %s (%s), want reason %s", id, describe(gr), q.Reason, q.Detail, want)
			} else {
				t.Logf("row %d (%s) quarantined %s: %s", id, describe(gr), q.Reason, q.Detail)
			}
			if q.Op != "insert" {
				t.Errorf("row %d quarantined with op %q, want insert", id, q.Op)
			}
			continue
		}
		if gr.quarantine != "" {
			t.Errorf("row %d (%s) was written, want it quarantined %s: %v", id, describe(gr), gr.quarantine, show(row))
			continue
		}
		if gr.heldCell != "" {
			for c := range gr.vals {
				if row[c] != nil {
					t.Errorf("row %d column %s written as %s, want a null (the cell held)", id, c, cut(*row[c]))
				}
				if msg := compareGolden(cmpExact, held[id][c], want[id][c+"#text"]); msg != "" {
					t.Errorf("row %d column %s held: %s\n  literal: %s", id, c, msg, cut(gr.vals[c]))
				}
				if r := deref(held[id][c+"#reason"]); r != gr.heldCell {
					t.Errorf("row %d column %s held with reason %s, want %s", id, c, r, gr.heldCell)
				}
			}
			continue
		}
		if op := deref(row["_openetl_op"]); op != "insert" {
			t.Errorf("row %d has op %q, want insert", id, op)
		}
		exp := want[id]
		if exp == nil {
			t.Fatalf("the server has no row %d", id)
		}
		for _, c := range cols {
			if isHeld[c.name] {
				if msg := compareGolden(cmpExact, held[id][c.name], exp[c.name+"#held"]); msg != "" {
					t.Errorf("row %d column %s (%s) held: %s\n  literal: %s", id, c.name, c.decl, msg, cut(gr.vals[c.name]))
				}
				continue
			}
			if msg := compareGolden(c.cmp, row[c.name], exp[c.name]); msg != "" {
				t.Errorf("row %d column %s (%s): %s\n  literal: %s", id, c.name, strings.ReplaceAll(c.decl, "%s", enum), msg,
					cut(gr.vals[c.name]))
			}
		}
	}
}

func describe(r goldenRow) string {
	var parts []string
	for k, v := range r.vals {
		parts = append(parts, k+"="+cut(v))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func show(row map[string]*string) string {
	var parts []string
	for k, v := range row {
		if v != nil && !strings.HasPrefix(k, "_openetl_") && k != "id" {
			parts = append(parts, k+"="+cut(*v))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func cut(s string) string {
	if len(s) > 120 {
		return s[:120] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

func deref(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// normalizeListType turns pyarrow's "list<element: int32>" (or item:)
// into "list<int32>".
func normalizeListType(s string) string {
	for _, p := range []string{"list<element: ", "list<item: "} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return "list<" + rest
		}
	}
	return s
}

// compareGolden returns "" when got (from pyarrow) equals want (from the
// server), else what differs.
func compareGolden(k cmpKind, got, want *string) string {
	if got == nil || want == nil {
		if got == nil && want == nil {
			return ""
		}
		return fmt.Sprintf("got %s, want %s", cut(deref(got)), cut(deref(want)))
	}
	switch k {
	case cmpExact:
		if *got != *want {
			return fmt.Sprintf("got %q, want %q", cut(*got), cut(*want))
		}
	case cmpFloat32, cmpFloat64:
		bits := 64
		if k == cmpFloat32 {
			bits = 32
		}
		if !sameFloat(*got, *want, bits) {
			return fmt.Sprintf("got %s, want %s", *got, *want)
		}
	case cmpListExact, cmpListFloat64:
		var g, w []*string
		if err := json.Unmarshal([]byte(*got), &g); err != nil {
			return fmt.Sprintf("got %q: %v", cut(*got), err)
		}
		if err := json.Unmarshal([]byte(*want), &w); err != nil {
			return fmt.Sprintf("server sent %q: %v", cut(*want), err)
		}
		if len(g) != len(w) {
			return fmt.Sprintf("got %d elements %s, want %d %s", len(g), cut(*got), len(w), cut(*want))
		}
		ek := cmpExact
		if k == cmpListFloat64 {
			ek = cmpFloat64
		}
		for i := range g {
			if msg := compareGolden(ek, g[i], w[i]); msg != "" {
				return fmt.Sprintf("element %d: %s", i, msg)
			}
		}
	}
	return ""
}

// sameFloat: got (Python's repr of the Arrow value) and want (the
// server's text) are the same number of the column's width, NaN equal to
// NaN and -0 distinct from 0.
func sameFloat(got, want string, bits int) bool {
	g, err1 := strconv.ParseFloat(got, 64)
	w, err2 := strconv.ParseFloat(want, bits)
	if err1 != nil || err2 != nil {
		return false
	}
	if bits == 32 && float64(float32(g)) != g && !math.IsNaN(g) {
		return false // not a float32 value at all
	}
	if math.IsNaN(g) || math.IsNaN(w) {
		return math.IsNaN(g) && math.IsNaN(w)
	}
	return math.Float64bits(g) == math.Float64bits(w)
}

type goldenRead struct {
	Types map[string]string
	Rows  []map[string]*string
}

// readGolden reads the stream with pyarrow (testdata/types_read.py).
func readGolden(t *testing.T, tables, stream string) goldenRead {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "types_read.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), script, tables, stream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var r goldenRead
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("pyarrow output: %v", err)
	}
	return r
}

type quarantineRecord struct {
	Op, Reason, Detail, Key string
}

// readQuarantine reads the stream's published quarantine files, by id.
func readQuarantine(t *testing.T, ckpts, stream string) map[int]quarantineRecord {
	t.Helper()
	out := map[int]quarantineRecord{}
	files, err := filepath.Glob(filepath.Join(ckpts, "*", "_quarantine", stream, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var q quarantineRecord
			if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			vals, err := source.DecodeRow(nil, []byte(q.Key))
			if err != nil || len(vals) != 1 {
				t.Fatalf("%s: key %q: %v", f, q.Key, err)
			}
			id, err := strconv.Atoi(string(vals[0].Text))
			if err != nil {
				t.Fatalf("%s: key %q: %v", f, q.Key, err)
			}
			if _, dup := out[id]; dup {
				t.Errorf("row %d quarantined twice", id)
			}
			out[id] = q
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// readHeld reads the stream's published held values, by id and column.
func readHeld(t *testing.T, ckpts, stream string) map[int]map[string]*string {
	t.Helper()
	out := map[int]map[string]*string{}
	files, err := filepath.Glob(filepath.Join(ckpts, "*", "_held", stream, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var h struct{ Key, Column, Value, ValueBase64, Reason string }
			if err := json.Unmarshal([]byte(line), &h); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			vals, err := source.DecodeRow(nil, []byte(h.Key))
			if err != nil || len(vals) != 1 {
				t.Fatalf("%s: key %q: %v", f, h.Key, err)
			}
			id, err := strconv.Atoi(string(vals[0].Text))
			if err != nil {
				t.Fatalf("%s: key %q: %v", f, h.Key, err)
			}
			if h.ValueBase64 != "" {
				t.Errorf("row %d column %s held as base64 %q: an interval's text is UTF-8", id, h.Column, h.ValueBase64)
			}
			if out[id] == nil {
				out[id] = map[string]*string{}
			}
			if out[id][h.Column] != nil {
				t.Errorf("row %d column %s held twice", id, h.Column)
			}
			v, r := h.Value, h.Reason
			out[id][h.Column] = &v
			if r != "" {
				out[id][h.Column+"#reason"] = &r
			}
		}
	}
	return out
}

// expectGolden asks the server for every row's canonical texts.
func expectGolden(t *testing.T, d, tbl string, cols []goldenCol) map[int]map[string]*string {
	t.Helper()
	exprs := []string{"id::text"}
	var heldCols []string
	for _, c := range cols {
		exprs = append(exprs, fmt.Sprintf(c.want, c.name))
	}
	for _, c := range cols {
		if c.held != "" {
			exprs = append(exprs, fmt.Sprintf(c.held, c.name))
			heldCols = append(heldCols, c.name)
		}
	}
	for _, c := range cols {
		exprs = append(exprs, c.name+"::text") // the source's text form, for held cells
	}
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Held values are the source's text forms: intervals in the default
	// output style, which the source sets too.
	res, err := conn.Exec(ctx, "SET IntervalStyle = postgres; SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 3; SELECT "+
		strings.Join(exprs, ", ")+" FROM "+tbl).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]map[string]*string{}
	for _, r := range res[len(res)-1].Rows {
		id, _ := strconv.Atoi(string(r[0]))
		m := map[string]*string{}
		for i, c := range cols {
			if r[i+1] != nil {
				s := string(r[i+1])
				m[c.name] = &s
			}
		}
		for i, c := range heldCols {
			if v := r[len(cols)+1+i]; v != nil {
				s := string(v)
				m[c+"#held"] = &s
			}
		}
		for i, c := range cols {
			if v := r[len(cols)+1+len(heldCols)+i]; v != nil {
				s := string(v)
				m[c.name+"#text"] = &s
			}
		}
		out[id] = m
	}
	return out
}
