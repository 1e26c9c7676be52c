package etl_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// twoOrders is a source of two streams whose names fold to one table
// name: "Orders", declared (FormatRow, columns ID and Note), and
// "orders", JSON documents. Each has one split; rows[stream] is how many
// records the split has, which may grow between syncs.
type twoOrders struct {
	mu   sync.Mutex
	rows map[string]int
}

func (s *twoOrders) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{
		{Name: "Orders", Format: source.FormatRow, PrimaryKey: []string{"ID"}, CDC: true,
			Columns: []source.Column{{Name: "ID", Type: "int4"}, {Name: "Note", Type: "text", Nullable: true}}},
		{Name: "orders", PrimaryKey: []string{"id"}},
	}}, nil
}

func (s *twoOrders) Replay() source.Replay { return source.ReplayExact }

func (s *twoOrders) Open(_ context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []source.Split
	for _, name := range streams {
		var from int
		fmt.Sscan(string(resume[source.SplitID(name)]), &from)
		out = append(out, &ordersSplit{stream: name, from: from, to: s.rows[name]})
	}
	return out, nil
}

type ordersSplit struct {
	stream   string
	from, to int
}

func (sp *ordersSplit) ID() source.SplitID { return source.SplitID(sp.stream) }

func (sp *ordersSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	for i := sp.from; i < sp.to; i++ {
		key := []byte(fmt.Sprint(i))
		payload := []byte(fmt.Sprintf(`{"id":%d}`, i))
		if sp.stream == "Orders" {
			payload = source.AppendRow(nil, [][]byte{key, []byte("n")}, nil)
		}
		if err := e.Record(sp.stream, source.OpInsert, int64(i+1), key, payload); err != nil {
			return err
		}
	}
	return e.ResumePoint([]byte(fmt.Sprint(sp.to)))
}

// userDest is a user's destination: a sinktest.FakeDestination whose
// Writer records the WriterConfig it gets and the table of every Write.
type userDest struct {
	*sinktest.FakeDestination
	mu      sync.Mutex
	configs []sink.WriterConfig
	writes  map[string]int // table → rows
	unknown []string       // tables written that no spec names
}

func (d *userDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	d.mu.Lock()
	d.configs = append(d.configs, cfg)
	d.mu.Unlock()
	w, err := d.FakeDestination.Writer(ctx, cfg)
	return &userWriter{Writer: w, d: d, cfg: cfg}, err
}

type userWriter struct {
	sink.Writer
	d   *userDest
	cfg sink.WriterConfig
}

func (w *userWriter) Write(ctx context.Context, table string, rec arrow.RecordBatch) error {
	w.d.mu.Lock()
	w.d.writes[table] += int(rec.NumRows())
	if _, ok := w.cfg.Spec(table); !ok {
		w.d.unknown = append(w.d.unknown, table)
	}
	w.d.mu.Unlock()
	return w.Writer.Write(ctx, table, rec)
}

// TestWritersGetEachStreamsSpec: a user's writer learns each stream's
// table, write mode, key, delete handling and declared schema from its
// WriterConfig, on every lane, before any row. The table names are
// given up front in catalog order: "Orders" gets "orders" although only
// "orders" has rows in the first sync (named at first push, the JSON
// stream would have taken it), and keeps it in the next.
func TestWritersGetEachStreamsSpec(t *testing.T) {
	ctx := context.Background()
	src := &twoOrders{rows: map[string]int{"orders": 3}}
	dst := &userDest{writes: map[string]int{}, FakeDestination: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class: sink.StageAndApply, Capabilities: sink.Capabilities{Merge: true, HardDeletes: true, IdentifierCase: "lower", SimpleIdentifiers: true}})}
	p, err := etl.NewPipeline("specs").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Merge, "Orders").Deletes(sink.HardDeletes, "Orders").Lanes(2).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	want := []sink.StreamSpec{
		{Stream: "Orders", Table: "orders", Mode: sink.Merge, Key: []string{"id"}, Deletes: sink.HardDeletes, Types: source.TypesPostgres,
			Columns: []sink.Column{{Name: "id", Type: "int4"}, {Name: "note", Type: "text", Nullable: true}}},
		{Stream: "orders", Table: "orders_2", Mode: sink.Append, Key: []string{"id"}},
	}
	check := func(sync int, wantWrites map[string]int) {
		t.Helper()
		dst.mu.Lock()
		defer dst.mu.Unlock()
		if len(dst.configs) != 2 {
			t.Fatalf("sync %d: %d Writer calls, want 2 (one per lane)", sync, len(dst.configs))
		}
		for lane, cfg := range dst.configs {
			if cfg.Pipeline != "specs" || cfg.Lane != lane || !reflect.DeepEqual(cfg.Streams, want) {
				t.Errorf("sync %d: lane %d got %+v\nwant streams %+v", sync, lane, cfg, want)
			}
		}
		if len(dst.unknown) > 0 || !reflect.DeepEqual(dst.writes, wantWrites) {
			t.Errorf("sync %d: rows written by table %v (tables without a spec: %v), want %v", sync, dst.writes, dst.unknown, wantWrites)
		}
		dst.configs = nil
	}
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check(1, map[string]int{"orders_2": 3})
	src.mu.Lock()
	src.rows["Orders"] = 2
	src.mu.Unlock()
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check(2, map[string]int{"orders_2": 3, "orders": 2})
	// The merge stream's rows are merged by the spec's key.
	if rows := dst.Rows("orders"); len(rows) != 2 || rows[0].Key != "0" || rows[1].Key != "1" {
		t.Errorf("merged rows %+v, want keys 0 and 1", rows)
	}
}

// TestBuildChecksDeletes: delete handling is for merge streams that the
// source has.
func TestBuildChecksDeletes(t *testing.T) {
	parts := func() *etl.Builder {
		src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Streams: []sourcetest.FakeStream{{Name: "s", Rows: 1}}})
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Capabilities: sink.Capabilities{Merge: true, HardDeletes: true}})
		return etl.NewPipeline("p").From(src).To(dst).Checkpoints(checkpoint.NewMem())
	}
	for _, tc := range []struct {
		b    *etl.Builder
		want string
	}{
		{parts().Deletes(sink.HardDeletes), "deletes hard: no stream names"},
		{parts().Deletes(sink.HardDeletes, "s"), `deletes: stream "s": hard deletes need merge mode, but it is written in append mode`},
		{parts().Mode(delivery.Merge, "x").Deletes(sink.HardDeletes, "x"), `deletes: stream "x" is not in the source's catalog`},
	} {
		_, err := tc.b.Build()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build = %v, want an error saying %s", err, tc.want)
		}
	}
	if _, err := parts().Mode(delivery.Merge, "s").Deletes(sink.HardDeletes, "s").Build(); err != nil {
		t.Errorf("Build with hard deletes on a merge stream: %v", err)
	}
}
