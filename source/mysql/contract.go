package mysql

import "github.com/openetl/etl/source"

// The optional capabilities of the source contract this connector
// implements (see package source), checked by the compiler.
var (
	_ source.Closer           = (*Source)(nil)
	_ source.Classifier       = (*Source)(nil)
	_ source.Resnapshotter    = (*Source)(nil)
	_ source.Sharder          = (*Source)(nil) // refuses more than one shard
	_ source.LagReporter      = (*split)(nil)
	_ source.SnapshotReporter = (*split)(nil)
	_ source.SnapshotReporter = (*snapSplit)(nil)
	_ source.Reporter         = markEmitter{} // forwards to the runner's
	_ source.Reporter         = dedupe{}      // likewise
)
