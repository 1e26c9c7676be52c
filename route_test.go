package etl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
)

// shards is a source of declared streams for Build's checks only.
type shards []source.Stream

func (s shards) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: s}, nil
}
func (shards) Replay() source.Replay { return source.ReplayExact }
func (shards) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	return nil, errors.New("shards: not for reading")
}

func shard(name, idType string, cols ...source.Column) source.Stream {
	return source.Stream{Name: name, Format: source.FormatRow, PrimaryKey: []string{"id"}, CDC: true,
		Columns: append([]source.Column{{Name: "id", Type: idType}}, cols...)}
}

func TestRouteBuildErrors(t *testing.T) {
	amount := func(typ string) source.Column { return source.Column{Name: "amount", Type: typ, Nullable: true} }
	cat := shards{
		shard("orders_2024_01", "int4", amount("numeric(10,2)")),
		shard("orders_2024_02", "int8", amount("numeric(12,3)")),
		shard("orders", "int8"),
		shard("odd_a", "int4", amount("timestamptz")),
		shard("odd_b", "int4", amount("int8")),
		{Name: "docs", PrimaryKey: []string{"id"}},
		{Name: "nokey", Format: source.FormatRow, Columns: []source.Column{{Name: "id", Type: "int4"}}},
	}
	parts := func() *etl.Builder {
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply,
			Capabilities: sink.Capabilities{Merge: true, IdentifierCase: "lower", SimpleIdentifiers: true}})
		return etl.NewPipeline("p").From(cat).To(dst).Checkpoints(checkpoint.NewMem()).
			Streams("orders_2024_01", "orders_2024_02", "odd_a", "odd_b", "docs", "nokey")
	}
	identity := func(_ context.Context, b etl.TransformBatch) error { b.Emit(b.Record()); return nil }
	for _, tc := range []struct {
		name string
		b    *etl.Builder
		want string
	}{
		{"bad pattern", parts().Route("orders_[", "all"), "empty or malformed"},
		{"empty pattern", parts().Route("", "all"), "empty or malformed"},
		{"pattern twice", parts().Route("orders_*", "a").Route("orders_*", "b"), "given twice"},
		{"empty table", parts().Route("orders_*", ""), "empty table name"},
		{"reserved table", parts().Route("orders_*", "_OpenETL_x"), "reserved"},
		{"two patterns", parts().Route("orders_*", "a").Route("*_2024_02", "b"), `stream "orders_2024_02" matches "orders_*" and "*_2024_02"`},
		{"matches nothing", parts().Route("order_*", "orders"), `route "order_*" → "orders": the pattern matches none`},
		{"not selected", parts().Route("orders", "o"), `route "orders" → "o": the pattern matches none`},
		{"types", parts().Route("odd_*", "odd"), `column "amount" is timestamptz in stream "odd_a" and int8 in stream "odd_b"`},
		{"mode", parts().Route("orders_*", "o").Mode(delivery.Merge, "orders_2024_01"), `has mode`},
		{"key", parts().Route("nokey", "x").Route("odd_a", "x"), `has key`},
		{"declared and json", parts().Route("docs", "x").Route("odd_a", "x"), `has declared columns`},
		{"transform", parts().Route("orders_*", "o").Transform(identity, "orders_2024_02"), `stream "orders_2024_02" has a Go transform`},
		{"collides", parts().Route("orders_*", "DOCS"), `table "docs" of "docs" is also the table of "DOCS"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.b.Build()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build = %v, want an error saying %s", err, tc.want)
			}
		})
	}
	p, err := parts().Route("orders_2024_*", "orders").Route("odd_b", "orders").Mode(delivery.Merge, "orders_2024_01", "orders_2024_02", "odd_b").Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	for _, g := range p.Guarantees() {
		routed := strings.Contains(g.Reason, `into table "orders"`)
		if routed != (strings.HasPrefix(g.Stream, "orders_") || g.Stream == "odd_b") {
			t.Errorf("guarantee %s: %q", g.Stream, g.Reason)
		}
	}
}
