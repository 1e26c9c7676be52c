package etl_test

import (
	"context"
	"errors"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// resnapshotter is a faker source that can read a stream again: it
// records the streams asked for, or fails with err.
type resnapshotter struct {
	*faker.Source
	asked []string
	err   error
}

func (r *resnapshotter) Resnapshot(_ context.Context, stream string) error {
	r.asked = append(r.asked, stream)
	return r.err
}

// TestPipelineResnapshot: Pipeline.Resnapshot passes a stream the
// pipeline reads to the source's Resnapshotter, with its error wrapped;
// refuses a stream the pipeline doesn't read without asking the source;
// and says errors.ErrUnsupported for a source without the capability.
func TestPipelineResnapshot(t *testing.T) {
	ctx := context.Background()
	build := func(src source.Source, streams ...string) *etl.Pipeline {
		t.Helper()
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
		b := etl.NewPipeline("resnap").From(src).To(dst).Checkpoints(checkpoint.NewMem())
		if len(streams) > 0 {
			b = b.Streams(streams...)
		}
		p, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	fk, err := faker.New(faker.Config{Seed: 1, Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := build(fk).Resnapshot(ctx, faker.Customers); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Resnapshot through a source without it = %v, want errors.ErrUnsupported", err)
	}
	r := &resnapshotter{Source: fk}
	p := build(r, faker.Customers)
	if err := p.Resnapshot(ctx, faker.Orders); !errors.Is(err, source.ErrUnknownStream) || len(r.asked) != 0 {
		t.Errorf("Resnapshot of a stream not selected = %v (source asked %q), want source.ErrUnknownStream unasked", err, r.asked)
	}
	if err := p.Resnapshot(ctx, faker.Customers); err != nil || len(r.asked) != 1 || r.asked[0] != faker.Customers {
		t.Errorf("Resnapshot(customers) = %v, source asked %q; want nil and [customers]", err, r.asked)
	}
	r.err = source.ErrNoKey
	if err := p.Resnapshot(ctx, faker.Customers); !errors.Is(err, source.ErrNoKey) {
		t.Errorf("Resnapshot = %v, want the source's error wrapped", err)
	}
}
