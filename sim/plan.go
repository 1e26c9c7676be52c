package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// point is a place in an attempt where a fault can fire: before a call
// to the source, the destination or the checkpoint store.
type point uint8

const (
	pSrcDiscover point = iota
	pSrcOpen
	pSrcRead
	pSrcResume
	pSrcAck
	pDstWrite
	pDstPreCommit
	pDstCommit
	pDstRecover
	pDstClose
	pStoreClaim
	pStoreCommit
	pStoreRewind
	pStoreGet
	pStoreWriteFile
	pStoreReadFile
	// numPoints bounds the points newFault draws from (the fake's plans).
	numPoints
	// pDstFinish (the Writer's Finish) is drawn only for Targets, from
	// a stream of their own, so that the fake's plans stay what they were.
	pDstFinish = numPoints
	// pStoreDeleteFile (checkpoint.FileDeleter's DeleteFile, removing a
	// published side file's staged copy) is never drawn: faults at the
	// publish before it cover a crash between the two.
	pStoreDeleteFile = numPoints + 1
	numAllPoints     = numPoints + 2
)

var pointNames = [numAllPoints]string{
	"source.discover", "source.open", "source.read", "source.resume-point", "source.ack",
	"dest.write", "dest.precommit", "dest.commit", "dest.recover", "dest.close",
	"store.claim", "store.commit", "store.rewind", "store.get", "store.writefile", "store.readfile",
	"dest.finish", "store.deletefile",
}

func (p point) String() string { return pointNames[p] }

// action is what a fault does.
type action uint8

const (
	// errBefore fails the call before it has any effect.
	errBefore action = iota
	// errAfter lets the call take effect, then fails it: a lost response.
	errAfter
	// crashBefore kills the attempt before the call has any effect.
	crashBefore
	// crashAfter kills the attempt right after the call took effect.
	crashAfter
	// slow delays the call.
	slow
	// stall blocks the call until the simulation releases it, while the
	// next attempt runs: the stalled attempt becomes a zombie.
	stall
)

var actionNames = []string{"error-before", "error-after (lost response)", "crash-before", "crash-after", "slow", "stall (zombie)"}

func (a action) String() string { return actionNames[a] }

// fault fires at the nth call (from 1) of its point in one attempt, and for
// errBefore at the times-1 calls after it too.
type fault struct {
	at     point
	nth    int
	act    action
	times  int
	delay  time.Duration
	reason string // the protocol step it models
}

func (f fault) String() string {
	s := fmt.Sprintf("%s at %s call #%d", f.act, f.at, f.nth)
	if f.times > 1 {
		s += fmt.Sprintf(" (x%d)", f.times)
	}
	if f.act == slow {
		s += fmt.Sprintf(" (%v)", f.delay)
	}
	if f.reason != "" {
		s += " [" + f.reason + "]"
	}
	return s
}

type attemptPlan struct {
	run        bool          // Run (cancelled after runFor) instead of Sync
	runFor     time.Duration // for Run
	faults     []fault
	dropStaged bool // the destination's unapplied staged data expires before the attempt
	// earlyRelease: when the attempt stalls, the zombie goes on as the
	// next attempt calls Recover, not once it returned (Targets only).
	earlyRelease bool
}

func (p attemptPlan) stalls() bool {
	for _, f := range p.faults {
		if f.act == stall {
			return true
		}
	}
	return false
}

// workload is everything the seed picks about the pipeline.
type workload struct {
	streams       []sourcetest.FakeStream
	modes         map[string]delivery.Mode
	replay        source.Replay
	supersetMax   int
	resumeEvery   int
	class         sink.Class
	caps          sink.Capabilities
	required      delivery.Level
	lanes         int
	engineWorkers int
	batchRows     int
	epochInterval time.Duration
	epochBytes    int64
	commitRetries int
	attempts      []attemptPlan
	// canDropStaged: the destination can discard staged data (the fake
	// always can; a Target when it has DropStaged).
	canDropStaged bool
	// loseStore: after the planned attempts, one attempt runs with the
	// checkpoint store lost (an empty one), claimed past the fence's
	// generation first when lostPastFence.
	loseStore, lostPastFence bool
	// transforms gives streams a Go transform (Options.Transforms), the
	// filter a flaky one with flakyFilter.
	transforms  map[string]transformKind
	flakyFilter bool
	// routes send streams into shared tables (Options.Routes); routed
	// maps each routed stream to its table.
	routes []runner.Route
	routed map[string]string
}

