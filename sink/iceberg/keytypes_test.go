package iceberg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// keyCol is one key column type of TestMergeKeyTypes: its Arrow type
// and the value of key k.
type keyCol struct {
	name string
	typ  arrow.DataType
	app  func(b array.Builder, k int64)
}

var keyCols = map[string]keyCol{
	"uuid": {"u", &arrow.FixedSizeBinaryType{ByteWidth: 16}, func(b array.Builder, k int64) {
		v := make([]byte, 16)
		v[0], v[15] = byte(k), byte(k>>8)
		b.(*array.FixedSizeBinaryBuilder).Append(v)
	}},
	"string": {"s", arrow.BinaryTypes.String, func(b array.Builder, k int64) {
		b.(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", strings.Repeat("k", 5000), k))
	}},
	"int32": {"i", arrow.PrimitiveTypes.Int32, func(b array.Builder, k int64) { b.(*array.Int32Builder).Append(int32(-k)) }},
	"ts": {"t", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, func(b array.Builder, k int64) {
		b.(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + k))
	}},
	"decimal": {"d", &arrow.Decimal128Type{Precision: 12, Scale: 2}, func(b array.Builder, k int64) {
		b.(*array.Decimal128Builder).Append(decimal128.FromI64(k * 101))
	}},
	"date": {"dt", arrow.FixedWidthTypes.Date32, func(b array.Builder, k int64) { b.(*array.Date32Builder).Append(arrow.Date32(19000 + k)) }},
}

// keyBatch is a batch of ops over a table keyed by cols (key k's
// columns' values), with a payload column and the metadata columns.
func keyBatch(cols []keyCol, ops []op) arrow.RecordBatch {
	var fs []arrow.Field
	for _, c := range cols {
		fs = append(fs, arrow.Field{Name: c.name, Type: c.typ, Nullable: true})
	}
	fs = append(fs,
		arrow.Field{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "_openetl_synced_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}})
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fs, nil))
	defer b.Release()
	n := len(cols)
	for _, o := range ops {
		for i, c := range cols {
			c.app(b.Field(i), o.key)
		}
		if o.kind == "delete" {
			b.Field(n).AppendNull()
		} else {
			b.Field(n).(*array.StringBuilder).Append(o.name)
		}
		b.Field(n + 1).(*array.StringBuilder).Append(fmt.Sprintf("%d-%d", o.key, o.seq))
		b.Field(n + 2).(*array.StringBuilder).Append(o.kind)
		b.Field(n + 3).(*array.Int64Builder).Append(o.seq)
		b.Field(n + 4).(*array.TimestampBuilder).Append(0)
	}
	return b.NewRecordBatch()
}

// TestMergeKeyTypes merges tables keyed by each key type the engine
// hands over (a uuid as fixed_size_binary[16], a 5000-byte string, a
// timestamp, a decimal, a date) and by a composite key of a string and
// an int32, with position deletes and deletion vectors: each key
// updated, deleted and inserted again over four epochs, and in one
// epoch. The table must hold each key's last version once.
func TestMergeKeyTypes(t *testing.T) {
	for _, kind := range [][]string{{"uuid"}, {"string"}, {"ts"}, {"decimal"}, {"date"}, {"string", "int32"}} {
		formats := []string{"2"}
		if len(kind) > 1 || kind[0] == "uuid" {
			formats = append(formats, "3")
		}
		for _, format := range formats {
			t.Run(strings.Join(kind, "+")+"/v"+format, func(t *testing.T) { mergeKeyTypes(t, kind, format) })
		}
	}
}

func mergeKeyTypes(t *testing.T, kind []string, format string) {
	ctx := context.Background()
	wh := newWarehouse(t)
	var cols []keyCol
	var key []string
	for _, k := range kind {
		cols = append(cols, keyCols[k])
		key = append(key, keyCols[k].name)
	}
	spec := merged("m", key...)
	spec.Deletes = sink.HardDeletes
	d := newDest(t, wh.cat, iceberg.Config{Properties: map[string]string{"format-version": format}})
	w, err := d.Writer(ctx, writerConfig("kt", 0, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var all []op
	seq := int64(0)
	mk := func(k int64, kind string) op {
		seq++
		return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
	}
	epochs := [][]op{
		{mk(1, "insert"), mk(2, "insert"), mk(3, "insert"), mk(4, "insert"), mk(5, "insert"), mk(12, "insert")},
		{mk(1, "update"), mk(2, "delete"), mk(3, "update"), mk(3, "update")},
		{mk(2, "insert"), mk(4, "delete"), mk(4, "insert"), mk(5, "delete")},
		{mk(1, "delete"), mk(1, "insert"), mk(3, "update"), mk(12, "update")},
	}
	for i, ops := range epochs {
		e := uint64(i + 1)
		all = append(all, ops...)
		rec := keyBatch(cols, ops)
		err := w.Write(ctx, "m", rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
	}
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]op{}
	for _, o := range all {
		want[o.key] = o
	}
	live := 0
	for _, o := range want {
		if o.kind != "delete" {
			live++
		}
	}
	got := map[int64]bool{}
	for _, r := range rows {
		var k int64
		if _, err := fmt.Sscanf(r.ID, "%d-", &k); err != nil {
			t.Fatalf("row id %q", r.ID)
		}
		if got[k] {
			t.Errorf("key %d visible twice", k)
		}
		got[k] = true
		if o := want[k]; o.kind == "delete" || o.seq != r.Seq {
			t.Errorf("key %d at seq %d, want %+v", k, r.Seq, o)
		}
	}
	if len(rows) != live {
		t.Errorf("%d rows, want %d", len(rows), live)
	}
}
