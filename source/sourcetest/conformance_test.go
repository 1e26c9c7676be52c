package sourcetest_test

import (
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// TestFakeSourceConformance: the fake source users test with passes the
// suite users test their sources with, for each replay class it offers.
func TestFakeSourceConformance(t *testing.T) {
	for _, replay := range []source.Replay{source.ReplayExact, source.ReplaySuperset} {
		t.Run(replay.String(), func(t *testing.T) {
			newSource := func(*testing.T) source.Source {
				return sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{
					Replay: replay, SupersetMax: 3, Seed: 7,
					Streams: []sourcetest.FakeStream{
						{Name: "users", CDC: true, Splits: 2, Rows: 40, BadEvery: 9},
						{Name: "events", Unkeyed: true, Rows: 30},
					},
				})
			}
			sourcetest.Run(t, newSource, sourcetest.Options{})
		})
	}
}
