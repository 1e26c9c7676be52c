package runner

import (
	"context"
	"errors"
	"maps"

	"github.com/openetl/etl/source"
)

// maxFruitlessReopens bounds the new attempts started in a row for a
// source's source.ErrReopen while none of them commits an epoch: a
// source that asks again and again without progress has a problem a
// new attempt won't solve, and the host gets its error.
const maxFruitlessReopens = 3

// attempts runs attempts until one ends other than with a source's
// source.ErrReopen (or ctx is done), and returns the counts of all of
// them together: Epochs and Streams summed, the rest from the last.
func attempts(ctx context.Context, cfg Config, bounded bool) (Result, error) {
	var total Result
	fruitless := 0
	for {
		res, err := attempt(ctx, cfg, bounded)
		total = addResults(total, res)
		if err == nil || ctx.Err() != nil || !errors.Is(err, source.ErrReopen) {
			return total, err
		}
		if res.Epochs > 0 {
			fruitless = 0
		} else if fruitless++; fruitless > maxFruitlessReopens {
			return total, err
		}
		cfg.withDefaults().Logger.Warn("the source's catalog changed; starting a new attempt", "pipeline", cfg.Name, "err", err)
	}
}

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
			s := out.Streams[name]
			s.Read += c.Read
			s.Written += c.Written
			s.Quarantined += c.Quarantined
			s.Held += c.Held
			out.Streams[name] = s
		}
	}
	if out.Totals == nil {
		out.Totals = a.Totals
	}
	return out
}
