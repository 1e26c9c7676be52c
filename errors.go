package etl

import (
	"context"
	"errors"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/source"
)

// Errors of a Pipeline's own.
var (
	// ErrBusy is returned by Sync and Run while another Sync or Run of
	// the same Pipeline runs. Nothing was claimed or fenced; try again
	// once the other returns.
	ErrBusy = errors.New("etl: pipeline is already running a Sync or Run")
	// ErrClosed is returned by Sync and Run after Close.
	ErrClosed = errors.New("etl: pipeline is closed")
	// ErrReshard is wrapped by Reshard's errors about its input and the
	// logs it found: pipelines that are not every shard of one count, a
	// count unchanged, a source that can't be dealt anew, an old shard
	// with no log or claimed again meanwhile, a new shard whose log has a
	// checkpoint, a split in two old logs or read by no new shard.
	// No new log has a checkpoint when Reshard returns it, unless its
	// message says to discard some.
	ErrReshard = errors.New("etl: reshard refused")
	// ErrRetired is wrapped by the error of Sync and Run (permanent: see
	// IsPermanent) of an old shard that Reshard retired: its splits are
	// the new shards' now, and it reads nothing. Run the new shards, or
	// remove the old logs to start the old count over.
	ErrRetired = runner.ErrRetired
)

// IsFenced reports whether err means a newer attempt of the same pipeline
// took over: the attempt that returned it is a zombie and should not be
// retried by the host. The error's message names the newer generation
// and, where the checkpoint store records it, the host and process that
// claimed it. It is false for a *sink.AheadError: a fence raised by a
// generation the checkpoint store never issued means the store was lost,
// not that another attempt runs.
func IsFenced(err error) bool {
	return errors.Is(err, checkpoint.ErrFenced) // sink.ErrFenced is the same error
}

// IsPermanent reports whether running the same Pipeline again would fail
// the same way, so a host's restart loop should stop and tell a person:
// the attempt was fenced (IsFenced), the Pipeline is closed, its
// configuration is wrong (a BuildError, except one whose only problem is
// a Discover that failed transiently; an unmet delivery level, an
// invalid name), the engine is not in this build, a transform's output
// was refused (ErrTransformOutput), or an error in err's
// chain says so itself with a method Permanent() bool returning true
// (a connector's own mark, or the runner's for an error the source or
// destination called permanent: source.Classifier, sink.Classifier), or
// it matches source.ErrPositionLost (the
// source no longer has the data at the resume position). Cancellation by the caller's context is neither permanent nor
// retryable.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	// The runner's mark first: the error it marks may join a sibling's
	// cancellation (stopped by this failure), which isCancel would see.
	var classified *runner.PermanentError
	if errors.As(err, &classified) {
		return true
	}
	// A fence (and the other permanent conditions) before cancellation
	// too: a fenced attempt's error joins the cancellation of the lanes
	// it stopped, and a retry would claim the pipeline again, fencing
	// the copy that fenced it.
	var be *BuildError
	if IsFenced(err) || errors.As(err, &be) && !be.transient {
		return true
	}
	for _, target := range []error{ErrClosed, delivery.ErrUnmet, delivery.ErrInvalid, checkpoint.ErrBadName,
		checkpoint.ErrConflict, engine.ErrUnavailable, engine.ErrState, source.ErrPositionLost, ErrTransformOutput} {
		if errors.Is(err, target) {
			return true
		}
	}
	if isCancel(err) {
		return false
	}
	return markedPermanent(err)
}

// IsRetryable reports whether a host may run the Pipeline again after
// err (after a pause of its choosing) with a fair chance of success: a
// lost connection, an object store or a database that was briefly away,
// a commit whose retries ran out, ErrBusy. Every attempt resumes from
// the last checkpoint, so a retry never loses or repeats data. It is
// false for nil, for IsPermanent errors and for the caller's own
// cancellation.
func IsRetryable(err error) bool {
	return err != nil && !isCancel(err) && !IsPermanent(err)
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled)
}

// markedPermanent walks err's tree for an error with Permanent() bool.
func markedPermanent(err error) bool {
	for err != nil {
		if p, ok := err.(interface{ Permanent() bool }); ok && p.Permanent() {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if markedPermanent(e) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}
