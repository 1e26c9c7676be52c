package etl

import "github.com/openetl/etl/internal/runner"

// The attribute keys of the pipeline's metrics and spans (docs/metrics.md
// lists which metric carries which).
const (
	AttrPipeline    = runner.AttrPipeline    // openetl.pipeline: the pipeline's name
	AttrStream      = runner.AttrStream      // openetl.stream: the stream's name at the source
	AttrLane        = runner.AttrLane        // openetl.lane: the writer lane, 0..Lanes-1
	AttrDestination = runner.AttrDestination // openetl.destination: the destination's package name ("parquet")
	AttrSplit       = runner.AttrSplit       // openetl.split: a split's ID
	AttrLagUnit     = runner.AttrLagUnit     // openetl.lag.unit: the unit of openetl.job.lag ("message", "byte")
	AttrQueue       = runner.AttrQueue       // openetl.queue: "engine" or "lane"
	AttrOutcome     = runner.AttrOutcome     // openetl.outcome: how an attempt ended (a Phase)
	AttrGeneration  = runner.AttrGeneration  // openetl.generation: the attempt's generation (spans)
	AttrEpoch       = runner.AttrEpoch       // openetl.epoch: the epoch (spans)
	AttrBounded     = runner.AttrBounded     // openetl.bounded: Sync (true) or Run (spans)
)
