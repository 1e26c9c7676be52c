package etl

import "github.com/openetl/etl/pipeline"

// The attribute keys of the pipeline's metrics and spans (docs/metrics.md
// lists which metric carries which).
const (
	AttrPipeline    = pipeline.AttrPipeline    // openetl.pipeline: the pipeline's name
	AttrStream      = pipeline.AttrStream      // openetl.stream: the stream's name at the source
	AttrLane        = pipeline.AttrLane        // openetl.lane: the writer lane, 0..Lanes-1
	AttrDestination = pipeline.AttrDestination // openetl.destination: the destination's package name ("parquet")
	AttrSplit       = pipeline.AttrSplit       // openetl.split: a split's ID
	AttrLagUnit     = pipeline.AttrLagUnit     // openetl.lag.unit: the unit of openetl.job.lag ("message", "byte")
	AttrQueue       = pipeline.AttrQueue       // openetl.queue: "engine" or "lane"
	AttrOutcome     = pipeline.AttrOutcome     // openetl.outcome: how an attempt ended (a Phase)
	AttrGeneration  = pipeline.AttrGeneration  // openetl.generation: the attempt's generation (spans)
	AttrEpoch       = pipeline.AttrEpoch       // openetl.epoch: the epoch (spans)
	AttrBounded     = pipeline.AttrBounded     // openetl.bounded: Sync (true) or Run (spans)
)
