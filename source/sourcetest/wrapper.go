package sourcetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/openetl/etl/source"
)

// CheckWrapper checks that wrap, a function that wraps a source (a
// middleware, a test kit's hold or fault injector), forwards every
// optional capability of the source contract, as the package source doc
// asks of wrappers. It wraps two sources of its own, one of which
// implements every capability and one none, opens each wrapped source
// with no resume states and checks, each in a subtest:
//
//   - Full: the wrapped source is a source.Acker, a source.Closer, a
//     source.Classifier, a source.Resnapshotter and a source.Sharder
//     whose Ack, Close, Permanent, Resnapshot and Shard reach the source
//     (Ack with the same states, Resnapshot with the same stream, Shard
//     with the same index and count, returning a source that opens);
//     every
//     split it opens is a source.LagReporter, source.SnapshotReporter and
//     source.PauseReporter returning the wrapped split's values; its Read
//     passes the wrapped split's notice on to an Emitter that is a
//     source.Reporter, along with its record and resume point.
//   - Bare: whatever the wrapped source and its splits implement says
//     "not known" (ok false from Lag, SnapshotProgress and Paused; nil
//     from Ack and Close, false from Permanent, an error wrapping
//     errors.ErrUnsupported from Resnapshot, one wrapping
//     source.ErrUnshardable from Shard), and a Read through an Emitter that is not a
//     source.Reporter works.
//
// wrap may wrap only some splits (the probe sources have one each, with
// ID "probe#0"), but must not drop or add any.
func CheckWrapper(t *testing.T, wrap func(source.Source) source.Source) {
	t.Helper()
	t.Run("Full", func(t *testing.T) {
		p := &probeSource{full: true}
		w := wrap(fullSource{p})
		ctx := t.Context()
		states := map[source.SplitID][]byte{probeSplitID: []byte("s1")}
		if a, ok := w.(source.Acker); !ok {
			t.Errorf("the wrapped source (%T) is not a source.Acker: Ack is not forwarded", w)
		} else if err := a.Ack(ctx, states); err != nil || !maps.EqualFunc(p.acked, states, slices.Equal) {
			t.Errorf("Ack(%q) = %v, and the source got %q: want it forwarded", states, err, p.acked)
		}
		if c, ok := w.(source.Closer); !ok {
			t.Errorf("the wrapped source (%T) is not a source.Closer: Close is not forwarded", w)
		} else if err := c.Close(ctx); err != nil || !p.closed {
			t.Errorf("Close = %v, source closed %v: want it forwarded", err, p.closed)
		}
		if c, ok := w.(source.Classifier); !ok {
			t.Errorf("the wrapped source (%T) is not a source.Classifier: Permanent is not forwarded", w)
		} else if !c.Permanent(errProbePermanent) || c.Permanent(errors.New("connection reset")) {
			t.Errorf("Permanent: want the wrapped source's answer (true for its permanent error, false for another)")
		}
		if r, ok := w.(source.Resnapshotter); !ok {
			t.Errorf("the wrapped source (%T) is not a source.Resnapshotter: Resnapshot is not forwarded", w)
		} else if err := r.Resnapshot(ctx, probeStream); err != nil || p.resnapshot != probeStream {
			t.Errorf("Resnapshot(%q) = %v, and the source got %q: want it forwarded", probeStream, err, p.resnapshot)
		}
		if sh, ok := w.(source.Sharder); !ok {
			t.Errorf("the wrapped source (%T) is not a source.Sharder: Shard is not forwarded", w)
		} else if got, err := sh.Shard(1, 3); err != nil || p.shard != [2]int{1, 3} {
			t.Errorf("Shard(1, 3) = %v, and the source got %v: want it forwarded", err, p.shard)
		} else if got == nil || openProbe(t, got) == nil {
			t.Errorf("Shard(1, 3) returned %v: want a source that opens the shard's splits", got)
		}
		sp := openProbe(t, w)
		if sp == nil {
			return
		}
		if lr, ok := sp.(source.LagReporter); !ok {
			t.Errorf("the wrapped split (%T) is not a source.LagReporter", sp)
		} else if b, u, a, ok := lr.Lag(); b != probeBehind || u != "probe" || a != time.Second || !ok {
			t.Errorf("Lag() = %d, %q, %v, %v; want the split's %d, \"probe\", 1s, true", b, u, a, ok, probeBehind)
		}
		if sr, ok := sp.(source.SnapshotReporter); !ok {
			t.Errorf("the wrapped split (%T) is not a source.SnapshotReporter", sp)
		} else if st, d, e, ok := sr.SnapshotProgress(); st != probeStream || d != 2 || e != 5 || !ok {
			t.Errorf("SnapshotProgress() = %q, %d, %d, %v; want the split's %q, 2, 5, true", st, d, e, ok, probeStream)
		}
		if pr, ok := sp.(source.PauseReporter); !ok {
			t.Errorf("the wrapped split (%T) is not a source.PauseReporter", sp)
		} else if paused, since, ok := pr.Paused(); !paused || !since.Equal(probeSince) || !ok {
			t.Errorf("Paused() = %v, %v, %v; want the split's true, %v, true", paused, since, ok, probeSince)
		}
		e := &reportingEmitter{}
		if err := sp.Read(ctx, e, true); err != nil {
			t.Fatalf("Read: %v", err)
		}
		if len(e.notices) != 1 || e.notices[0].Kind != source.NoticeReset || e.notices[0].Detail != "probe" {
			t.Errorf("the Emitter got notices %+v; want the split's one source.reset notice", e.notices)
		}
		if e.records != 1 || !slices.EqualFunc(e.states, [][]byte{[]byte("s1")}, bytes.Equal) {
			t.Errorf("the Emitter got %d records and states %q; want 1 and [s1]", e.records, e.states)
		}
	})
	t.Run("Bare", func(t *testing.T) {
		w := wrap(&probeSource{})
		ctx := t.Context()
		if a, ok := w.(source.Acker); ok {
			if err := a.Ack(ctx, map[source.SplitID][]byte{probeSplitID: []byte("s1")}); err != nil {
				t.Errorf("Ack of a source without Ack = %v, want nil", err)
			}
		}
		if c, ok := w.(source.Closer); ok {
			if err := c.Close(ctx); err != nil {
				t.Errorf("Close of a source without Close = %v, want nil", err)
			}
		}
		if c, ok := w.(source.Classifier); ok && c.Permanent(errProbePermanent) {
			t.Errorf("Permanent of a source without a Classifier = true, want false")
		}
		if r, ok := w.(source.Resnapshotter); ok {
			if err := r.Resnapshot(ctx, probeStream); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Resnapshot of a source without it = %v, want an error wrapping errors.ErrUnsupported", err)
			}
		}
		if sh, ok := w.(source.Sharder); ok {
			if _, err := sh.Shard(0, 2); !errors.Is(err, source.ErrUnshardable) {
				t.Errorf("Shard of a source without it = %v, want an error wrapping source.ErrUnshardable", err)
			}
		}
		sp := openProbe(t, w)
		if sp == nil {
			return
		}
		if lr, ok := sp.(source.LagReporter); ok {
			if _, _, _, ok := lr.Lag(); ok {
				t.Error("Lag() of a split without Lag says ok")
			}
		}
		if sr, ok := sp.(source.SnapshotReporter); ok {
			if _, _, _, ok := sr.SnapshotProgress(); ok {
				t.Error("SnapshotProgress() of a split without it says ok")
			}
		}
		if pr, ok := sp.(source.PauseReporter); ok {
			if _, _, ok := pr.Paused(); ok {
				t.Error("Paused() of a split without Paused says ok: the runner would stop judging pauses itself")
			}
		}
		e := &probeEmitter{}
		if err := sp.Read(ctx, e, true); err != nil || e.records != 1 {
			t.Errorf("Read through an Emitter that is not a Reporter: %v, %d records; want nil, 1", err, e.records)
		}
	})
}

