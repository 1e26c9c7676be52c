package faker_test

import (
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
	"github.com/openetl/etl/source/sourcetest"
)

// The conformance suite every source passes, over small data: several
// splits per stream, a share of malformed payloads (which the source emits
// like any other record), and a limit below the data's size on some runs
// so both a natural end and a stop at the limit are checked.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  faker.Config
		opts sourcetest.Options
	}{
		{"Splits3", faker.Config{Seed: 11, Rows: 600, SplitsPerStream: 3, MalformedShare: 0.05}, sourcetest.Options{}},
		{"OneSplitLimited", faker.Config{Seed: 3, Rows: 5000, MalformedShare: 0.2}, sourcetest.Options{MaxRecords: 700}},
		{"OneStream", faker.Config{Seed: 5, Rows: 90, SplitsPerStream: 4, Streams: []string{faker.Orders}}, sourcetest.Options{}},
		{"Streams", faker.Config{Seed: 9, Rows: 300, SplitsPerStream: 2}, sourcetest.Options{Streams: []string{faker.Customers}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sourcetest.Run(t, func(t *testing.T) source.Source {
				src, err := faker.New(tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				return src
			}, tc.opts)
		})
	}
}