func (w *workload) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay=%v(max %d) resume-every=%d dest=%v merge=%v skip-by-id=%v required=%v lanes=%d engine-workers=%d batch-rows=%d epoch-interval=%v epoch-bytes=%d commit-retries=%d",
		w.replay, w.supersetMax, w.resumeEvery, w.class, w.caps.Merge, w.caps.SkipByID, w.required, w.lanes, w.engineWorkers, w.batchRows, w.epochInterval, w.epochBytes, w.commitRetries)
	for _, s := range w.streams {
		fmt.Fprintf(&b, "\n  stream %s: keyed=%v cdc=%v splits=%d rows/split=%d bad-every=%d mode=%v",
			s.Name, !s.Unkeyed, s.CDC, s.Splits, s.Rows, s.BadEvery, w.modes[s.Name])
		if k := w.transforms[s.Name]; k != tfNone {
			fmt.Fprintf(&b, " transform=%v", k)
		}
		b.WriteString(w.routeNote(s.Name))
	}
	return b.String()
}

func (w *workload) deliveryStreams() []delivery.Stream {
	out := make([]delivery.Stream, 0, len(w.streams))
	for _, s := range w.streams {
		out = append(out, delivery.Stream{Name: s.Name, Replay: w.replay, Class: w.class,
			Capabilities: w.caps, Mode: w.modes[s.Name], HasKey: !s.Unkeyed})
	}
	return out
}

