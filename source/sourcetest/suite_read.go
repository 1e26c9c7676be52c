package sourcetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/source"
)

// Errors the suite's Emitter returns to Read, which Read must return.
var (
	// errLimit stops a read at a resume point once it has emitted
	// Options.MaxRecords records.
	errLimit = errors.New("sourcetest: record limit reached, stopping the read at this resume point")
	// errNoResumePoint stops a read that went on far past the limit
	// without a resume point.
	errNoResumePoint = errors.New("sourcetest: no resume point within 10×MaxRecords records after the limit")
	// errFault is the fault the EmitterError check injects; it wraps
	// source.ErrStopping, as the runner's Emitter errors do.
	errFault = fmt.Errorf("sourcetest: injected emitter fault: %w", source.ErrStopping)
)

// event is one Emitter call: a record, or a resume point when rp is true.
type event struct {
	rp      bool
	stream  string
	op      source.Op
	seq     int64
	key     []byte
	payload []byte
	state   []byte
}

func (e event) identity() string {
	return fmt.Sprintf("%q %d %d %q %q", e.stream, e.op, e.seq, e.key, e.payload)
}

// Which Emitter calls a fault counts.
const (
	onAny = iota
	onRecord
	onResume
)

// recorder is the suite's Emitter: it keeps copies of what a split emits,
// stops the read at the limit, injects faults, and notes misuse of the
// Emitter (concurrent calls, calls after an error or after Read returned).
type recorder struct {
	limit  int  // stop at the first resume point after this many records; 0: never
	slack  int  // records past limit allowed before a resume point
	keep   bool // keep the events (the Cancel check only counts)
	failOn int  // onAny, onRecord or onResume
	failAt int  // fail the failAt-th call that failOn counts; 0: never
	// cancelAt, when > 0, calls cancel when the cancelAt-th record arrives.
	cancelAt int
	cancel   func()

	events   []event
	nrec     int
	calls    int
	stopErr  error     // the error returned once; later calls get it again
	faultAt  time.Time // when the injected fault was returned
	inCall   atomic.Int32
	returned atomic.Bool

	mu     sync.Mutex
	misuse []string
}

func (r *recorder) noteMisuse(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(r.misuse, msg) {
		r.misuse = append(r.misuse, msg)
	}
}

func (r *recorder) misuses() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.misuse)
}

// enter runs at the start of every call; a non-nil error ends the call.
func (r *recorder) enter(method string, resume bool) error {
	if r.returned.Load() {
		r.noteMisuse("Emitter.%s called after Read returned", method)
	}
	if r.stopErr != nil {
		r.noteMisuse("Emitter.%s called again after an Emitter call returned an error (%v): Read must return that error", method, r.stopErr)
		return r.stopErr
	}
	if r.failAt > 0 && (r.failOn == onAny || (r.failOn == onResume) == resume) {
		r.calls++
		if r.calls == r.failAt {
			r.stopErr = errFault
			r.faultAt = time.Now()
			return errFault
		}
	}
	return nil
}

func (r *recorder) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	if r.inCall.Add(1) != 1 {
		r.noteMisuse("Emitter methods called concurrently")
	}
	defer r.inCall.Add(-1)
	if err := r.enter("Record", false); err != nil {
		return err
	}
	r.nrec++
	if r.keep {
		r.events = append(r.events, event{stream: stream, op: op, seq: seq, key: bytes.Clone(key), payload: bytes.Clone(payload)})
	}
	if r.cancelAt > 0 && r.nrec == r.cancelAt {
		r.cancel()
	}
	if r.limit > 0 && r.nrec > r.limit+r.slack {
		r.stopErr = errNoResumePoint
		return errNoResumePoint
	}
	return nil
}

func (r *recorder) ResumePoint(state []byte) error {
	if r.inCall.Add(1) != 1 {
		r.noteMisuse("Emitter methods called concurrently")
	}
	defer r.inCall.Add(-1)
	if err := r.enter("ResumePoint", true); err != nil {
		return err
	}
	if r.keep {
		r.events = append(r.events, event{rp: true, state: bytes.Clone(state)})
	}
	if r.limit > 0 && r.nrec >= r.limit {
		r.stopErr = errLimit
		return errLimit
	}
	return nil
}