const (
	probeSplitID = source.SplitID("probe#0")
	probeStream  = "probe"
	probeBehind  = 7
)

var probeSince = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// openProbe opens w and returns its one split, or nil after failing t.
func openProbe(t *testing.T, w source.Source) source.Split {
	t.Helper()
	splits, err := w.Open(t.Context(), []string{probeStream}, nil)
	if err != nil {
		t.Errorf("Open: %v", err)
		return nil
	}
	if len(splits) != 1 || splits[0].ID() != probeSplitID {
		ids := make([]source.SplitID, len(splits))
		for i, sp := range splits {
			ids[i] = sp.ID()
		}
		t.Errorf("Open returned splits %q; want the source's one, %q", ids, probeSplitID)
		return nil
	}
	return splits[0]
}

// probeSource is a source with one split, which implements every
// optional capability of a split when full, and none otherwise. It has
// no Ack or Close: fullSource adds them.
type probeSource struct {
	full       bool
	acked      map[source.SplitID][]byte
	closed     bool
	resnapshot string // the stream Resnapshot was asked for
	shard      [2]int // the index and count Shard was asked for
}

func (s *probeSource) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{{Name: probeStream}}}, nil
}

func (s *probeSource) Replay() source.Replay { return source.ReplayExact }

func (s *probeSource) Open(_ context.Context, streams []string, _ map[source.SplitID][]byte) ([]source.Split, error) {
	if !slices.Equal(streams, []string{probeStream}) {
		return nil, fmt.Errorf("sourcetest: probe: open %q, want [%q]", streams, probeStream)
	}
	if s.full {
		return []source.Split{&fullSplit{}}, nil
	}
	return []source.Split{&bareSplit{}}, nil
}

