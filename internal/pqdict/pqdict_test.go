package pqdict_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/internal/pqdict"
)

func strings(n int, value func(i int) (string, bool)) arrow.Array {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	for i := range n {
		if s, ok := value(i); ok {
			b.Append(s)
		} else {
			b.AppendNull()
		}
	}
	return b.NewArray()
}

func TestLowCardinality(t *testing.T) {
	cases := []struct {
		name string
		col  arrow.Array
		want bool
	}{
		{"unique text", strings(10_000, func(i int) (string, bool) { return fmt.Sprint("u", i), true }), false},
		{"five statuses", strings(10_000, func(i int) (string, bool) { return fmt.Sprint("s", i%5), true }), true},
		{"all null", strings(100, func(int) (string, bool) { return "", false }), false},
		{"empty", strings(0, nil), false},
		{"mostly null, two values", strings(10_000, func(i int) (string, bool) { return fmt.Sprint(i % 2), i%50 == 0 }), true},
		// 1000 values, 250 distinct: exactly one in four.
		{"one in four", strings(1000, func(i int) (string, bool) { return fmt.Sprint(i % 250), true }), true},
		{"just over one in four", strings(1000, func(i int) (string, bool) { return fmt.Sprint(i % 251), true }), false},
		// Only the first Sample values count: unique after them.
		{"low then unique", strings(3*pqdict.Sample, func(i int) (string, bool) {
			if i < pqdict.Sample {
				return "x", true
			}
			return fmt.Sprint(i), true
		}), true},
	}
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	for range 100 {
		ib.Append(1)
	}
	cases = append(cases, struct {
		name string
		col  arrow.Array
		want bool
	}{"int64, one value", ib.NewArray(), false})
	ib.Release()
	db := array.NewDictionaryBuilder(memory.DefaultAllocator, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
	for i := range 100 {
		if err := db.AppendString(fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	cases = append(cases, struct {
		name string
		col  arrow.Array
		want bool
	}{"arrow dictionary", db.NewArray(), true})
	db.Release()
	for _, c := range cases {
		if got := pqdict.LowCardinality(c.col); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		c.col.Release()
	}
}

func TestColumns(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "status", Type: arrow.BinaryTypes.String},
	}, nil)
	id := strings(1000, func(i int) (string, bool) { return fmt.Sprint(i), true })
	st := strings(1000, func(i int) (string, bool) { return []string{"a", "b"}[i%2], true })
	rec := array.NewRecordBatch(sc, []arrow.Array{id, st}, 1000)
	defer rec.Release()
	id.Release()
	st.Release()
	if got := pqdict.Columns(rec); !slices.Equal(got, []string{"status"}) {
		t.Errorf("Columns = %v, want [status]", got)
	}
}
