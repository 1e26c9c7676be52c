package runner

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestRecordID: recordID, which finds the row of a held line written
// without its id, gives the engine's _openetl_id for every published
// test vector.
func TestRecordID(t *testing.T) {
	b, err := os.ReadFile("../../engine/testdata/openetl_id_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct {
			Stream, Key, Payload, ID string
			Seq                      int64
		}
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) < 7 {
		t.Fatalf("only %d vectors", len(f.Vectors))
	}
	for _, v := range f.Vectors {
		if got := RecordID(v.Stream, []byte(v.Key), []byte(v.Payload), v.Seq); got != v.ID {
			t.Errorf("RecordID(%q, %q, %q, %d) = %s, want %s", v.Stream, v.Key, v.Payload, v.Seq, got, v.ID)
		}
	}
}

// TestHeldType: a type is held for a destination that can't take its
// class, or a class inside it (a list's element, a struct's field), as
// the engine decides.
func TestHeldType(t *testing.T) {
	st := arrow.StructOf(arrow.Field{Name: "p", Type: arrow.PrimitiveTypes.Float64})
	for _, tc := range []struct {
		dt          arrow.DataType
		unsupported []string
		want        bool
	}{
		{arrow.PrimitiveTypes.Float64, nil, false},
		{arrow.PrimitiveTypes.Float64, []string{"float64"}, true},
		{arrow.PrimitiveTypes.Float64, []string{"float32"}, false},
		{arrow.ListOf(arrow.PrimitiveTypes.Float64), []string{"float64"}, true},
		{arrow.ListOf(st), []string{"float64"}, true},
		{arrow.ListOf(st), []string{"struct"}, true},
		{arrow.ListOf(st), []string{"list"}, true},
		{arrow.ListOf(st), []string{"int", "utf8"}, false},
		{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, []string{"timestamp"}, false},
		{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, []string{"timestamptz"}, true},
		{arrow.FixedWidthTypes.MonthDayNanoInterval, []string{"interval"}, true},
		{&arrow.Decimal128Type{Precision: 10, Scale: 2}, []string{"decimal"}, true},
	} {
		if got := heldType(tc.dt, tc.unsupported); got != tc.want {
			t.Errorf("heldType(%s, %q) = %v, want %v", tc.dt, tc.unsupported, got, tc.want)
		}
	}
}
