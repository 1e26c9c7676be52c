package clickhouse_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// supersetFaker is the faker claiming superset replay (a source that may
// repeat records it emitted before a checkpoint, like a CDC log).
type supersetFaker struct{ *faker.Source }

func (supersetFaker) Replay() source.Replay { return source.ReplaySuperset }

// TestGuarantees checks what a pipeline into ClickHouse reports per
// stream and mode, against the server the tests run on (18.16, which has
// no insert deduplication tokens: the guarantee rests on the staged copy
// and its count verification, the same on every version). From an exact
// source both modes are exactly once; from a superset source merge is
// effectively once and append at least once, so requiring exactly once
// of an appended superset stream is an error naming it.
func TestGuarantees(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	ctx := context.Background()
	dst := newDest(t, clickhouse.Config{Conn: conn, Database: db})
	if dst.Class() != sink.StageAndApply {
		t.Fatalf("Class = %v, want stage-and-apply", dst.Class())
	}
	if c := dst.Capabilities(); !c.Merge || c.SkipByID {
		t.Fatalf("Capabilities = %+v: want merge, and no skip by _openetl_id (an appended repeat is a new row)", c)
	}
	f, err := faker.New(faker.Config{Seed: 1, Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	build := func(src source.Source, required delivery.Level) (*etl.Pipeline, error) {
		store, err := checkpoint.OpenDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close(ctx) })
		return etl.NewPipeline("g").From(src).To(dst).Checkpoints(store).
			Mode(delivery.Merge, faker.Customers).Require(required).Build()
	}
	levels := func(p *etl.Pipeline) map[string]delivery.Level {
		out := map[string]delivery.Level{}
		for _, g := range p.Guarantees() {
			out[g.Stream] = g.Level
		}
		return out
	}
	for _, tc := range []struct {
		name string
		src  source.Source
		want map[string]delivery.Level
	}{
		{"exact source", f, map[string]delivery.Level{faker.Customers: delivery.ExactlyOnce, faker.Orders: delivery.ExactlyOnce}},
		{"superset source", supersetFaker{f}, map[string]delivery.Level{faker.Customers: delivery.EffectivelyOnce, faker.Orders: delivery.AtLeastOnce}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := build(tc.src, delivery.AtLeastOnce)
			if err != nil {
				t.Fatal(err)
			}
			got := levels(p)
			for stream, want := range tc.want {
				if got[stream] != want {
					t.Errorf("stream %s (%s): %v, want %v", stream, map[bool]string{true: "merge", false: "append"}[stream == faker.Customers], got[stream], want)
				}
			}
		})
	}
	_, err = build(supersetFaker{f}, delivery.ExactlyOnce)
	if !errors.Is(err, delivery.ErrUnmet) || !strings.Contains(err.Error(), faker.Orders) {
		t.Fatalf("Require(ExactlyOnce) of an appended superset stream: err = %v, want ErrUnmet naming %q", err, faker.Orders)
	}
}
