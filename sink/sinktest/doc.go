// Package sinktest checks that a destination keeps the promises of package
// sink: a conformance suite that a connector's author runs from an
// ordinary go test, the same suite every built-in destination passes.
//
//	func TestConformance(t *testing.T) {
//		db := openTestDB(t) // the storage every Destination below writes to
//		sinktest.Run(t, func(t *testing.T) sink.Destination {
//			return mysink.New(mysink.Config{DB: db})
//		}, sinktest.Options{
//			Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
//				return readTable(ctx, db, stream) // what a reader sees now
//			},
//		})
//	}
//
// The suite builds the Arrow batches itself, as the engine would: a
// stream's columns id (int64) and value (utf8, nullable), then the
// metadata columns _openetl_id (utf8), _openetl_op (utf8), _openetl_seq
// (int64) and _openetl_synced_at (timestamp[us, UTC]); a widened batch has
// a new nullable utf8 column, note, after the stream's columns. It writes
// under pipelines named "<Options.Pipeline>-<check>" and streams named
// "<check>_<x>", and writes the checkpoint records Recover gets itself
// (Pipeline, Epoch, Generation, one committable per lane).
//
// Each batch is built in memory the suite owns, and the suite releases it
// as Write returns, as the runner does (see sink.Writer.Write). Once
// nothing holds it (a writer that called Retain holds it until its
// Release), the suite overwrites its buffers (values, offsets, validity)
// with 0xDB bytes. A writer that kept references into a batch without
// Retain (the batch, its arrays, or strings and slices read from them
// zero-copy) then writes the poison, or panics reading a released array,
// and the check fails saying so. Once a check's writers are closed, every
// batch must be released: a Retain without its Release fails the check.
//
// Options.Visible is how the suite sees what a reader would: it returns a
// stream's rows, each with its _openetl_id and _openetl_seq, so a
// destination must keep those metadata columns (and may keep the others;
// when Row.Values is filled the suite checks the values too). For
// destinations that read back as Arrow, RowsFromRecord does the
// conversion. newDestination is called for every check, and again where
// the suite stands for another process (the attempt after a crash, a
// zombie's successor): every Destination it returns must reach the same
// storage, the one Visible reads, without data of an earlier Run.
//
// # Checks
//
// Each check is a subtest of Run named after it; Options.Skip skips one by
// name, with a reason. "Exactly" below means every row written in the
// committed epochs is visible once, no other row is, and Seq (and Op and
// Values, when reported) are what was written.
//
//   - RecoverNil: Recover with a nil head (a new pipeline) reports
//     Applied, also for the next generation.
//   - Invisible (not DeliverAck): rows are not visible after Write, nor
//     after PreCommit; Commit makes exactly them visible.
//   - Commit: three epochs over two streams (one with no rows in epoch
//     2): after each Commit, exactly the committed epochs are visible.
//   - CommitTwice: Commit of an applied epoch, again on the same writer,
//     and by a new attempt's writer after Recover (which reports Applied
//     for the applied head), returns nil and adds nothing; the new
//     attempt then carries on.
//   - EmptyEpoch: an epoch without rows pre-commits and commits; an epoch
//     with rows in one stream only; Recover of a committed empty head is
//     Applied, of an uncommitted one Applied or Recoverable (never Lost).
//   - WidenSchema: a stream's schema gains a nullable column mid-epoch;
//     rows of both shapes are visible, exactly, and the new column reads
//     back (null, or absent, for the rows written before it).
//   - Crash: after PreCommit without Commit (the process died), nothing of
//     the epoch is visible (not DeliverAck); a new attempt's Recover(gen+1,
//     head) reports Recoverable (DeliverAck: or Applied) and its Commit
//     makes the epoch visible exactly once; a third attempt's Recover
//     reports Applied and its Commit adds nothing.
//   - Zombie: once a newer generation has recovered, Commit by a writer
//     of an older generation (its pre-committed epoch, and a later one it
//     goes on writing) fails with an error wrapping sink.ErrFenced and
//     changes nothing visible; a Recover by an older generation after a
//     newer one does not lower the fence (it fails, or the Commit after it
//     is fenced).
//   - Concurrent: Commit(N) runs on another goroutine while the same
//     writer writes and pre-commits epoch N+1, for several epochs; after
//     each, exactly epochs up to N are visible (epoch N+1's rows are not,
//     unless DeliverAck). Run with -race.
//   - Lanes: Options.Lanes writers write and pre-commit one epoch (a
//     stream written by one lane only; a lane with no rows in the second
//     epoch), and lane 0's Commit with every lane's committables makes
//     all of them visible, exactly.
//   - CloseDiscards (not DeliverAck): rows written after the last
//     PreCommit are never visible once the writer is closed, whether the
//     epoch before was committed or not.
//   - Ahead (not DeliverAck): after two epochs are applied, Recover with
//     a nil head (the checkpoint store was lost) or with the first
//     epoch's record (restored from an older copy) fails with a
//     *sink.AheadError (errors.Is sink.ErrAhead, not sink.ErrFenced) and
//     changes nothing visible; it raises no fence, so the log restored as
//     it was recovers with a lower generation and carries on.
//   - Finish: after the Commit of a Final epoch (a Sync that read
//     everything), Finish leaves exactly the committed rows visible (a
//     writer that groups epochs into fewer commits makes them visible
//     then), and again changes nothing; Recover of a Final head reports
//     Applied when the head was finished, or committed and not finished
//     (Recover finishes it: the runner calls Finish only right after a
//     Commit), and Applied or Recoverable when it was pre-committed only;
//     a zombie's Finish fails with sink.ErrFenced, or does nothing.
//
// The write modes beyond append are checked when the destination's
// Capabilities declare them (the runner never gives a writer one they
// don't), each on a stream keyed by id, with the spec that mode's
// streams get (sink.StreamSpec):
//
//   - Merge (Capabilities.Merge; soft deletes): over two lanes, four
//     epochs and a crash, a reader sees one row per key, its committed
//     version with the highest _openetl_seq: updates, versions out of
//     order within a batch and within an epoch, deletes (the key's row
//     is kept, marked: its _openetl_op is "delete", or its
//     _openetl_deleted true, as the reader reports), an older insert
//     after a delete, keys inserted again after their delete.
//   - MergeReplay (Capabilities.Merge): versions older than a key's
//     committed one, written in a later epoch (a superset source's
//     repeat), change nothing, a deleted key's included.
//   - HardDeletes (Capabilities.Merge and HardDeletes): Merge's epochs
//     with hard deletes: a deleted key has no row.
//   - Overwrite (Capabilities.Overwrite): an overwrite stream's epochs
//     are invisible until Finish of the refresh's Final epoch, which
//     replaces the table's rows with the refresh's (over lanes, and over
//     attempts when one stopped mid-refresh), in one step; readers see
//     the last refresh whole until then; Finish again and a zombie's
//     Finish change nothing; Recover of a Final head whose Finish never
//     ran (committed, or only pre-committed) finishes it.
//   - OverwriteEmpty (Capabilities.Overwrite): a refresh that writes no
//     rows empties the table.
//   - Patches (Capabilities.Patches): a patch batch (sink.PatchMetadataKey)
//     of value, _openetl_id and _openetl_seq, written in a later epoch,
//     sets value on the committed rows with those ids where it is null,
//     and only once its epoch is committed (not visible after PreCommit,
//     nor from an attempt that never committed it); a row whose value is
//     set keeps it, a patch of an id no row has adds no row, and a
//     Commit of the epoch again changes nothing.
//
// For a merged stream Visible returns the rows a reader of the table
// sees, one per key once the destination has merged them (a
// ClickHouse-like table read as its readers are told to, with FINAL, but
// keeping deleted keys' rows), each with the _openetl_id, _openetl_seq
// and, when kept, _openetl_op of the version it holds, and
// _openetl_deleted in Values when the destination has it.
//
// What the suite can't do for you: make staged data disappear, so the
// Lost outcome is not checked; inject faults under load; check
// destination-specific layout. For the first two, run the simulation in
// package sim against the destination (sim.Options.Target): it drives
// the real runner into it through crashes at every protocol step, lost
// Commit responses, zombies and staged data expiring, and checks what a
// reader of it sees.
//
// # Fakes and faults
//
// The fakes in this package are the other side: destinations for testing
// code that drives writers. FakeDestination is an in-memory destination
// of any class, with per-call fault hooks (FakeDestinationConfig.Control,
// WithControl, Kill). WithFaults puts the same hooks around any
// destination, yours included:
//
//	view := sinktest.WithFaults(dst, sinktest.FaultConfig{
//		Control: func(ctx context.Context, c sinktest.FakeDestCall) error {
//			if c.Op == sinktest.FakeCommit && c.Epoch == 3 {
//				return &sinktest.FakeFault{After: true} // applied, response lost
//			}
//			return nil
//		},
//		Observe: func(c sinktest.FakeDestCall, o sink.Outcome, err error) { /* what it did */ },
//	})
//
// A FakeFault fails the call before it reaches the destination, or with
// After once it took effect; with Crash it kills the view, which then
// refuses every call (Close included), as a dead process would.
package sinktest
