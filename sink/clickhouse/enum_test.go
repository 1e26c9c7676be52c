package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/source"
)

// TestDeclaredEnumThroughEngine: declared rows with an enum column (MySQL
// "enum('sad','ok','happy')", and a Postgres enum as the Postgres source
// declares it) go through the engine, which marks the column, into the
// destination, which creates it LowCardinality(Nullable(String)) (on
// 18.16 with allow_experimental_low_cardinality_type); clickhouse-client
// reads the labels back, a label no declaration lists included. A later
// epoch from an engine whose declaration gained a label (ALTER TYPE ...
// ADD VALUE at the next discovery) writes into the same column.
func TestDeclaredEnumThroughEngine(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	ctx := context.Background()
	d := newDest(t, clickhouse.Config{Conn: conn, Database: db})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "enums"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	syncedAt := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	spec := func(types, stream, labels string) engine.StreamSpec {
		return engine.StreamSpec{Name: stream, Declared: true, Types: types, Columns: []engine.Column{
			{Name: "id", Type: map[string]string{source.TypesMySQL: "bigint", source.TypesPostgres: "int8"}[types]},
			{Name: "mood", Type: "enum(" + labels + ")", Nullable: true},
			{Name: "note", Type: "text", Nullable: true},
		}}
	}
	row := func(vals ...string) []byte {
		var b []byte
		for _, v := range vals {
			if v == "" {
				b = source.AppendRowNull(b)
			} else {
				b = source.AppendRowValue(b, []byte(v))
			}
		}
		return b
	}
	streams := map[string]string{"mysql_moods": source.TypesMySQL, "pg_moods": source.TypesPostgres}
	var state []byte
	epoch := func(n uint64, labels string, rows [][]string) {
		t.Helper()
		var specs []engine.StreamSpec
		for stream, types := range streams {
			specs = append(specs, spec(types, stream, labels))
		}
		e, err := engine.New(engine.Config{State: state, Streams: specs, Unsupported: d.Capabilities().Unsupported})
		if errors.Is(err, engine.ErrUnavailable) {
			t.Fatal("the engine is not available in this build (cgo off?)")
		}
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		for stream := range streams {
			b := &engine.RawBatch{Stream: stream}
			for i, r := range rows {
				b.Append(uint8(source.OpInsert), int64(n)*100+int64(i), []byte(r[0]), row(r...))
			}
			out, err := e.Push(b, syncedAt)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Quarantined) != 0 || out.Record == nil {
				t.Fatalf("%s: quarantined %+v", stream, out.Quarantined)
			}
			f, _ := out.Record.Schema().FieldsByName("mood")
			if v, ok := f[0].Metadata.GetValue(engine.LogicalTypeKey); !ok || v != engine.LogicalTypeEnum {
				t.Fatalf("%s: the engine did not mark mood: %v", stream, f[0])
			}
			err = w.Write(ctx, stream, out.Record)
			out.Record.Release()
			if err != nil {
				t.Fatalf("%s epoch %d: %v", stream, n, err)
			}
		}
		if state, err = e.State(); err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, n, []sink.Committable{c}); err != nil {
			t.Fatal(err)
		}
	}
	epoch(1, "'sad','ok','happy'", [][]string{{"1", "happy", "a"}, {"2", "", "b"}, {"3", "ecstatic", ""}})
	epoch(2, "'sad','ok','happy','ecstatic'", [][]string{{"4", "ecstatic", "c"}, {"5", "sad", "d"}})

	for stream := range streams {
		types := clientQuery(t, fmt.Sprintf("SELECT name, type FROM system.columns WHERE database = '%s' AND table = '%s' AND name IN ('mood', 'note') ORDER BY name", db, stream))
		if want := "mood\tLowCardinality(Nullable(String))\nnote\tNullable(String)\n"; types != want {
			t.Errorf("%s column types:\n%s\nwant:\n%s", stream, types, want)
		}
		got := clientQuery(t, fmt.Sprintf("SELECT id, ifNull(mood, 'NULL'), ifNull(note, 'NULL') FROM %s.%s ORDER BY id", db, stream))
		if want := "1\thappy\ta\n2\tNULL\tb\n3\tecstatic\tNULL\n4\tecstatic\tc\n5\tsad\td\n"; got != want {
			t.Errorf("%s read back:\n%s\nwant:\n%s", stream, got, want)
		}
	}
}
