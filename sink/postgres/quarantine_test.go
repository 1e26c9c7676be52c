package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
)

// declaredCase is one row of TestQuarantineDeclared: a value of one
// declared column that Postgres can't take unchanged (the others null),
// and the reason it must be set aside with. An empty reason is a good
// value, which must land as want (psql's text).
type declaredCase struct {
	col, value, reason, want string
}

// The declared columns of TestQuarantineDeclared, as a source that
// declares Postgres types would send them: Arrow type and declared type.
var declaredCols = []struct {
	name, decl string
	typ        arrow.DataType
}{
	{"amount", "numeric(10,2)", &arrow.Decimal128Type{Precision: 12, Scale: 3}},
	{"big", "numeric", arrow.BinaryTypes.String},
	{"u", "uuid", arrow.BinaryTypes.String},
	{"doc", "jsonb", arrow.BinaryTypes.String},
	{"code", "varchar(3)", arrow.BinaryTypes.String},
	{"ip", "inet", arrow.BinaryTypes.String},
	{"tz", "timetz", arrow.BinaryTypes.String},
	{"tm", "time", arrow.FixedWidthTypes.Time64us},
	{"docs", "_jsonb", arrow.ListOf(arrow.BinaryTypes.String)},
	{"nums", "numeric(4,1)[]", arrow.ListOf(arrow.BinaryTypes.String)},
}

