package kafka

import "github.com/openetl/etl/source"

// The optional capabilities of the source contract this connector
// implements (see package source), checked by the compiler.
var (
	_ source.Acker         = (*Source)(nil)
	_ source.Closer        = (*Source)(nil)
	_ source.Classifier    = (*Source)(nil)
	_ source.Sharder       = (*Source)(nil)
	_ source.LagReporter   = (*split)(nil)
	_ source.PauseReporter = (*split)(nil)
)
