package clickhouse_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
)

// uuidBytes is a uuid's text form as the engine gives it: 16 bytes,
// big-endian (the order of the text's hex digits).
func uuidBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		t.Fatalf("uuid %q: %v", s, err)
	}
	return b
}

// TestUUIDAndEnumColumns writes uuids (fixed_size_binary(16), what the
// engine makes of a Postgres uuid: a key, a nullable column and an
// array) and an enum (dictionary<int32, utf8>) into a merge table.
// clickhouse-client must see native UUID columns (18.16 has the type)
// whose text is the source's text form, and the enum as
// LowCardinality(Nullable(String)) (18.16: allowed with
// allow_experimental_low_cardinality_type, which the destination sets on
// its statements) with its words.
func TestUUIDAndEnumColumns(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	ctx := context.Background()
	d := newDest(t, clickhouse.Config{Conn: conn, Database: db})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "u", Streams: []sink.StreamSpec{sink.StreamSpec{Stream: "people", Table: "people", Mode: sink.Merge, Key: []string{"id"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	uuidType := &arrow.FixedSizeBinaryType{ByteWidth: 16}
	enumType := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: uuidType, Nullable: true},
		{Name: "friend", Type: uuidType, Nullable: true},
		{Name: "others", Type: arrow.ListOf(uuidType), Nullable: true},
		{Name: "mood", Type: enumType, Nullable: true},
		{Name: "mood_text", Type: arrow.BinaryTypes.String, Nullable: true,
			Metadata: arrow.NewMetadata([]string{engine.LogicalTypeKey}, []string{engine.LogicalTypeEnum})},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	type row struct {
		id, friend string // "" is null
		others     []string
		mood       string
	}
	rows := []row{
		{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000", []string{"ffffffff-ffff-ffff-ffff-ffffffffffff"}, "happy"},
		{"123e4567-e89b-12d3-a456-426614174000", "", []string{}, ""},
		{"f47ac10b-58cc-4372-a567-0e02b2c3d479", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", []string{"00000000-0000-0000-0000-000000000001", "80000000-0000-0000-0000-000000000000"}, "sad"},
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, r := range rows {
		b.Field(0).(*array.FixedSizeBinaryBuilder).Append(uuidBytes(t, r.id))
		if r.friend == "" {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.FixedSizeBinaryBuilder).Append(uuidBytes(t, r.friend))
		}
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		for _, o := range r.others {
			lb.ValueBuilder().(*array.FixedSizeBinaryBuilder).Append(uuidBytes(t, o))
		}
		if r.mood == "" {
			b.Field(3).AppendNull()
		} else if err := b.Field(3).(*array.BinaryDictionaryBuilder).AppendString(r.mood); err != nil {
			t.Fatal(err)
		}
		if r.mood == "" {
			b.Field(4).AppendNull()
		} else {
			b.Field(4).(*array.StringBuilder).Append(r.mood)
		}
		b.Field(5).(*array.StringBuilder).Append(fmt.Sprintf("v%d", i))
		b.Field(6).(*array.StringBuilder).Append("insert")
		b.Field(7).(*array.Int64Builder).Append(int64(i + 1))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(ctx, "people", rec); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}

	types := clientQuery(t, fmt.Sprintf("SELECT name, type FROM system.columns WHERE database = '%s' AND table = 'people' AND name IN ('id', 'friend', 'others', 'mood', 'mood_text') ORDER BY name", db))
	wantTypes := "friend\tNullable(UUID)\nid\tUUID\nmood\tLowCardinality(Nullable(String))\nmood_text\tLowCardinality(Nullable(String))\nothers\tArray(Nullable(UUID))\n"
	if types != wantTypes {
		t.Errorf("column types:\n%s\nwant:\n%s", types, wantTypes)
	}
	got := clientQuery(t, fmt.Sprintf("SELECT toString(id), ifNull(toString(friend), 'NULL'), arrayStringConcat(arrayMap(x -> ifNull(toString(x), 'NULL'), others), ','), ifNull(mood, 'NULL'), ifNull(mood_text, 'NULL') FROM %s.people FINAL ORDER BY _openetl_seq", db))
	var want strings.Builder
	for _, r := range rows {
		friend, mood := r.friend, r.mood
		if friend == "" {
			friend = "NULL"
		}
		if mood == "" {
			mood = "NULL"
		}
		fmt.Fprintf(&want, "%s\t%s\t%s\t%s\t%s\n", r.id, friend, strings.Join(r.others, ","), mood, mood)
	}
	if got != want.String() {
		t.Errorf("read back:\n%s\nwant (the source's text forms):\n%s", got, want.String())
	}
}
