package etl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// rejecting is a destination whose SchemaChecker rejects one column (as
// Iceberg rejects a type change it can't make).
type rejecting struct {
	*sinktest.FakeDestination
	column string
	extra  string // a column to reject that no batch has
	mu     sync.Mutex
	asked  int
}

func (d *rejecting) CheckSchema(_ context.Context, table string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	d.mu.Lock()
	d.asked++
	d.mu.Unlock()
	if len(sc.FieldIndices(d.column)) == 0 {
		return nil, nil
	}
	out := []sink.RejectedColumn{{Column: d.column, Reason: "float64 to int: can't"}}
	if d.extra != "" {
		out = append(out, sink.RejectedColumn{Column: d.extra, Reason: "test"})
	}
	return out, nil
}

// TestSchemaCheckerHoldsColumnsBack: the runner asks a destination that
// implements sink.SchemaChecker about each new schema, once per table and
// attempt, not per batch; the column it rejects never reaches the
// writers, and its values land under _held/ with the row's _openetl_id,
// seq, op and the reason, counted as held, with a schema.blocked event.
func TestSchemaCheckerHoldsColumnsBack(t *testing.T) {
	const rows = 20_000
	src, err := faker.New(faker.Config{Rows: rows, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	dst := &rejecting{FakeDestination: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply}), column: "amount"}
	store := checkpoint.NewMem()
	var mu sync.Mutex
	var blocked []etl.Event
	done := make(chan struct{})
	p, err := etl.NewPipeline("rejected").From(src).To(dst).Checkpoints(store).OnEvent(func(e etl.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case etl.EventSchemaBlocked:
			blocked = append(blocked, e)
		case etl.EventSyncSucceeded:
			close(done)
		}
	}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := res.Streams[faker.Orders]
	if c.Written != rows || c.Held == 0 {
		t.Fatalf("counts %+v: want %d written and some held", c, rows)
	}
	got := dst.Rows(faker.Orders)
	if len(got) != rows {
		t.Fatalf("%d rows at the destination, want %d", len(got), rows)
	}
	ids := map[string]bool{}
	for _, r := range got {
		if _, ok := r.Values["amount"]; ok {
			t.Fatalf("held column amount reached the destination: %v", r.Values)
		}
		if _, ok := r.Values["customer_id"]; !ok {
			t.Fatalf("row without customer_id: %v", r.Values)
		}
		ids[r.ID] = true
	}
	var lines int64
	for e := uint64(1); e <= res.Epoch; e++ {
		b, err := store.ReadFile(context.Background(), "rejected", etl.HeldName(faker.Orders, e))
		if err != nil {
			continue // an epoch may hold nothing
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l struct{ Stream, Table, Column, Value, ID, Op, Reason string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if l.Stream != faker.Orders || l.Column != "amount" || l.Value == "" || !ids[l.ID] || l.Op == "" || l.Reason == "" {
				t.Fatalf("held line %s", sc.Bytes())
			}
			lines++
		}
	}
	if lines != c.Held {
		t.Fatalf("%d held lines, counts say %d", lines, c.Held)
	}
	if dst.asked != 1 {
		t.Errorf("CheckSchema asked %d times for one table and schema, want once", dst.asked)
	}
	testutil.Recv(t, "the sync.succeeded event", done) // events are delivered in order: schema.blocked came before
	mu.Lock()
	defer mu.Unlock()
	if len(blocked) != 1 || blocked[0].Column != "amount" || blocked[0].Change != "held" {
		t.Errorf("schema.blocked events %+v, want one for amount", blocked)
	}
}

// TestSchemaCheckerUnknownColumn: a destination that rejects a column the
// batch doesn't have fails the sync with an error naming it (it used to
// panic while sorting the rejections).
func TestSchemaCheckerUnknownColumn(t *testing.T) {
	src, err := faker.New(faker.Config{Rows: 100, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	dst := &rejecting{FakeDestination: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply}), column: "amount", extra: "nope"}
	p, err := etl.NewPipeline("unknown").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("sync: %v, want an error naming column nope", err)
	}
}
