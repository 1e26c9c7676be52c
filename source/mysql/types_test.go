package mysql_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// golden is one column of the golden type table: its SQL type, the SQL
// literal of its value in each golden row (row 1 the minimum, row 2 the
// maximum, row 3 NULL, row 4 an ordinary value), the text the source
// must write for it, and what pyarrow must read back.
type golden struct {
	name, typ string
	sql       [4]string
	text      [4]string // "NULL" for null
	arrow     [4]any    // pyarrow's value as readRows converts it; nil for null
	arrowType string
}

var goldenCols = []golden{
	{"ti", "tinyint", [4]string{"-128", "127", "NULL", "7"}, [4]string{"-128", "127", "NULL", "7"}, [4]any{"-128", "127", nil, "7"}, "int8"},
	{"tiu", "tinyint unsigned", [4]string{"0", "255", "NULL", "7"}, [4]string{"0", "255", "NULL", "7"}, [4]any{"0", "255", nil, "7"}, "uint8"},
	{"si", "smallint", [4]string{"-32768", "32767", "NULL", "-7"}, [4]string{"-32768", "32767", "NULL", "-7"}, [4]any{"-32768", "32767", nil, "-7"}, "int16"},
	{"siu", "smallint unsigned", [4]string{"0", "65535", "NULL", "7"}, [4]string{"0", "65535", "NULL", "7"}, [4]any{"0", "65535", nil, "7"}, "uint16"},
	{"mi", "mediumint", [4]string{"-8388608", "8388607", "NULL", "7"}, [4]string{"-8388608", "8388607", "NULL", "7"}, [4]any{"-8388608", "8388607", nil, "7"}, "int32"},
	{"miu", "mediumint unsigned", [4]string{"0", "16777215", "NULL", "7"}, [4]string{"0", "16777215", "NULL", "7"}, [4]any{"0", "16777215", nil, "7"}, "uint32"},
	{"i", "int", [4]string{"-2147483648", "2147483647", "NULL", "7"}, [4]string{"-2147483648", "2147483647", "NULL", "7"}, [4]any{"-2147483648", "2147483647", nil, "7"}, "int32"},
	{"iu", "int unsigned", [4]string{"0", "4294967295", "NULL", "7"}, [4]string{"0", "4294967295", "NULL", "7"}, [4]any{"0", "4294967295", nil, "7"}, "uint32"},
	{"bi", "bigint", [4]string{"-9223372036854775808", "9223372036854775807", "NULL", "7"}, [4]string{"-9223372036854775808", "9223372036854775807", "NULL", "7"},
		[4]any{"-9223372036854775808", "9223372036854775807", nil, "7"}, "int64"},
	{"biu", "bigint unsigned", [4]string{"0", "18446744073709551615", "NULL", "7"}, [4]string{"0", "18446744073709551615", "NULL", "7"},
		[4]any{"0", "18446744073709551615", nil, "7"}, "uint64"},
	{"dbig", "decimal(65,30)", [4]string{"-" + nines(35) + "." + nines(30), nines(35) + "." + nines(30), "NULL", "0.000000000000000000000000000001"},
		[4]string{"-" + nines(35) + "." + nines(30), nines(35) + "." + nines(30), "NULL", "0.000000000000000000000000000001"},
		[4]any{"-" + nines(35) + "." + nines(30), nines(35) + "." + nines(30), nil, "0.000000000000000000000000000001"}, "string"},
	{"d38", "decimal(38,10)", [4]string{"-" + nines(28) + "." + nines(10), nines(28) + "." + nines(10), "NULL", "-0.5"},
		[4]string{"-" + nines(28) + "." + nines(10), nines(28) + "." + nines(10), "NULL", "-0.5000000000"},
		[4]any{"-" + nines(28) + "." + nines(10), nines(28) + "." + nines(10), nil, "-0.5000000000"}, "decimal128(38, 10)"},
	{"du", "decimal(20,4) unsigned", [4]string{"0", "9999999999999999.9999", "NULL", "12.5"}, [4]string{"0.0000", "9999999999999999.9999", "NULL", "12.5000"},
		[4]any{"0.0000", "9999999999999999.9999", nil, "12.5000"}, "decimal128(20, 4)"},
	{"f", "float", [4]string{"-3.40282e38", "3.40282e38", "NULL", "1.1"}, [4]string{"-3.40282e+38", "3.40282e+38", "NULL", "1.1"},
		[4]any{"-3.402820018375656e+38", "3.402820018375656e+38", nil, "1.100000023841858"}, "float"},
	{"db", "double", [4]string{"-1.7976931348623157e308", "1.7976931348623157e308", "NULL", "0.1e0+0.2e0"},
		[4]string{"-1.7976931348623157e+308", "1.7976931348623157e+308", "NULL", "0.30000000000000004"},
		[4]any{"-1.7976931348623157e+308", "1.7976931348623157e+308", nil, "0.30000000000000004"}, "double"},
	{"b1", "bit(1)", [4]string{"b'0'", "b'1'", "NULL", "1"}, [4]string{"0", "1", "NULL", "1"}, [4]any{"0", "1", nil, "1"}, "uint64"},
	{"b64", "bit(64)", [4]string{"0", "b'" + strings.Repeat("1", 64) + "'", "NULL", "b'101'"}, [4]string{"0", "18446744073709551615", "NULL", "5"},
		[4]any{"0", "18446744073709551615", nil, "5"}, "uint64"},
	{"bo", "bool", [4]string{"false", "true", "NULL", "true"}, [4]string{"0", "1", "NULL", "1"}, [4]any{"0", "1", nil, "1"}, "int8"},
	{"dt", "date", [4]string{"'1000-01-01'", "'9999-12-31'", "NULL", "'2024-02-29'"}, [4]string{"1000-01-01", "9999-12-31", "NULL", "2024-02-29"},
		[4]any{"1000-01-01", "9999-12-31", nil, "2024-02-29"}, "date32[day]"},
	{"dtm", "datetime", [4]string{"'1000-01-01 00:00:00'", "'9999-12-31 23:59:59'", "NULL", "'2024-01-02 03:04:05'"},
		[4]string{"1000-01-01 00:00:00", "9999-12-31 23:59:59", "NULL", "2024-01-02 03:04:05"},
		[4]any{"1000-01-01T00:00:00", "9999-12-31T23:59:59", nil, "2024-01-02T03:04:05"}, "timestamp[us]"},
	{"dt6", "datetime(6)", [4]string{"'1000-01-01 00:00:00.000000'", "'9999-12-31 23:59:59.999999'", "NULL", "'2024-01-02 03:04:05.5'"},
		[4]string{"1000-01-01 00:00:00.000000", "9999-12-31 23:59:59.999999", "NULL", "2024-01-02 03:04:05.500000"},
		[4]any{"1000-01-01T00:00:00", "9999-12-31T23:59:59.999999", nil, "2024-01-02T03:04:05.500000"}, "timestamp[us]"},
	// Written under time_zone '+05:30': stored, read and written in UTC.
	{"ts", "timestamp(6) NULL", [4]string{"'1970-01-01 05:30:01'", "'2038-01-19 08:44:07.999999'", "NULL", "'2024-01-02 03:04:05.123456'"},
		[4]string{"1970-01-01 00:00:01.000000", "2038-01-19 03:14:07.999999", "NULL", "2024-01-01 21:34:05.123456"},
		[4]any{"1970-01-01T00:00:01+00:00", "2038-01-19T03:14:07.999999+00:00", nil, "2024-01-01T21:34:05.123456+00:00"}, "timestamp[us, tz=UTC]"},
	{"ts0", "timestamp NULL", [4]string{"'1970-01-01 05:30:01'", "'2038-01-19 08:44:07'", "NULL", "'2024-07-01 12:00:00'"},
		[4]string{"1970-01-01 00:00:01", "2038-01-19 03:14:07", "NULL", "2024-07-01 06:30:00"},
		[4]any{"1970-01-01T00:00:01+00:00", "2038-01-19T03:14:07+00:00", nil, "2024-07-01T06:30:00+00:00"}, "timestamp[us, tz=UTC]"},
	{"tm", "time(6)", [4]string{"'-838:59:59.000000'", "'838:59:59.000000'", "NULL", "'-00:00:00.000001'"},
		[4]string{"-838:59:59.000000", "838:59:59.000000", "NULL", "-00:00:00.000001"},
		[4]any{"-3020399000000", "3020399000000", nil, "-1"}, "duration[us]"},
	{"tm0", "time", [4]string{"'-12:30:00'", "'23:59:59'", "NULL", "'01:02:03'"}, [4]string{"-12:30:00", "23:59:59", "NULL", "01:02:03"},
		[4]any{"-45000000000", "86399000000", nil, "3723000000"}, "duration[us]"},
	{"y", "year", [4]string{"1901", "2155", "NULL", "0"}, [4]string{"1901", "2155", "NULL", "0"}, [4]any{"1901", "2155", nil, "0"}, "int16"},
	{"c", "char(5)", [4]string{"''", "'ab  '", "NULL", "'é'"}, [4]string{"", "ab", "NULL", "é"}, [4]any{"", "ab", nil, "é"}, "string"},
	{"vc", "varchar(300)", [4]string{"''", "'" + strings.Repeat("x", 300) + "'", "NULL", "'日本語 😀'"}, [4]string{"", strings.Repeat("x", 300), "NULL", "日本語 😀"},
		[4]any{"", strings.Repeat("x", 300), nil, "日本語 😀"}, "string"},
	{"l1", "varchar(10) CHARACTER SET latin1", [4]string{"''", "'é€ÿ'", "NULL", "'abc'"}, [4]string{"", "é€ÿ", "NULL", "abc"}, [4]any{"", "é€ÿ", nil, "abc"}, "string"},
	{"tx", "text", [4]string{"''", "'" + strings.Repeat("long ", 200) + "'", "NULL", "'a\\nb\\tc'"}, [4]string{"", strings.Repeat("long ", 200), "NULL", "a\nb\tc"},
		[4]any{"", strings.Repeat("long ", 200), nil, "a\nb\tc"}, "string"},
	{"bn", "binary(4)", [4]string{"''", "x'ffffffff'", "NULL", "'a'"}, [4]string{"\x00\x00\x00\x00", "\xff\xff\xff\xff", "NULL", "a\x00\x00\x00"},
		[4]any{"00000000", "ffffffff", nil, "61000000"}, "binary"},
	{"vb", "varbinary(10)", [4]string{"''", "x'00ff00'", "NULL", "'a\\0'"}, [4]string{"", "\x00\xff\x00", "NULL", "a\x00"}, [4]any{"", "00ff00", nil, "6100"}, "binary"},
	{"bl", "blob", [4]string{"''", "x'0001fffe'", "NULL", "'blob'"}, [4]string{"", "\x00\x01\xff\xfe", "NULL", "blob"}, [4]any{"", "0001fffe", nil, "626c6f62"}, "binary"},
	{"e", "enum('a','b','c')", [4]string{"'a'", "'c'", "NULL", "'b'"}, [4]string{"a", "c", "NULL", "b"}, [4]any{"a", "c", nil, "b"}, "string"},
	{"st", "set('x','y','z')", [4]string{"''", "'x,y,z'", "NULL", "'z,x'"}, [4]string{"", "x,y,z", "NULL", "x,z"}, [4]any{"", "x,y,z", nil, "x,z"}, "string"},
	{"j", "json", [4]string{"'[]'", "'{\"a\": [1, 2.5, \"x\"], \"b\": null}'", "NULL", "'\"é\"'"}, [4]string{"[]", `{"a": [1, 2.5, "x"], "b": null}`, "NULL", `"é"`},
		[4]any{"[]", `{"a": [1, 2.5, "x"], "b": null}`, nil, `"é"`}, "string"},
}

