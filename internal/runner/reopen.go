package runner

import (
	"maps"
)

// maxFruitlessReopens bounds the new attempts started in a row for a
// source's source.ErrReopen while none of them commits an epoch: a
// source that asks again and again without progress has a problem a
// new attempt won't solve, and the host gets its error.
const maxFruitlessReopens = 3

func addResults(a, b Result) Result {
	out := b
	out.Epochs += a.Epochs
	if b.Generation == 0 { // b failed before it claimed the pipeline
		out.Generation = a.Generation
	}
	out.Epoch = max(a.Epoch, b.Epoch)
	if len(a.Streams) > 0 {
		out.Streams = maps.Clone(a.Streams)
		for name, c := range b.Streams {
			out.Streams[name] = out.Streams[name].Add(c)
		}
	}
	if out.Totals == nil {
		out.Totals = a.Totals
	}
	return out
}
