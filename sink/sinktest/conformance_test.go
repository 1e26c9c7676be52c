package sinktest_test

import (
	"context"
	"testing"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// TestFakeDestinationConformance: the fakes users test with pass the suite
// users test their destinations with, in every class, with every write
// mode declared (and so checked).
func TestFakeDestinationConformance(t *testing.T) {
	for _, class := range []sink.Class{sink.StageAndApply, sink.Transactional, sink.DeliverAck} {
		t.Run(class.String(), func(t *testing.T) {
			dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: class,
				Capabilities: sink.Capabilities{Merge: true, HardDeletes: true, Overwrite: true}})
			sinktest.Run(t, func(*testing.T) sink.Destination { return dst }, sinktest.Options{
				Visible: func(_ context.Context, stream string) ([]sinktest.Row, error) {
					var out []sinktest.Row
					for _, r := range dst.Rows(stream) {
						out = append(out, sinktest.Row{ID: r.ID, Seq: r.Seq, Op: r.Op, Values: r.Values})
					}
					return out, nil
				},
			})
		})
	}
}