func nines(n int) string { return strings.Repeat("9", n) }

func goldenTable(db, tbl string, cols []golden) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "CREATE TABLE %s.%s (id int PRIMARY KEY", db, tbl)
	for _, c := range cols {
		fmt.Fprintf(&sb, ", %s %s", c.name, c.typ)
	}
	sb.WriteString(") DEFAULT CHARSET utf8mb4")
	return sb.String()
}

// goldenInserts inserts the golden rows with ids base+1 .. base+4, under
// time_zone '+05:30', and a row base+5 of zero dates (sql_mode allowing
// them): values no Arrow date holds, whose cells the engine holds.
func goldenInserts(db, tbl string, cols []golden, base int) []string {
	sqls := []string{"SET time_zone = '+05:30'", "SET sql_mode = ''"}
	for r := range 4 {
		var vals []string
		for _, c := range cols {
			vals = append(vals, c.sql[r])
		}
		sqls = append(sqls, fmt.Sprintf("INSERT INTO %s.%s VALUES (%d, %s)", db, tbl, base+r+1, strings.Join(vals, ", ")))
	}
	sqls = append(sqls, fmt.Sprintf("INSERT INTO %s.%s (id, dt, dtm, ts0) VALUES (%d, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00')", db, tbl, base+5))
	return sqls
}