// newWorkload draws the workload and the fault plan from the seed. With
// a Target, its declared class and capabilities replace the drawn ones
// (drawn all the same, so that the rest of the draw is the same sequence).
func newWorkload(seed uint64, opts Options, decl *declared) *workload {
	rng := rand.New(rand.NewPCG(seed, 0x0e7151a))
	w := &workload{modes: map[string]delivery.Mode{}}
	w.replay = source.ReplayExact
	if rng.IntN(2) == 0 {
		w.replay = source.ReplaySuperset
	}
	w.supersetMax = 1 + rng.IntN(5)
	w.resumeEvery = 1 + rng.IntN(4)
	w.class = []sink.Class{sink.StageAndApply, sink.Transactional, sink.DeliverAck}[rng.IntN(3)]
	w.caps = sink.Capabilities{Merge: rng.IntN(3) > 0, SkipByID: rng.IntN(2) == 0}
	w.canDropStaged = true
	if decl != nil {
		w.class, w.caps, w.canDropStaged = decl.class, decl.caps, decl.canDrop
	}
	names := []string{"orders", "users", "events"}
	for i := range 1 + rng.IntN(3) {
		s := sourcetest.FakeStream{Name: names[i], Splits: 1 + rng.IntN(3), Rows: rng.IntN(opts.MaxRows + 1)}
		s.Unkeyed = rng.IntN(5) == 0
		s.CDC = !s.Unkeyed && rng.IntN(2) == 0
		if rng.IntN(4) == 0 {
			s.BadEvery = 3 + rng.IntN(5)
		}
		w.streams = append(w.streams, s)
		if !s.Unkeyed && w.caps.Merge && rng.IntN(2) == 0 {
			w.modes[s.Name] = delivery.Merge
		}
	}
	// Require a level every stream can meet (the strongest more often).
	var ok []delivery.Level
	for _, l := range []delivery.Level{delivery.AtLeastOnce, delivery.EffectivelyOnce, delivery.ExactlyOnce} {
		if _, err := delivery.Check(w.deliveryStreams(), l); err == nil {
			ok = append(ok, l)
		}
	}
	w.required = delivery.AtLeastOnce
	if len(ok) > 0 {
		w.required = ok[len(ok)-1]
		if rng.IntN(3) == 0 {
			w.required = ok[rng.IntN(len(ok))]
		}
	}
	w.lanes = 1 + rng.IntN(3)
	w.batchRows = 1 + rng.IntN(32)
	// Not drawn, so that a seed keeps the workload it had before.
	w.engineWorkers = 1 + w.batchRows%3
	w.epochInterval = time.Duration(1+rng.IntN(10)) * time.Millisecond
	w.epochBytes = 1 << 30
	if rng.IntN(3) > 0 {
		w.epochBytes = int64(50 + rng.IntN(500))
	}
	w.commitRetries = 1 + rng.IntN(3)

	n := rng.IntN(opts.MaxAttempts + 1)
	for range n {
		w.attempts = append(w.attempts, newAttemptPlan(rng, w, n))
	}
	if decl != nil {
		// Drawn from a stream of its own, so that the fake's plans stay
		// what they were. A zombie let go while the next attempt
		// recovers races it from outside the destination, which is the
		// closest a wrapper gets to the fake's pause inside Commit.
		rng2 := rand.New(rand.NewPCG(seed, 0x2e1ea5e))
		for i := range w.attempts {
			w.attempts[i].earlyRelease = rng2.IntN(2) == 0
			// A fault at Finish, the end of a Sync: what a destination
			// holding data back across epochs makes visible there.
			if rng2.IntN(4) == 0 {
				act := []action{crashBefore, crashAfter, errBefore, errAfter, stall}[rng2.IntN(5)]
				w.attempts[i].faults = append(w.attempts[i].faults, fault{at: pDstFinish, nth: 1, act: act, times: 1, reason: "fault at Finish"})
			}
			// Recover failing, or raising the fence and losing its
			// response (the fake's plans have only crashes there).
			if rng2.IntN(8) == 0 {
				act := []action{errBefore, errAfter}[rng2.IntN(2)]
				w.attempts[i].faults = append(w.attempts[i].faults, fault{at: pDstRecover, nth: 1, act: act, times: 1, reason: "Recover error"})
			}
		}
		// The two faults a Target's own code is likeliest to get wrong,
		// drawn often (from a third stream, so the draws above stay): a
		// Commit that lands but loses its response, which the runner
		// retries (a Commit that is not idempotent applies the epoch
		// twice), and a zombie paused before a Commit while the next
		// attempt recovers (a Commit that ignores the fence returns nil
		// or applies stale data). A user runs tens of seeds, not
		// thousands: 50 must find either bug nearly always.
		rng3 := rand.New(rand.NewPCG(seed, 0x3c0ffee))
		for i := range w.attempts {
			if rng3.IntN(8) > 0 {
				w.attempts[i].faults = append(w.attempts[i].faults,
					fault{at: pDstCommit, nth: 1 + rng3.IntN(4)/3, act: errAfter, times: 1, reason: "Commit lands, its response is lost"})
			}
			if i+1 < len(w.attempts) && rng3.IntN(3) == 0 {
				w.attempts[i].faults = append(w.attempts[i].faults,
					fault{at: pDstCommit, nth: 1 + rng3.IntN(2), act: stall, reason: "zombie: paused before Commit while a newer attempt runs"})
			}
		}
	}
	// A stream of its own too: the plans stay what they were.
	rng3 := rand.New(rand.NewPCG(seed, 0x1057570e))
	w.loseStore = rng3.IntN(3) == 0
	w.lostPastFence = rng3.IntN(2) == 0
	if opts.Transforms {
		// And one more: with or without transforms a seed draws the same
		// workload and faults otherwise. Half the streams get the filter.
		rng4 := rand.New(rand.NewPCG(seed, 0x7a4f0f11))
		w.transforms, w.flakyFilter = map[string]transformKind{}, opts.flakyFilter
		for _, s := range w.streams {
			if k := []transformKind{tfNone, tfIdentity, tfFilter, tfFilter, tfRowFilter}[rng4.IntN(5)]; k != tfNone {
				w.transforms[s.Name] = k
			}
		}
	}
	if opts.Routes && decl == nil {
		w.drawRoutes(seed)
	}
	return w
}

