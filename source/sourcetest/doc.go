// Package sourcetest checks that a source connector keeps the promises of
// package source: a conformance suite that a connector's author runs from
// an ordinary go test, the same suite every built-in source passes.
//
//	func TestConformance(t *testing.T) {
//		sourcetest.Run(t, func(t *testing.T) source.Source {
//			src, err := mysource.New(mysource.Config{ /* test data */ })
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { src.Close(context.Background()) })
//			return src
//		}, sourcetest.Options{MaxRecords: 500})
//	}
//
// newSource is called for every check, and again whenever the suite
// stands for a restart (it reopens a split from a resume state on a new
// source, as a new process would). Every source it returns must read the
// same data the same way. Give the source data (a few hundred records per
// split is plenty), several splits, and, for a keyed CDC stream, several
// versions of some rows: the checks compare what is read, so a source
// with nothing to read checks little (the Read check fails then).
//
// The suite reads through an Emitter of its own that copies everything a
// split emits. Every Read is bounded (bounded=true) except where a check
// says otherwise, runs on its own goroutine with all the splits of one Open
// read at once, as the runner does, and is stopped at its first resume
// point after Options.MaxRecords records: the Emitter returns an error
// there, which Read must return. So a large or endless source is
// testable, and the suite treats "stopped at the limit" like the end.
//
// # Checks
//
// Each check is a subtest of Run named after it; Options.Skip skips one by
// name, with a reason.
//
//   - Discover: at least one stream; every name follows source.Stream's
//     rules (non-empty, at most 200 bytes, no '/', '\\' or control
//     characters, not starting with '.' or '_', not ending in ".lock");
//     names are unique; primary-key field names are non-empty; two calls,
//     and a call on a second source, return the same catalog.
//   - Replay: the class is one of None, Superset, Exact, and stays the same
//     after a read and on a second source.
//   - Open: Open with no resume states returns at least one split; IDs are
//     non-empty and unique, and the same set again on a second Open and on
//     a second source.
//   - OpenSubset (two streams or more): opened for one stream, the splits
//     emit records of that stream only.
//   - Read: a bounded Read of every split returns nil (or the limit's
//     error), and when it returns nil its last call was a resume point;
//     it emits only streams that were opened, defined ops, inserts only in
//     streams that are not CDC, a non-empty key in keyed streams, and per
//     key a seq that never decreases; it never calls the Emitter
//     concurrently, after an Emitter error, or after returning; a notice
//     it reports (the suite's Emitter is a source.Reporter, as the
//     runner's is) has a known Kind and a Detail; at least one record is
//     read in all.
//   - Resume (skipped for ReplayNone): for a sample of each split's
//     resume points (Options.ResumeSamples: the first, the last, evenly
//     spaced between), a new source's Open with that state, beside the
//     last state each other split recorded in the first read (the suite
//     overwrites all their bytes as soon as Open returns), gives a split
//     whose bounded Read emits, for ReplayExact, exactly the records the
//     first read emitted after that point, in order, with the same
//     stream, op, seq, key and payload (and, unless Options.Live,
//     nothing past the first read's end); for ReplaySuperset, every one
//     of those records, in any order, among others.
//   - Cancel: an unbounded Read returns within Options.CancelTimeout of
//     its context being cancelled (mid-stream, or at the end of the data
//     where it waits), and before that not at all; so does one whose
//     context is cancelled before it starts; the error wraps
//     context.Canceled.
//   - EmitterError: the Emitter fails (with an error wrapping
//     source.ErrStopping) at the 1st, 2nd, 3rd, 8th or 33rd call, the 1st
//     or 5th Record, or the 1st or 3rd ResumePoint; Read returns that
//     error, promptly, without calling the Emitter again. These are the
//     faults the runner and the simulation inject when a pipeline stops.
//   - CorruptState (skipped with Options.IgnoresResumeState): for each
//     split, Open with a state the split never produced (Options.
//     CorruptStates, by default the byte 0xff, a line of garbage, and a
//     real state with garbage appended) fails, or Read of that split
//     fails before emitting a record.
//   - Ack (only for a source.Acker): Ack accepts each split's first
//     resume states, then its last ones.
//
// CheckWrapper is a test of its own, for a wrapper of sources (a
// middleware that filters, counts or holds): it checks that the wrapper
// forwards every optional capability of the source contract.
//
// The suite does not check a source against its upstream (that rows match
// the table, say): pair it with tests of your own for that. The fakes in
// this package are the other side: sources for testing code that consumes
// sources.
package sourcetest
