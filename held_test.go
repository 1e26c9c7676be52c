package etl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// TestNamingAndHoldBack: a destination that folds names to upper case and
// can't take float64 gets upper-case tables and columns without the float
// columns (and nested columns without their float64 fields); their values
// land under _held/ with the row's key, one line per value, published
// with the epoch.
func TestNamingAndHoldBack(t *testing.T) {
	const rows = 500
	src, err := faker.New(faker.Config{Rows: rows, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class:        sink.StageAndApply,
		Capabilities: sink.Capabilities{IdentifierCase: "upper", Unsupported: []string{"float64"}},
	})
	store := checkpoint.NewMem()
	p, err := etl.NewPipeline("held").From(src).To(dst).Checkpoints(store).Build()
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
	got := dst.Rows("ORDERS")
	if len(got) != rows || len(dst.Rows(faker.Orders)) != 0 {
		t.Fatalf("%d rows in ORDERS, %d in orders; want %d and 0", len(got), len(dst.Rows(faker.Orders)), rows)
	}
	for _, r := range got {
		if _, ok := r.Values["AMOUNT"]; ok {
			t.Fatalf("held column AMOUNT reached the destination: %v", r.Values)
		}
		if _, ok := r.Values["CUSTOMER_ID"]; !ok {
			t.Fatalf("row without CUSTOMER_ID: %v", r.Values)
		}
	}
	var lines int64
	for e := uint64(1); e <= res.Epoch; e++ {
		b, err := store.ReadFile(context.Background(), "held", etl.HeldName(faker.Orders, e))
		if err != nil {
			continue // an epoch may hold nothing
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var l struct{ Stream, Table, Column, Value, Key string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			// ITEMS, a list of structs with a float64 price, is written
			// without the price, and each value is also held whole.
			if l.Stream != faker.Orders || l.Table != "ORDERS" || (l.Column != "AMOUNT" && l.Column != "ITEMS") || l.Value == "" || l.Key == "" {
				t.Fatalf("held line %s", sc.Bytes())
			}
			lines++
		}
	}
	if lines != c.Held {
		t.Fatalf("%d held lines, counts say %d", lines, c.Held)
	}
}
