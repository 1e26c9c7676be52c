package postgres_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Overwrite: the epochs of a refresh are applied but held; Finish
// replaces the table's contents with them in one transaction. A refresh
// with no rows empties the table. psql reads it.
func TestOverwrite(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	ctx := t.Context()
	cfg := sink.WriterConfig{Pipeline: "ow", Streams: []sink.StreamSpec{{Stream: "o", Table: "o", Mode: sink.Overwrite}}}
	contents := func() string {
		return psql(t, `SELECT coalesce(string_agg(id::text || value, ',' ORDER BY id), '-') FROM `+e.schema+`.o`)
	}
	var gen checkpoint.Generation
	var epoch uint64
	var head *checkpoint.Record
	// refresh writes one epoch per batch (an empty epoch for none) and
	// finishes the last.
	refresh := func(recs ...arrow.RecordBatch) {
		t.Helper()
		gen++
		w, err := dst.Writer(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(ctx)
		if _, err := w.Recover(ctx, gen, head); err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			recs = []arrow.RecordBatch{nil}
		}
		for _, r := range recs {
			epoch++
			if r != nil {
				if err := w.Write(ctx, "o", r); err != nil {
					t.Fatal(err)
				}
			}
			c, err := w.PreCommit(ctx, epoch)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			head = &checkpoint.Record{Pipeline: "ow", Epoch: epoch, Generation: gen}
		}
		if err := w.Finish(ctx, epoch); err != nil {
			t.Fatal(err)
		}
	}
	refresh(batch(t, row{id: 1, value: "a", seq: 1}), batch(t, row{id: 2, value: "b", seq: 2}))
	if got := contents(); got != "1a,2b" {
		t.Fatalf("after the first refresh: %s", got)
	}
	// Before Finish the old contents stay visible.
	gen++
	w, err := dst.Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, gen, head); err != nil {
		t.Fatal(err)
	}
	epoch++
	if err := w.Write(ctx, "o", batch(t, row{id: 3, value: "c", seq: 3})); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	if got := contents(); got != "1a,2b" {
		t.Errorf("committed, not finished: %s, want the old contents", got)
	}
	if err := w.Finish(ctx, epoch); err != nil {
		t.Fatal(err)
	}
	w.Close(ctx)
	head = &checkpoint.Record{Pipeline: "ow", Epoch: epoch, Generation: gen}
	if got := contents(); got != "3c" {
		t.Errorf("after the second refresh: %s, want 3c", got)
	}
	refresh()
	if got := contents(); got != "-" {
		t.Errorf("after an empty refresh: %s, want no rows", got)
	}
}

// Finish of a refresh that staged nothing, in a database where no lane
// ever staged a row, succeeds (the sim found it failing).
func TestOverwriteNothingStaged(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	ctx := t.Context()
	cfg := sink.WriterConfig{Pipeline: "ow0", Streams: []sink.StreamSpec{{Stream: "o", Table: "o", Mode: sink.Overwrite}}}
	w, err := dst.Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(ctx, 1); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}