// Report implements source.Reporter, as the runner's Emitter does: a
// notice must have a known kind and say what happened.
func (r *recorder) Report(n source.Notice) {
	if r.inCall.Add(1) != 1 {
		r.noteMisuse("Emitter methods called concurrently")
	}
	defer r.inCall.Add(-1)
	if r.returned.Load() {
		r.noteMisuse("Emitter.Report called after Read returned")
	}
	switch {
	case n.Kind != source.NoticeReset && n.Kind != source.NoticeSchemaChanged:
		r.noteMisuse("Report: notice kind %q is not source.NoticeReset or source.NoticeSchemaChanged", n.Kind)
	case n.Detail == "":
		r.noteMisuse("Report: a %s notice without a Detail", n.Kind)
	}
}

// trace is the outcome of one Read.
type trace struct {
	id       source.SplitID
	rec      *recorder
	events   []event
	err      error
	took     time.Duration // from Read's start to its return
	timedOut bool          // did not return within Timeout; returned once cancelled
	hung     bool          // did not return even after cancelling
}

func (tr *trace) truncated() bool { return errors.Is(tr.err, errLimit) }

func (tr *trace) records() []event {
	var out []event
	for _, e := range tr.events {
		if !e.rp {
			out = append(out, e)
		}
	}
	return out
}

// resumePoints returns the indexes in events of the resume points.
func (tr *trace) resumePoints() []int {
	var out []int
	for i, e := range tr.events {
		if e.rp {
			out = append(out, i)
		}
	}
	return out
}

// readSplits reads every split at once, as the runner does, each with the
// recorder mk returns, and waits for all of them.
func (s *suite) readSplits(splits []source.Split, bounded bool, mk func() *recorder) []*trace {
	out := make([]*trace, len(splits))
	var wg sync.WaitGroup
	for i, sp := range splits {
		tr := &trace{id: sp.ID(), rec: mk()}
		out[i] = tr
		wg.Go(func() { s.readOne(tr, sp, bounded) })
	}
	wg.Wait()
	return out
}

func (s *suite) readOne(tr *trace, sp source.Split, bounded bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		err := sp.Read(ctx, tr.rec, bounded)
		tr.rec.returned.Store(true)
		done <- err
	}()
	timer := time.NewTimer(s.opts.Timeout)
	defer timer.Stop()
	select {
	case tr.err = <-done:
	case <-timer.C:
		tr.timedOut = true
		cancel()
		select {
		case tr.err = <-done:
		case <-time.After(s.opts.CancelTimeout):
			tr.hung = true
			return // the recorder is still in use: leave it alone
		}
	}
	tr.took = time.Since(start)
	tr.events = tr.rec.events
}

// newRecorder returns a recorder that stops at limit records.
func (s *suite) newRecorder(limit int) *recorder {
	return &recorder{limit: limit, slack: 10 * s.opts.MaxRecords, keep: true}
}

// readAll opens streams with resume and reads every split, bounded, up to
// limit records each. It fails the test unless every Read returned nil or
// stopped at the limit.
func (s *suite) readAll(src source.Source, streams []string, resume map[source.SplitID][]byte, limit int) map[source.SplitID]*trace {
	s.t.Helper()
	traces := s.readSplits(s.open(src, streams, resume), true, func() *recorder { return s.newRecorder(limit) })
	out := make(map[source.SplitID]*trace)
	for _, tr := range traces {
		switch {
		case tr.hung:
			s.t.Fatalf("split %q: bounded Read did not return within %v, nor %v after its context was cancelled", tr.id, s.opts.Timeout, s.opts.CancelTimeout)
		case tr.timedOut:
			s.t.Fatalf("split %q: bounded Read did not return within %v (Options.Timeout)", tr.id, s.opts.Timeout)
		case tr.err != nil && !tr.truncated():
			s.t.Fatalf("split %q: bounded Read: %v", tr.id, tr.err)
		}
		out[tr.id] = tr
	}
	return out
}

