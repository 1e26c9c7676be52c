// Package delivery works out the delivery guarantee of each stream from
// the destination's class and capabilities, the source's replay class, the
// stream's write mode and primary key, and the level the pipeline
// requires. It is a pure function; the builder and the runner call it.
//
// The rules (docs/delivery.md in the repository explains them):
//
//	source replay  destination                   mode               key  guarantee
//	exact          stage-and-apply, transactional any                 any  exactly once
//	superset       stage-and-apply                merge              yes  effectively once
//	superset       skips rows by _openetl_id      append, overwrite  any  exactly once (when more than at least once is required)
//	exact,superset deliver-and-acknowledge        any                 any  at least once
//	superset       anything else                                          at least once
//	none           any                                                    best effort (a crash may lose records)
//
// Merge needs a primary key and a destination that can merge
// (sink.Capabilities.Merge), hard deletes one that can remove a merged
// key's row (Capabilities.HardDeletes), overwrite one that can replace a
// table's contents (Capabilities.Overwrite): without them the stream is
// invalid whatever the level required. Every destination appends.
package delivery

import (
	"errors"
	"fmt"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// Level is a delivery guarantee, ordered from weakest to strongest.
type Level uint8

const (
	// BestEffort: records read but not committed before a crash may be
	// lost (the source cannot replay).
	BestEffort Level = iota
	// AtLeastOnce: nothing is lost; a crash may repeat records.
	AtLeastOnce
	// EffectivelyOnce: nothing is lost; a repeat lands on the same key,
	// guarded by _openetl_seq, so the table ends equal to the source.
	EffectivelyOnce
	// ExactlyOnce: every record is visible exactly once.
	ExactlyOnce
)

// String returns "best effort", "at least once", "effectively once" or
// "exactly once".
func (l Level) String() string {
	switch l {
	case BestEffort:
		return "best effort"
	case AtLeastOnce:
		return "at least once"
	case EffectivelyOnce:
		return "effectively once"
	case ExactlyOnce:
		return "exactly once"
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// Mode is how a stream's rows are written: sink.Mode, the mode the
// destination's writers are told (sink.StreamSpec).
type Mode = sink.Mode

// The write modes (see sink.Mode).
const (
	Append    = sink.Append
	Merge     = sink.Merge
	Overwrite = sink.Overwrite
)

// Stream is what decides one stream's guarantee.
type Stream struct {
	Name         string
	Replay       source.Replay
	Class        sink.Class
	Capabilities sink.Capabilities
	Mode         Mode
	HasKey       bool
	// Deletes is what a Merge stream's deletes do (sink.SoftDeletes
	// unless the pipeline says otherwise); ignored for the other modes.
	Deletes sink.Deletes
}

// Guarantee is a stream's effective delivery guarantee and why.
type Guarantee struct {
	Stream string
	Level  Level
	// Reason says which rule gave the level, in words a user can act on.
	Reason string
}

// Errors, wrapped by the errors Check returns.
var (
	// ErrUnmet is wrapped when a stream's guarantee is below the required
	// level.
	ErrUnmet = errors.New("delivery: required level not met")
	// ErrInvalid is wrapped when a stream's configuration cannot work at
	// all (merge without a key; a mode or delete handling the
	// destination's sink.Capabilities don't declare).
	ErrInvalid = errors.New("delivery: invalid stream configuration")
)

// Decide returns s's guarantee when the pipeline requires level required
// (which matters only for destinations that skip rows by _openetl_id:
// skipping costs a lookup, so it is used only when asked for). It returns
// an error wrapping ErrInvalid for a configuration that cannot work.
func Decide(s Stream, required Level) (Guarantee, error) {
	g := Guarantee{Stream: s.Name}
	switch s.Mode {
	case Append:
	case Merge:
		switch {
		case !s.HasKey:
			return g, fmt.Errorf("%w: stream %q: merge needs a primary key, and the source reports none", ErrInvalid, s.Name)
		case !s.Capabilities.Merge:
			return g, fmt.Errorf("%w: stream %q: merge requested, but the destination cannot merge (its sink.Capabilities.Merge is false)", ErrInvalid, s.Name)
		case s.Deletes == sink.HardDeletes && !s.Capabilities.HardDeletes:
			return g, fmt.Errorf("%w: stream %q: hard deletes requested, but the destination keeps a deleted key's row, marked %s (its sink.Capabilities.HardDeletes is false): use soft deletes",
				ErrInvalid, s.Name, sink.ColumnDeleted)
		case s.Deletes > sink.HardDeletes:
			return g, fmt.Errorf("%w: stream %q: unknown delete handling %v", ErrInvalid, s.Name, s.Deletes)
		}
	case Overwrite:
		if !s.Capabilities.Overwrite {
			return g, fmt.Errorf("%w: stream %q: overwrite requested, but the destination can't replace a table's contents (its sink.Capabilities.Overwrite is false): write it in append or merge mode",
				ErrInvalid, s.Name)
		}
	default:
		return g, fmt.Errorf("%w: stream %q: unknown write mode %v", ErrInvalid, s.Name, s.Mode)
	}
	switch {
	case s.Replay == source.ReplayNone:
		g.Level, g.Reason = BestEffort, "the source cannot replay: records read but not committed before a crash are lost"
	case s.Class == sink.DeliverAck:
		g.Level, g.Reason = AtLeastOnce, "the destination makes writes visible before the checkpoint (deliver-and-acknowledge): a crash repeats them"
	case s.Replay == source.ReplayExact && (s.Class == sink.StageAndApply || s.Class == sink.Transactional):
		g.Level, g.Reason = ExactlyOnce, fmt.Sprintf("exact replay into a %v destination", s.Class)
	case s.Replay == source.ReplaySuperset && s.Mode == Merge && s.Class == sink.StageAndApply:
		g.Level, g.Reason = EffectivelyOnce, "superset replay merged by primary key: a repeat lands on the same key, guarded by _openetl_seq"
	case s.Replay == source.ReplaySuperset && s.Mode != Merge && s.Capabilities.SkipByID && required > AtLeastOnce:
		g.Level, g.Reason = ExactlyOnce, "superset replay into a destination that skips rows whose _openetl_id it already has"
	case s.Replay == source.ReplaySuperset:
		g.Level, g.Reason = AtLeastOnce, fmt.Sprintf("superset replay (%v, %v destination) may repeat records after a crash", s.Mode, s.Class)
	default:
		return g, fmt.Errorf("%w: stream %q: unknown replay class %v or destination class %v", ErrInvalid, s.Name, s.Replay, s.Class)
	}
	return g, nil
}

// Check decides every stream and returns their guarantees, with an error
// joining one error per stream that is invalid or below required, each
// naming the stream, the level it gets and why.
func Check(streams []Stream, required Level) ([]Guarantee, error) {
	out := make([]Guarantee, 0, len(streams))
	var errs []error
	for _, s := range streams {
		g, err := Decide(s, required)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, g)
		if g.Level < required {
			errs = append(errs, fmt.Errorf("%w: stream %q gets %v, %v required: %s", ErrUnmet, s.Name, g.Level, required, g.Reason))
		}
	}
	return out, errors.Join(errs...)
}
