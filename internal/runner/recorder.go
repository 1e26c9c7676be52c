package runner

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// The bounds of a Recorder: it never holds more than this.
const (
	// RecentEvents is how many of the latest events a Recorder keeps.
	RecentEvents = 50
	// LagSamples is how many lag samples a Recorder keeps, at most one a
	// second (the runner polls its splits about once a second): five
	// minutes of history.
	LagSamples = 300
	// LagSplits is how many splits a lag sample holds, the first ones in
	// the order Open returned them that report a lag.
	LagSplits = 16
	// lagResolution is the least time between two samples; a poll sooner
	// (polls also run at each commit) replaces the last one.
	lagResolution = time.Second
)

// Recorder keeps what a status page shows beside a Status: the latest
// events, lag samples of the last minutes and the quarantine reasons of
// committed epochs. A Monitor has none until Watch is called, so a host
// that shows no page pays nothing; with one, the runner adds to it per
// event, per poll and per batch that quarantined records, never per
// record read. A Recorder is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	events  []Event // a ring of up to RecentEvents
	evNext  int
	samples []LagSample // a ring of up to LagSamples
	smNext  int
	// pending counts the reasons of epochs not committed yet, by epoch;
	// reasons those of committed epochs since Watch.
	pending map[uint64]map[ReasonKey]int64
	reasons map[ReasonKey]int64
}

// ReasonKey is a stream and a quarantine reason.
type ReasonKey struct{ Stream, Reason string }

// ReasonCount is how many records of Stream committed epochs set aside
// for Reason.
type ReasonCount struct {
	Stream, Reason string
	Rows           int64
}

// LagSample is a poll's lag of each split that reported one; a poll
// where none did leaves no sample.
type LagSample struct {
	Time   time.Time
	Splits []SplitLag
}

// SplitLag is one split's lag in a LagSample (see source.LagReporter):
// Age is negative when the source can't tell.
type SplitLag struct {
	ID     string
	Behind int64
	Unit   string
	Age    time.Duration
}

// Watch returns the Monitor's Recorder, making it on the first call.
func (m *Monitor) Watch() *Recorder {
	if r := m.rec.Load(); r != nil {
		return r
	}
	m.rec.CompareAndSwap(nil, &Recorder{pending: map[uint64]map[ReasonKey]int64{}, reasons: map[ReasonKey]int64{}})
	return m.rec.Load()
}

// Recent returns the kept events, oldest first, the lag samples, oldest
// first, and the quarantine reasons of committed epochs by stream and
// reason. All of it belongs to the caller.
func (r *Recorder) Recent() (events []Event, lag []LagSample, reasons []ReasonCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	events = append(slices.Clone(r.events[r.evNext:]), r.events[:r.evNext]...)
	lag = append(slices.Clone(r.samples[r.smNext:]), r.samples[:r.smNext]...)
	for k, n := range r.reasons {
		reasons = append(reasons, ReasonCount{Stream: k.Stream, Reason: k.Reason, Rows: n})
	}
	slices.SortFunc(reasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(b.Rows, a.Rows), cmp.Compare(a.Reason, b.Reason))
	})
	return events, lag, reasons
}

// The methods the runner calls take a nil Recorder (none watches) and
// then do nothing.

func (r *Recorder) event(e Event) {
	if r == nil || e.Kind == EventEpochCommitted {
		return // every epoch: Status has the last one
	}
	e.Streams = nil // the host's callback owns the map
	r.mu.Lock()
	if len(r.events) < RecentEvents {
		r.events = append(r.events, e)
	} else {
		r.events[r.evNext] = e
		r.evNext = (r.evNext + 1) % RecentEvents
	}
	r.mu.Unlock()
}

func (r *Recorder) sample(now time.Time, ss []SplitStatus) {
	if r == nil {
		return
	}
	s := LagSample{Time: now}
	for _, sp := range ss {
		if sp.LagKnown && len(s.Splits) < LagSplits {
			s.Splits = append(s.Splits, SplitLag{ID: sp.ID, Behind: sp.Behind, Unit: sp.Unit, Age: sp.Age})
		}
	}
	if len(s.Splits) == 0 {
		return // no split reports a lag: nothing to chart
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.samples)
	if n > 0 {
		last := (r.smNext + n - 1) % n
		if now.Sub(r.samples[last].Time) < lagResolution {
			r.samples[last].Splits = s.Splits
			return
		}
	}
	if n < LagSamples {
		r.samples = append(r.samples, s)
	} else {
		r.samples[r.smNext] = s
		r.smNext = (r.smNext + 1) % LagSamples
	}
}

// quarantined counts n records of stream set aside in epoch (not yet
// committed) for reason(i).
func (r *Recorder) quarantined(epoch uint64, stream string, n int, reason func(int) string) {
	if r == nil || n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[epoch]
	if p == nil {
		p = map[ReasonKey]int64{}
		r.pending[epoch] = p
	}
	for i := range n {
		p[ReasonKey{stream, reason(i)}]++
	}
}

// committed moves the reasons of epoch, and of any earlier epoch still
// pending, to the committed ones.
func (r *Recorder) committed(epoch uint64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for e, p := range r.pending {
		if e <= epoch {
			for k, n := range p {
				r.reasons[k] += n
			}
			delete(r.pending, e)
		}
	}
}

// begin drops what an earlier attempt counted and never committed.
func (r *Recorder) begin() {
	if r == nil {
		return
	}
	r.mu.Lock()
	clear(r.pending)
	r.mu.Unlock()
}
