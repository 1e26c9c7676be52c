package etl_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// TestConnectorChildSpans: the Parquet destination's I/O shows up in the
// host's traces as children of the runner's spans: each stream applied
// in a Commit is an openetl.parquet.apply span under that openetl.commit,
// and each file flushed in a PreCommit an openetl.parquet.flush span
// under that openetl.precommit.
func TestConnectorChildSpans(t *testing.T) {
	tel := newTelemetry(t)
	src, err := faker.New(faker.Config{Rows: 5000, Streams: []string{faker.Orders, faker.Customers}})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("spans").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Telemetry(tel.mp, tel.tp).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]string{} // span ID → name
	for _, s := range tel.spans.Ended() {
		byID[s.SpanContext().SpanID().String()] = s.Name()
	}
	applied := map[string]int{}
	flushes := 0
	for _, s := range tel.spans.Ended() {
		parent := byID[s.Parent().SpanID().String()]
		switch s.Name() {
		case "openetl.parquet.apply":
			if parent != "openetl.commit" {
				t.Errorf("openetl.parquet.apply under %q, want openetl.commit", parent)
			}
			a := attribute.NewSet(s.Attributes()...)
			v, _ := a.Value("openetl.stream")
			applied[v.AsString()]++
		case "openetl.parquet.flush":
			if parent != "openetl.precommit" {
				t.Errorf("openetl.parquet.flush under %q, want openetl.precommit", parent)
			}
			flushes++
		}
	}
	if applied[faker.Orders] < 1 || applied[faker.Customers] < 1 || applied[faker.Orders] > res.Epochs {
		t.Errorf("apply spans per stream %v over %d epochs: want each stream applied, at most once per epoch", applied, res.Epochs)
	}
	if flushes < 2 {
		t.Errorf("%d flush spans, want one per stream's file at least", flushes)
	}
}