// fullSource is a probeSource with Ack and Close.
type fullSource struct{ *probeSource }

func (s fullSource) Ack(_ context.Context, states map[source.SplitID][]byte) error {
	s.acked = maps.Clone(states)
	return nil
}

func (s fullSource) Close(context.Context) error {
	s.closed = true
	return nil
}

// errProbePermanent is the error fullSource calls permanent.
var errProbePermanent = errors.New("sourcetest: probe: credentials refused")

func (s fullSource) Permanent(err error) bool { return errors.Is(err, errProbePermanent) }

func (s fullSource) Resnapshot(_ context.Context, stream string) error {
	s.resnapshot = stream
	return nil
}

// Shard returns the probe itself (its one split is every shard's).
func (s fullSource) Shard(index, count int) (source.Source, error) {
	s.shard = [2]int{index, count}
	return s, nil
}

type bareSplit struct{}

func (bareSplit) ID() source.SplitID { return probeSplitID }

// Read reports a notice when e is a Reporter, emits one record and a
// resume point.
func (bareSplit) Read(_ context.Context, e source.Emitter, _ bool) error {
	if r, ok := e.(source.Reporter); ok {
		r.Report(source.Notice{Kind: source.NoticeReset, Detail: "probe"})
	}
	if err := e.Record(probeStream, source.OpInsert, 1, nil, []byte(`{"n":1}`)); err != nil {
		return err
	}
	return e.ResumePoint([]byte("s1"))
}

type fullSplit struct{ bareSplit }

func (*fullSplit) Lag() (int64, string, time.Duration, bool) {
	return probeBehind, "probe", time.Second, true
}

func (*fullSplit) SnapshotProgress() (string, int64, int64, bool) { return probeStream, 2, 5, true }

func (*fullSplit) Paused() (bool, time.Time, bool) { return true, probeSince, true }

// probeEmitter counts what a split emits.
type probeEmitter struct {
	records int
	states  [][]byte
}

func (e *probeEmitter) Record(string, source.Op, int64, []byte, []byte) error {
	e.records++
	return nil
}

func (e *probeEmitter) ResumePoint(st []byte) error {
	e.states = append(e.states, slices.Clone(st))
	return nil
}

// reportingEmitter is a probeEmitter that is a source.Reporter, as the
// runner's Emitter is.
type reportingEmitter struct {
	probeEmitter
	notices []source.Notice
}

func (e *reportingEmitter) Report(n source.Notice) { e.notices = append(e.notices, n) }

var (
	_ source.Acker            = fullSource{}
	_ source.Closer           = fullSource{}
	_ source.Sharder          = fullSource{}
	_ source.LagReporter      = (*fullSplit)(nil)
	_ source.SnapshotReporter = (*fullSplit)(nil)
	_ source.PauseReporter    = (*fullSplit)(nil)
	_ source.Reporter         = (*reportingEmitter)(nil)
)