var declaredCases = []declaredCase{
	{"amount", "12345678.5", "", "12345678.50"},
	{"amount", "123456789.5", "out_of_range", ""},
	{"amount", "1.235", "beyond_scale", ""},
	{"big", "1e131073", "out_of_range", ""},
	{"big", "twelve", "invalid_value", ""},
	{"big", "123456789012345678901234567890.5", "", "123456789012345678901234567890.5"},
	{"u", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
	{"u", "a0eebc99-zzzz", "invalid_value", ""},
	{"doc", `{"a": "\u00e9"}`, "", `{"a": "é"}`},
	{"doc", `{"a": "\u0000"}`, "nul_in_text", ""},
	{"doc", `{"a":`, "invalid_value", ""},
	{"code", "abc", "", "abc"},
	{"code", "abcd", "too_long", ""},
	{"code", "abc ", "too_long", ""},
	{"ip", "10.0.0.1/8", "", "10.0.0.1/8"},
	{"ip", "10.0.0.300", "invalid_value", ""},
	{"tz", "10:00:00.5+02:30", "", "10:00:00.5+02:30"},
	{"tz", "25:00:00+00", "out_of_range", ""},
	{"tm", "86400000000", "", "24:00:00"},
	{"tm", "86400000001", "out_of_range", ""},
	{"docs", `["{\"x\": 1}", null]`, "", `{"{\"x\": 1}",NULL}`},
	{"docs", `["{}", "\"\\u0000\""]`, "nul_in_text", ""},
	{"nums", `["1.5", "-999.9"]`, "", `{1.5,-999.9}`},
	{"nums", `["1.55"]`, "beyond_scale", ""},
	{"nums", `["1e4"]`, "out_of_range", ""},
}

// declaredBatch builds one row per case (key id = the case's index + 1),
// the case's column set, every other declared column null.
func declaredBatch(t *testing.T, cases []declaredCase) arrow.RecordBatch {
	t.Helper()
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}
	for _, c := range declaredCols {
		fields = append(fields, arrow.Field{Name: c.name, Type: c.typ, Nullable: true})
	}
	fields = append(fields,
		arrow.Field{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		arrow.Field{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		arrow.Field{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64})
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i, tc := range cases {
		b.Field(0).(*array.Int64Builder).Append(int64(i + 1))
		for j, c := range declaredCols {
			fb := b.Field(j + 1)
			if c.name != tc.col {
				fb.AppendNull()
				continue
			}
			var err error
			switch fb := fb.(type) {
			case *array.Decimal128Builder:
				var n decimal128.Num
				n, err = decimal128.FromString(tc.value, 12, 3)
				fb.Append(n)
			case *array.Time64Builder:
				var us int64
				_, err = fmt.Sscan(tc.value, &us)
				fb.Append(arrow.Time64(us))
			default:
				err = fb.UnmarshalJSON([]byte(`[` + jsonString(tc.value, c.typ) + `]`))
			}
			if err != nil {
				t.Fatalf("case %d (%s %q): %v", i, tc.col, tc.value, err)
			}
		}
		n := len(declaredCols) + 1
		b.Field(n).(*array.StringBuilder).Append(fmt.Sprint("id-", i+1))
		b.Field(n + 1).(*array.StringBuilder).Append(sink.OpInsert)
		b.Field(n + 2).(*array.Int64Builder).Append(int64(i + 1))
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

// jsonString is v as the JSON of a value of type typ: a list's JSON as
// it is, a string quoted.
func jsonString(v string, typ arrow.DataType) string {
	if typ.ID() == arrow.LIST {
		return v
	}
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v)
	return `"` + q + `"`
}

// A declared value Postgres can't take unchanged (text its type's input
// rejects, \u0000 in jsonb, a number that would be rounded or is too
// large, a text longer than its varchar, a time past 24:00, an array
// element of any of these) is set aside with its reason, alone: the
// epoch commits, the good values land exactly, and every row written is
// in the table or in the quarantine table, once. Appended, merged and
// overwritten tables alike; psql reads them.
func TestQuarantineDeclared(t *testing.T) {
	for _, mode := range []sink.Mode{sink.Append, sink.Merge, sink.Overwrite} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			dst := e.open(t)
			ctx := t.Context()
			spec := sink.StreamSpec{Stream: "d", Table: "d", Mode: mode, Types: "postgres"}
			if mode == sink.Merge {
				spec.Key = []string{"id"}
			}
			spec.Columns = append(spec.Columns, sink.Column{Name: "id", Type: "int8"})
			for _, c := range declaredCols {
				spec.Columns = append(spec.Columns, sink.Column{Name: c.name, Type: c.decl, Nullable: true})
			}
			cfg := sink.WriterConfig{Pipeline: "declared", Streams: []sink.StreamSpec{spec}}
			w := commit(t, dst, cfg, 1, 1, nil, declaredBatch(t, declaredCases))
			if mode == sink.Overwrite {
				if err := w.Finish(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			var good, bad []string
			for i, tc := range declaredCases {
				if tc.reason == "" {
					good = append(good, fmt.Sprintf("%d %s", i+1, tc.want))
				} else {
					bad = append(bad, fmt.Sprintf("%d %s %s", i+1, tc.col, tc.reason))
				}
			}
			var vals []string
			for _, c := range declaredCols {
				vals = append(vals, c.name+`::text`)
			}
			got := psql(t, `SELECT string_agg(id || ' ' || coalesce(`+strings.Join(vals, ", ")+`, 'NULL'), E'\n' ORDER BY id) FROM `+e.schema+`.d`)
			if want := strings.Join(good, "\n"); got != want {
				t.Errorf("d:\n%s\nwant\n%s", got, want)
			}
			got = psql(t, `SELECT string_agg(_openetl_seq || ' ' || column_name || ' ' || reason, E'\n' ORDER BY _openetl_seq) FROM `+e.schema+`._openetl_quarantine WHERE table_name = 'd'`)
			if want := strings.Join(bad, "\n"); got != want {
				t.Errorf("quarantine:\n%s\nwant\n%s", got, want)
			}
			// Every row written is in one place, once.
			if got := psql(t, `SELECT (SELECT count(*) FROM `+e.schema+`.d) + (SELECT count(*) FROM `+e.schema+`._openetl_quarantine)`); got != fmt.Sprint(len(declaredCases)) {
				t.Errorf("table + quarantine = %s rows, want %d", got, len(declaredCases))
			}
			// The quarantined row keeps its value, unchanged.
			if got := psql(t, `SELECT row_json::jsonb->>'u' FROM `+e.schema+`._openetl_quarantine WHERE column_name = 'u'`); got != "a0eebc99-zzzz" {
				t.Errorf("quarantined u = %q", got)
			}
			types := psql(t, `SELECT string_agg(format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute
				WHERE attrelid = '`+e.schema+`.d'::regclass AND attnum > 1 AND attnum <= `+fmt.Sprint(len(declaredCols)+1))
			want := "numeric(10,2), numeric, uuid, jsonb, character varying(3), inet, time with time zone, time without time zone, jsonb[], numeric(4,1)[]"
			if types != want {
				t.Errorf("types: %s, want %s", types, want)
			}
		})
	}
}
