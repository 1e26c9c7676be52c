package sink

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// The optional capabilities of a Destination, all of them, in this one
// file. The runner asks a destination for each with a type assertion:
// one that lacks it gets the default the capability's doc states. A
// destination that wraps another (a test kit's fault injector, a user's
// instrumentation) must implement every one its inner destination may
// have and forward the call, or the inner destination's checks are
// silently skipped; sinktest.WithFaults does. Each built-in destination
// asserts what it implements (var _ sink.SpecChecker =
// (*Destination)(nil)). A Writer has no optional capabilities: what it
// must do to commit an epoch is the Writer interface, Finish included,
// and, for a destination whose Capabilities declare Deferred,
// Visibility, which the runner then requires (an attempt whose lane-0
// Writer lacks it fails), so a wrapper can't drop it silently.
//
//	SpecChecker    Build and each attempt ask whether a stream's spec can
//	               be honoured (its key, the destination's own options);
//	               the modes it has are Capabilities, not optional
//	SchemaChecker  the engine stage asks whether a table can take a new
//	               schema, and holds back the columns it can't
//	Namer          telemetry names the destination (openetl.destination)
//	Collector      after recovery, each attempt has it remove what failed
//	               attempts staged that no checkpoint record names

// SpecChecker is implemented by a Destination that can't honour every
// StreamSpec its Capabilities allow: a key it can't apply, a table name
// of its own, a physical option of its own (a partition spec, a sort
// key) that doesn't fit the stream's mode or key. The write modes and
// delete handling it has are declared in Capabilities (Merge,
// HardDeletes, Overwrite), never here: a spec asking for one it doesn't
// declare is refused before CheckStream is asked. The runner asks it
// about each selected stream when the pipeline is built and before each
// attempt claims the pipeline; an error fails Build (or the attempt,
// before anything is claimed or written), named by the stream.
type SpecChecker interface {
	// CheckStream returns why the destination can't write spec, or nil.
	// It must not change anything, and should be cheap: no I/O.
	CheckStream(spec StreamSpec) error
}

// PipelineChecker is implemented by a Destination that can tell, by
// looking, that a pipeline must not write there: a stream that another
// pipeline already writes under the same prefix, say. Build
// (etl.Builder.BuildContext) calls it once with the pipeline's name and
// every selected stream's spec (as the first attempt would name its
// tables) and fails with its error; the writers check again when they
// recover, since the answer can change after Build.
type PipelineChecker interface {
	// CheckPipeline returns why the pipeline cfg.Pipeline can't write
	// the streams of cfg (Lane is 0), or nil. It may read (under ctx)
	// but must not change anything.
	CheckPipeline(ctx context.Context, cfg WriterConfig) error
}

// SchemaChecker is implemented by a Destination that can't take every
// schema change a stream may go through (a type change it can't make,
// say string to int). The runner asks it about each new schema of a
// table before the table's batches reach the writers, and holds back the
// columns it names: they are left out of the rows the writers get (the
// destination's column keeps its old type; its values for these rows are
// null there), and their values are kept under the pipeline's _held/
// directory, one JSON line per value with the row's _openetl_id, seq
// and op, instead of the epoch failing. The stream's schema.blocked event
// and held count report it.
type SchemaChecker interface {
	// CheckSchema returns the columns of the batch schema sc that table
	// can't take, each with the reason; none when it takes sc, possibly
	// after adding columns or widening types as Write does. It must not
	// change anything. An error fails the attempt. The runner's engine
	// workers may call it at once for different tables.
	CheckSchema(ctx context.Context, table string, sc *arrow.Schema) ([]RejectedColumn, error)
}

// RejectedColumn is a column a SchemaChecker can't take, and why.
type RejectedColumn struct {
	Column string // the column's name in the batch schema
	Reason string // e.g. "string to int64: Iceberg can't promote it"
}

// Namer is implemented by a Destination that names itself for
// telemetry: the openetl.destination attribute of metrics and spans.
// Without it the name is the last element of the destination type's
// package path ("iceberg", "sinktest").
type Namer interface {
	Name() string
}

// Classifier may be implemented by a Destination that can tell a
// failure no retry will fix (credentials refused, a database that does
// not exist, a missing privilege): see source.Classifier, whose rules it
// follows.
type Classifier interface {
	Permanent(err error) bool
}