// TestGoldenTypes: the golden rows, read by the snapshot and streamed
// from the binlog, give the same payloads byte for byte, with the
// expected text for every type; the machine's zone (time.Local, set to
// +05:30 for the test) never shows in a TIMESTAMP.
func TestGoldenTypes(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	localZone(t)
	execSQL(t, d, goldenTable(db, "gold", goldenCols))
	src := newSource(t, d, db, mysql.Config{})
	cat, err := src.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, c := range cat.Streams[0].Columns {
		types = append(types, c.Name+" "+c.Type)
	}
	t.Logf("declared: %s", strings.Join(types, ", "))
	if pk := cat.Streams[0].PrimaryKey; len(pk) != 1 || pk[0] != "id" || cat.Streams[0].Types != source.TypesMySQL {
		t.Errorf("stream %+v", cat.Streams[0])
	}

	// An empty snapshot, then the rows, streamed.
	empty, _ := readOnce(t, src, nil, nil)
	if len(empty.recs) != 0 {
		t.Fatalf("empty table read %d records", len(empty.recs))
	}
	execSQL(t, d, goldenInserts(db, "gold", goldenCols, 0)...)
	streamed, _ := readOnce(t, src, nil, empty.last())
	// go-mysql's decoder reads the same (decode.go is the default).
	std := newSource(t, d, db, mysql.Config{})
	mysql.SetStandardDecode(std, true)
	standard, _ := readOnce(t, std, nil, empty.last())
	if len(standard.recs) != len(streamed.recs) {
		t.Fatalf("go-mysql's decoder read %d records, decode.go %d", len(standard.recs), len(streamed.recs))
	}
	for i := range streamed.recs {
		if a, b := streamed.recs[i], standard.recs[i]; a.Seq != b.Seq || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Payload, b.Payload) {
			t.Errorf("record %d: decode.go %d %q %q, go-mysql %d %q %q", i, a.Seq, a.Key, values(t, a.Payload), b.Seq, b.Key, values(t, b.Payload))
		}
	}
	// A new snapshot reads the same rows.
	snap, _ := readOnce(t, src, nil, nil)
	if len(streamed.recs) != 5 || len(snap.recs) != 5 {
		t.Fatalf("streamed %d and snapshot %d records, want 5", len(streamed.recs), len(snap.recs))
	}
	for r := range 4 {
		st, sn := streamed.recs[r], snap.recs[r]
		if st.Op != source.OpInsert || !bytes.Equal(st.Key, sn.Key) {
			t.Errorf("row %d: streamed %v key %q, snapshot key %q", r+1, st.Op, st.Key, sn.Key)
		}
		got := values(t, st.Payload)
		want := append([]string{fmt.Sprint(r + 1)}, column(goldenCols, func(c golden) string { return c.text[r] })...)
		for i := range want {
			if i >= len(got) || got[i] != want[i] {
				g := "(missing)"
				if i < len(got) {
					g = fmt.Sprintf("%q", got[i])
				}
				t.Errorf("row %d column %s: streamed %s, want %q", r+1, colName(i), g, want[i])
			}
		}
		if !bytes.Equal(st.Payload, sn.Payload) {
			sv := values(t, sn.Payload)
			for i := range got {
				if i < len(sv) && got[i] != sv[i] {
					t.Errorf("row %d column %s: streamed %q, snapshot %q", r+1, colName(i), got[i], sv[i])
				}
			}
		}
	}
	zero := values(t, streamed.recs[4].Payload)
	if zero[19] != "0000-00-00" || zero[20] != "0000-00-00 00:00:00" || zero[23] != "0000-00-00 00:00:00" {
		t.Errorf("zero dates streamed as %q %q %q", zero[19], zero[20], zero[23])
	}
	if !bytes.Equal(streamed.recs[4].Payload, snap.recs[4].Payload) {
		t.Errorf("zero-date row: streamed %q, snapshot %q", zero, values(t, snap.recs[4].Payload))
	}
}