func sortedIDs[V any](m map[source.SplitID]V) []source.SplitID {
	ids := make([]source.SplitID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *suite) checkRead() {
	t := s.t
	src, cat, streams := s.fresh()
	selected := make(map[string]source.Stream)
	for _, name := range streams {
		selected[name], _ = cat.Stream(name)
	}
	traces := s.readSplits(s.open(src, streams, nil), true, func() *recorder { return s.newRecorder(s.opts.MaxRecords) })
	total := 0
	for _, tr := range traces {
		id := tr.id
		switch {
		case tr.hung:
			t.Errorf("split %q: bounded Read did not return within %v, nor %v after its context was cancelled", id, s.opts.Timeout, s.opts.CancelTimeout)
			continue
		case tr.timedOut:
			t.Errorf("split %q: bounded Read did not return within %v (Options.Timeout); it returned %v once cancelled", id, s.opts.Timeout, tr.err)
		case errors.Is(tr.err, errNoResumePoint):
			t.Errorf("split %q: emitted %d records past Options.MaxRecords (%d) without a resume point", id, 10*s.opts.MaxRecords, s.opts.MaxRecords)
		case tr.err == nil:
			if len(tr.events) == 0 || !tr.events[len(tr.events)-1].rp {
				t.Errorf("split %q: bounded Read returned nil without a resume point after its last record", id)
			}
		case !tr.truncated():
			t.Errorf("split %q: bounded Read: %v", id, tr.err)
		}
		for _, m := range tr.rec.misuses() {
			t.Errorf("split %q: %s", id, m)
		}
		lastSeq := make(map[string]int64)
		bad := 0
		report := func(format string, args ...any) {
			if bad++; bad <= 5 {
				t.Errorf("split %q: "+format, append([]any{id}, args...)...)
			}
		}
		n := 0
		for _, e := range tr.events {
			if e.rp {
				continue
			}
			n++
			st, ok := selected[e.stream]
			if !ok {
				report("record %d is of stream %q, which was not opened (opened: %q)", n, e.stream, streams)
				continue
			}
			if !e.op.Valid() {
				report("record %d (%v) has an undefined op", n, e)
			} else if !st.CDC && e.op != source.OpInsert {
				report("record %d (%v) is an %v in stream %q, which the catalog says is not CDC", n, e, e.op, e.stream)
			}
			if len(st.PrimaryKey) > 0 {
				if len(e.key) == 0 {
					report("record %d (%v) has an empty key in keyed stream %q", n, e, e.stream)
					continue
				}
				k := e.stream + "\x00" + string(e.key)
				if prev, ok := lastSeq[k]; ok && e.seq < prev {
					report("record %d (%v): seq %d is lower than the key's previous seq %d", n, e, e.seq, prev)
				}
				lastSeq[k] = e.seq
			}
		}
		if bad > 5 {
			t.Errorf("split %q: ... and %d more violations", id, bad-5)
		}
		total += n
	}
	if total == 0 && !t.Failed() {
		t.Error("no split emitted a record: give the source some data, or the suite checks nothing")
	}
}

// sample picks up to n of rps: the first, the last, and evenly spaced.
func sample(rps []int, n int) []int {
	if len(rps) <= n {
		return rps
	}
	if n < 2 {
		return rps[:1]
	}
	out := make([]int, 0, n)
	for i := range n {
		out = append(out, rps[i*(len(rps)-1)/(n-1)])
	}
	return slices.Compact(out)
}

func (s *suite) checkResume() {
	t := s.t
	src, _, streams := s.fresh()
	replay := src.Replay()
	if replay == source.ReplayNone {
		t.Skip("the source's replay class is none: nothing to check")
	}
	traces := s.readAll(src, streams, nil, s.opts.MaxRecords)
	// The other splits' states in a reopen: the last each recorded, a
	// checkpoint in which they got as far as they did. A source whose
	// splits share work (one split reads what another, with no state,
	// left undone) hands none over between splits that all have states.
	last := map[source.SplitID][]byte{}
	for id, tr := range traces {
		if rps := tr.resumePoints(); len(rps) > 0 {
			last[id] = tr.events[rps[len(rps)-1]].state
		}
	}
	for _, id := range sortedIDs(traces) {
		tr := traces[id]
		all := tr.records()
		for _, i := range sample(tr.resumePoints(), s.opts.ResumeSamples) {
			pos := 0 // records before the resume point
			for _, e := range tr.events[:i] {
				if !e.rp {
					pos++
				}
			}
			state := tr.events[i].state
			t.Run(fmt.Sprintf("%s@%d", id, pos), func(t *testing.T) {
				sub := &suite{t: t, newSource: s.newSource, opts: s.opts}
				sub.reopen(replay, tr, state, last, all[:pos], all[pos:])
			})
		}
	}
}

// reopen opens a new source from state (and the other splits' states
// in others) and compares what the split emits with suffix, the records
// the first read emitted after state.
func (s *suite) reopen(replay source.Replay, tr *trace, state []byte, others map[source.SplitID][]byte, prefix, suffix []event) {
	t := s.t
	src, _, streams := s.fresh()
	resume := map[source.SplitID][]byte{}
	for id, b := range others {
		resume[id] = bytes.Clone(b)
	}
	resume[tr.id] = bytes.Clone(state)
	splits := s.open(src, streams, resume)
	for _, st := range resume {
		for i := range st {
			st[i] ^= 0xa5 // Open's doc: states are only valid during the call
		}
	}
	var sp source.Split
	for _, x := range splits {
		if x.ID() == tr.id {
			sp = x
		}
	}
	if sp == nil {
		t.Fatalf("Open with a resume state for split %q returned no split of that ID (got %q)", tr.id, splitIDs(splits))
	}
	limit := s.opts.MaxRecords
	switch {
	case replay == source.ReplaySuperset:
		limit = len(prefix) + len(suffix) + s.opts.MaxRecords
	case tr.truncated():
		limit = max(1, len(suffix))
	}
	re := &trace{id: tr.id, rec: s.newRecorder(limit)}
	s.readOne(re, sp, true)
	switch {
	case re.hung || re.timedOut:
		t.Fatalf("reopened bounded Read did not return within %v", s.opts.Timeout)
	case re.err != nil && !re.truncated():
		t.Fatalf("reopened bounded Read: %v", re.err)
	}
	got := re.records()
	at := fmt.Sprintf("reopened from the resume point after record %d of split %q (state %q)", len(prefix), tr.id, short(state))
	if replay == source.ReplaySuperset {
		have := make(map[string]int)
		for _, e := range got {
			have[e.identity()]++
		}
		missing := 0
		for i, e := range suffix {
			if have[e.identity()] > 0 {
				have[e.identity()]--
				continue
			}
			if missing++; missing == 1 {
				t.Errorf("%s: ReplaySuperset, but record %d of the first read (%v) is not replayed", at, len(prefix)+i+1, e)
			}
		}
		if missing > 1 {
			t.Errorf("%s: %d of the %d records after it are missing", at, missing, len(suffix))
		}
		return
	}
	for i := range min(len(got), len(suffix)) {
		if got[i].identity() != suffix[i].identity() {
			t.Fatalf("%s: ReplayExact, but the reopened split's record %d is\n\t%v\nwant record %d of the first read:\n\t%v", at, i+1, got[i], len(prefix)+i+1, suffix[i])
		}
	}
	if len(got) < len(suffix) {
		t.Fatalf("%s: the reopened split emitted %d records, want the %d after it", at, len(got), len(suffix))
	}
	if !tr.truncated() && !s.opts.Live && len(got) > len(suffix) {
		t.Fatalf("%s: the reopened split emitted %d records past the end of the first read, the first being %v (set Options.Live if the source's data grows)", at, len(got)-len(suffix), got[len(suffix)])
	}
}

func (s *suite) checkCancel() {
	s.t.Run("Unbounded", func(t *testing.T) {
		sub := &suite{t: t, newSource: s.newSource, opts: s.opts}
		src, _, streams := sub.fresh()
		splits := sub.open(src, streams, nil)
		var wg sync.WaitGroup
		for _, sp := range splits {
			wg.Go(func() { sub.cancelOne(sp, false) })
		}
		wg.Wait()
	})
	s.t.Run("Before", func(t *testing.T) {
		sub := &suite{t: t, newSource: s.newSource, opts: s.opts}
		src, _, streams := sub.fresh()
		splits := sub.open(src, streams, nil)
		var wg sync.WaitGroup
		for _, sp := range splits {
			wg.Go(func() { sub.cancelOne(sp, true) })
		}
		wg.Wait()
	})
}

// cancelOne reads sp unbounded and cancels the read: before it starts
// (before), or once it has emitted MaxRecords/2 records or run 100ms.
func (s *suite) cancelOne(sp source.Split, before bool) {
	t := s.t
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	var cancelled time.Time
	doCancel := func() { once.Do(func() { cancelled = time.Now(); cancel() }) }
	rec := &recorder{cancelAt: max(1, s.opts.MaxRecords/2), cancel: doCancel}
	if before {
		doCancel()
	} else {
		stop := time.AfterFunc(100*time.Millisecond, doCancel)
		defer stop.Stop()
	}
	done := make(chan error, 1)
	go func() {
		err := sp.Read(ctx, rec, false)
		rec.returned.Store(true)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(100*time.Millisecond + s.opts.CancelTimeout):
		t.Errorf("split %q: unbounded Read did not return within %v of its context being cancelled", sp.ID(), s.opts.CancelTimeout)
		return
	}
	if ctx.Err() == nil {
		t.Errorf("split %q: unbounded Read returned %v before its context was cancelled (it emitted %d records)", sp.ID(), err, rec.nrec)
		return
	}
	once.Do(func() {}) // synchronizes with the Do that set cancelled
	if took := time.Since(cancelled); took > s.opts.CancelTimeout {
		t.Errorf("split %q: Read returned %v after its context was cancelled, more than Options.CancelTimeout (%v)", sp.ID(), took, s.opts.CancelTimeout)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("split %q: Read returned %v after its context was cancelled, want an error wrapping context.Canceled (ctx.Err())", sp.ID(), err)
	}
	for _, m := range rec.misuses() {
		t.Errorf("split %q: %s", sp.ID(), m)
	}
}

func (s *suite) checkEmitterError() {
	cases := []struct {
		name   string
		failOn int
		failAt int
	}{
		{"FirstCall", onAny, 1},
		{"SecondCall", onAny, 2},
		{"Call3", onAny, 3},
		{"Call8", onAny, 8},
		{"Call33", onAny, 33},
		{"FirstRecord", onRecord, 1},
		{"Record5", onRecord, 5},
		{"FirstResumePoint", onResume, 1},
		{"ResumePoint3", onResume, 3},
	}
	for _, c := range cases {
		s.t.Run(c.name, func(t *testing.T) {
			sub := &suite{t: t, newSource: s.newSource, opts: s.opts}
			src, _, streams := sub.fresh()
			traces := sub.readSplits(sub.open(src, streams, nil), true, func() *recorder {
				r := sub.newRecorder(s.opts.MaxRecords)
				r.keep = false
				r.failOn, r.failAt = c.failOn, c.failAt
				return r
			})
			faulted := 0
			for _, tr := range traces {
				if tr.hung {
					t.Errorf("split %q: Read did not return after the Emitter failed, nor once its context was cancelled", tr.id)
					continue
				}
				if tr.rec.faultAt.IsZero() {
					continue // the split ended before the fault
				}
				faulted++
				if !errors.Is(tr.err, errFault) {
					t.Errorf("split %q: the Emitter failed with %q, but Read returned %v: it must return the Emitter's error", tr.id, errFault, tr.err)
				}
				if tr.timedOut {
					t.Errorf("split %q: Read did not return within %v after the Emitter failed", tr.id, s.opts.Timeout)
				}
				for _, m := range tr.rec.misuses() {
					t.Errorf("split %q: %s", tr.id, m)
				}
			}
			if faulted == 0 {
				t.Skipf("no split made %d Emitter calls of the kind this case fails", c.failAt)
			}
		})
	}
}

func (s *suite) checkCorruptState() {
	t := s.t
	if s.opts.IgnoresResumeState {
		t.Skip("Options.IgnoresResumeState: the source ignores resume states")
	}
	src, _, streams := s.fresh()
	traces := s.readAll(src, streams, nil, 1)
	for _, id := range sortedIDs(traces) {
		tr := traces[id]
		rps := tr.resumePoints()
		if len(rps) == 0 {
			continue
		}
		real := tr.events[rps[len(rps)-1]].state
		bad := s.opts.CorruptStates
		if len(bad) == 0 {
			bad = [][]byte{
				{0xff},
				[]byte("\x00\xff sourcetest: this is not a resume state \xfe"),
				append(bytes.Clone(real), "\x00\xff sourcetest garbage"...),
			}
		}
		for _, st := range bad {
			s.corruptOne(id, streams, st)
		}
	}
}

// corruptOne opens split id from state st, which is not one the split
// produced: Open must fail, or Read fail before emitting a record.
func (s *suite) corruptOne(id source.SplitID, streams []string, st []byte) {
	t := s.t
	src := s.newSource(t)
	splits, err := src.Open(s.ctx(), streams, map[source.SplitID][]byte{id: bytes.Clone(st)})
	if err != nil {
		return
	}
	for _, sp := range splits {
		if sp.ID() != id {
			continue
		}
		tr := &trace{id: id, rec: s.newRecorder(1)}
		s.readOne(tr, sp, true)
		if tr.hung || tr.timedOut {
			t.Errorf("split %q opened from corrupt state %q: Read did not return within %v", id, short(st), s.opts.Timeout)
			return
		}
		n := len(tr.records())
		if tr.err != nil && !tr.truncated() && n == 0 {
			return // rejected by Read
		}
		t.Errorf("split %q: Open accepted the corrupt resume state %q, and Read emitted %d records then returned %v; want an error from Open (or from Read before any record)", id, short(st), n, tr.err)
		return
	}
	t.Errorf("Open accepted the corrupt resume state %q for split %q, and returned no split of that ID", short(st), id)
}