func newAttemptPlan(rng *rand.Rand, w *workload, attempts int) attemptPlan {
	p := attemptPlan{}
	if rng.IntN(3) == 0 {
		p.run = true
		p.runFor = time.Duration(2+rng.IntN(40)) * time.Millisecond
	}
	p.dropStaged = w.class != sink.DeliverAck && rng.IntN(8) == 0 && w.canDropStaged
	nf := 1 + rng.IntN(2)
	if rng.IntN(8) == 0 {
		nf = 0 // a fault-free attempt among faulty ones
	}
	for range nf {
		p.faults = append(p.faults, newFault(rng, w, attempts))
	}
	return p
}

func newFault(rng *rand.Rand, w *workload, attempts int) fault {
	epochCall := func() int { return 1 + rng.IntN(3) }
	// Records an attempt reads: the source's log grows by about this much
	// before each.
	rows := 1
	for _, s := range w.streams {
		rows += s.Rows * s.Splits
	}
	rows = rows/(attempts+1) + 1
	switch rng.IntN(22) {
	case 0:
		return fault{at: pDstPreCommit, nth: epochCall(), act: crashBefore, reason: "crash before PreCommit"}
	case 1:
		return fault{at: pDstPreCommit, nth: epochCall(), act: crashAfter, reason: "crash after PreCommit"}
	case 2:
		return fault{at: pStoreCommit, nth: epochCall(), act: crashAfter, reason: "crash after the HEAD write, before Commit"}
	case 3:
		return fault{at: pDstCommit, nth: epochCall(), act: []action{crashBefore, crashAfter}[rng.IntN(2)], reason: "crash during Commit"}
	case 4:
		return fault{at: pDstRecover, nth: 1, act: []action{crashBefore, crashAfter}[rng.IntN(2)], reason: "crash during Recover"}
	case 5:
		return fault{at: pDstCommit, nth: epochCall(), act: errBefore, times: 1 + rng.IntN(w.commitRetries+2), reason: "Commit errors"}
	case 6:
		return fault{at: pDstCommit, nth: epochCall(), act: errAfter, reason: "Commit applied, response lost"}
	case 7, 8:
		at := []point{pStoreClaim, pStoreCommit, pStoreWriteFile, pStoreReadFile, pStoreGet, pStoreRewind}[rng.IntN(6)]
		act := []action{errBefore, errAfter}[rng.IntN(2)]
		return fault{at: at, nth: 1 + rng.IntN(2), act: act, times: 1, reason: "checkpoint store error"}
	case 9, 10:
		at := point(rng.IntN(int(numPoints)))
		return fault{at: at, nth: 1 + rng.IntN(4), act: slow, delay: time.Duration(1+rng.IntN(15)) * time.Millisecond, reason: "slow call"}
	case 20, 21:
		// A zombie paused inside Commit while a newer attempt recovers
		// the same epoch: what the destination's fence is for.
		return fault{at: pDstCommit, nth: epochCall(), act: stall, reason: "zombie: paused inside Commit while a newer attempt runs"}
	case 11, 12, 13:
		at := []point{pDstCommit, pStoreCommit, pSrcRead, pDstPreCommit, pDstWrite, pDstRecover}[rng.IntN(6)]
		nth := epochCall()
		if at == pSrcRead || at == pDstWrite {
			nth = 1 + rng.IntN(rows)
		}
		if at == pDstRecover {
			nth = 1
		}
		return fault{at: at, nth: nth, act: stall, reason: "zombie: the attempt pauses while a newer one runs"}
	case 14, 15:
		return fault{at: pSrcRead, nth: 1 + rng.IntN(rows), act: errBefore, times: 1, reason: "source disconnect"}
	case 16:
		return fault{at: pSrcRead, nth: 1 + rng.IntN(rows), act: crashBefore, reason: "crash while reading"}
	case 17:
		return fault{at: pDstWrite, nth: 1 + rng.IntN(rows), act: errBefore, times: 1, reason: "destination write error"}
	case 18:
		at := []point{pSrcDiscover, pSrcOpen, pSrcAck, pDstClose}[rng.IntN(4)]
		return fault{at: at, nth: 1, act: errBefore, times: 1, reason: "call error"}
	default:
		return fault{at: pStoreCommit, nth: epochCall(), act: crashBefore, reason: "crash before the HEAD write"}
	}
}