func column[T any](cols []golden, f func(golden) T) []T {
	var out []T
	for _, c := range cols {
		out = append(out, f(c))
	}
	return out
}

func colName(i int) string {
	if i == 0 {
		return "id"
	}
	if i-1 < len(goldenCols) {
		return goldenCols[i-1].name
	}
	return fmt.Sprint(i)
}

// TestGoldenTypesPipeline syncs the golden rows into sink/parquet, by
// the snapshot (ids 1-5) and then the binlog (ids 11-15), and reads them
// back with pyarrow: every value arrives exactly, with its Arrow type;
// the zero dates, which no Arrow date holds, cost only their cells: the
// rows land with nulls there, and the values are held under _held/ with
// reason out_of_range.
func TestGoldenTypesPipeline(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	localZone(t)
	// sink/parquet can't write Arrow durations (pqarrow has no DURATION):
	// TIME columns are checked by TestGoldenTypes only.
	var cols []golden
	for _, c := range goldenCols {
		if c.arrowType != "duration[us]" {
			cols = append(cols, c)
		}
	}
	execSQL(t, d, goldenTable(db, "gold", cols))
	execSQL(t, d, goldenInserts(db, "gold", cols, 0)...)
	dir := t.TempDir()
	res := sync(t, newSource(t, d, db, mysql.Config{}), dir)
	if c := res.Streams["gold"]; c.Read != 5 || c.Written != 5 || c.Quarantined != 0 || c.Held != 3 {
		t.Fatalf("snapshot sync counts %+v, want 5 read and written, 3 cells held", c)
	}
	execSQL(t, d, goldenInserts(db, "gold", cols, 10)...)
	res = sync(t, newSource(t, d, db, mysql.Config{}), dir)
	if c := res.Streams["gold"]; c.Read != 5 || c.Written != 5 || c.Quarantined != 0 || c.Held != 3 {
		t.Fatalf("stream sync counts %+v, want 5 read and written, 3 cells held", c)
	}
	all := readRows(t, dir, "gold")
	if len(all) != 10 {
		t.Fatalf("read %d rows, want 10", len(all))
	}
	var rows []map[string]any
	for k, row := range all {
		if k%5 != 4 {
			rows = append(rows, row)
			continue
		}
		// The zero-date row: id and nulls.
		if id := fmt.Sprint(row["id"]); id != fmt.Sprint(5+10*(k/5)) {
			t.Fatalf("row %d has id %s, want the zero-date row", k, id)
		}
		for _, c := range cols {
			if row[c.name] != nil {
				t.Errorf("zero-date row %v: column %s is %v, want null", row["id"], c.name, row[c.name])
			}
		}
	}
	held := map[string]int{}
	for _, l := range heldLines(t, dir, "gold") {
		held[fmt.Sprint(l["key"] != nil, " ", l["column"], "=", l["value"], " ", l["reason"])]++
	}
	want := map[string]int{"true dt=0000-00-00 out_of_range": 2, "true dtm=0000-00-00 00:00:00 out_of_range": 2,
		"true ts0=0000-00-00 00:00:00 out_of_range": 2}
	if fmt.Sprint(held) != fmt.Sprint(want) {
		t.Errorf("held values %v, want %v", held, want)
	}
	if q := quarantineLines(t, dir, "gold"); len(q) != 0 {
		t.Errorf("quarantined %v, want none", q)
	}
	for _, c := range cols {
		if lastTypes[c.name] != c.arrowType {
			t.Errorf("column %s (%s) is %s in Parquet, want %s", c.name, c.typ, lastTypes[c.name], c.arrowType)
		}
	}
	for k, row := range rows {
		r := k % 4
		wantID := fmt.Sprint(r + 1 + 10*(k/4))
		if fmt.Sprint(row["id"]) != wantID {
			t.Fatalf("row %d has id %v, want %s", k, row["id"], wantID)
		}
		for _, c := range cols {
			got := row[c.name]
			if fmt.Sprint(got) != fmt.Sprint(c.arrow[r]) || (got == nil) != (c.arrow[r] == nil) {
				t.Errorf("id %s column %s (%s): read back %#v, want %#v", wantID, c.name, c.typ, got, c.arrow[r])
			}
		}
	}
}
