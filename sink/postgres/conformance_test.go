package postgres_test

import (
	"testing"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

func TestConformance(t *testing.T) {
	e := newEnv(t)
	sinktest.Run(t, func(t *testing.T) sink.Destination { return e.open(t) }, sinktest.Options{Visible: e.visible})
}
