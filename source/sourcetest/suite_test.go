package sourcetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// listSource is a small source with injectable bugs: two streams ("items",
// keyed CDC; "logs", unkeyed inserts), two splits each, 40 records per
// split, state "v1:<next index>". With bug "" it is correct.
type listSource struct {
	bug    string
	replay source.Replay
	opens  atomic.Int64
}

const perSplit = 40

func (s *listSource) Discover(ctx context.Context) (source.Catalog, error) {
	items := "items"
	switch s.bug {
	case "bad-stream-name":
		items = "_items"
	case "unstable-discover":
		if s.opens.Add(1) > 1 {
			items = "items2"
		}
	}
	return source.Catalog{Streams: []source.Stream{
		{Name: items, Format: source.FormatJSON, PrimaryKey: []string{"id"}, CDC: true},
		{Name: "logs", Format: source.FormatJSON},
	}}, nil
}

func (s *listSource) Replay() source.Replay { return s.replay }

func (s *listSource) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	n := s.opens.Add(1)
	var out []source.Split
	for _, st := range streams {
		for k := range 2 {
			id := source.SplitID(fmt.Sprintf("%s-%d", st, k))
			if s.bug == "duplicate-split-ids" {
				id = source.SplitID(st)
			}
			if s.bug == "unstable-split-ids" {
				id = source.SplitID(fmt.Sprintf("%s-%d-%d", st, k, n))
			}
			sp := &listSplit{s: s, id: id, stream: st, streams: streams}
			if state, ok := resume[id]; ok {
				if s.bug == "retains-state" {
					sp.lazy = state // decoded at Read: the bytes may be gone by then
				} else {
					next, err := decode(state)
					if err != nil {
						if s.bug != "accepts-corrupt-state" {
							return nil, fmt.Errorf("split %q: %w", id, err)
						}
						next = 0
					}
					sp.next = next
				}
			}
			partner := source.SplitID(fmt.Sprintf("%s-%d", st, 1-k))
			_, own := resume[id]
			other, shared := resume[partner]
			switch s.bug {
			case "shares-work":
				// Split 1, resumed without a state of split 0's, reads
				// split 0's records too, and split 0 then emits none: a
				// source whose splits share work (Postgres hands a table's
				// snapshot to its change stream).
				if own && !shared {
					if k == 1 {
						sp.handed = true
					} else {
						sp.next = perSplit
					}
				}
			case "retains-others-state":
				if shared {
					sp.partnerState = other // decoded at Read: the bytes may be gone by then
				}
			case "resume-off-by-one":
				if sp.next > 0 {
					sp.next++
				}
			case "resume-one-back":
				if sp.next > 0 {
					sp.next--
				}
			}
			out = append(out, sp)
		}
	}
	return out, nil
}

func decode(state []byte) (int, error) {
	v, ok := strings.CutPrefix(string(state), "v1:")
	if !ok {
		return 0, errors.New("bad state")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > perSplit {
		return 0, errors.New("bad state")
	}
	return n, nil
}

func (s *listSource) Ack(ctx context.Context, states map[source.SplitID][]byte) error {
	if s.bug == "ack-rejects" {
		return errors.New("ack: unknown position")
	}
	for id, st := range states {
		if _, err := decode(st); err != nil {
			return fmt.Errorf("ack %q: %w", id, err)
		}
	}
	return nil
}

type listSplit struct {
	s       *listSource
	id      source.SplitID
	stream  string
	streams []string
	next    int
	lazy    []byte
	skip    int // with bug superset-skips: an index not to emit
	// With bug shares-work: emits its partner split's records first.
	handed bool
	// With bug retains-others-state: the partner split's resume state.
	partnerState []byte
}

func (sp *listSplit) ID() source.SplitID { return sp.id }

func (sp *listSplit) record(i int) (op source.Op, seq int64, key, payload []byte) {
	seq = int64(i + 1)
	payload = fmt.Appendf(nil, `{"id":%d,"split":%q,"i":%d}`, i%7, sp.id, i)
	if sp.stream == "logs" {
		op = source.OpInsert
		if sp.s.bug == "update-in-non-cdc" && i == 9 {
			op = source.OpUpdate
		}
		return op, seq, nil, payload
	}
	op = source.OpInsert
	if i >= 7 {
		op = source.OpUpdate
	}
	if sp.s.bug == "seq-decreases" && i == 20 {
		seq = 3
	}
	return op, seq, fmt.Appendf(nil, "%d", i%7), payload
}

func (sp *listSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if sp.lazy != nil {
		n, err := decode(sp.lazy)
		if err != nil {
			return err
		}
		sp.next, sp.lazy = n, nil
	}
	if sp.partnerState != nil {
		if _, err := decode(sp.partnerState); err != nil {
			return fmt.Errorf("the other split's state: %w", err)
		}
	}
	if sp.handed {
		partner := &listSplit{s: sp.s, id: source.SplitID(sp.stream + "-0"), stream: sp.stream}
		for i := range perSplit {
			op, seq, key, payload := partner.record(i)
			if err := e.Record(sp.stream, op, seq, key, payload); err != nil {
				return err
			}
		}
		sp.handed = false
	}
	for ; sp.next < perSplit; sp.next++ {
		if sp.s.bug != "ignores-cancel" && ctx.Err() != nil {
			return ctx.Err()
		}
		op, seq, key, payload := sp.record(sp.next)
		var err error
		if sp.skip == 0 || sp.next != sp.skip {
			err = e.Record(sp.stream, op, seq, key, payload)
		}
		if err == nil && sp.s.bug == "emits-unselected" && sp.stream != "logs" {
			err = e.Record("logs", source.OpInsert, seq, nil, payload)
		}
		if err != nil && sp.s.bug != "swallows-emitter-error" {
			return err
		}
		if sp.s.bug == "no-final-resume-point" && sp.next%10 != 0 {
			continue
		}
		if err := e.ResumePoint(fmt.Appendf(nil, "v1:%d", sp.next+1)); err != nil && sp.s.bug != "swallows-emitter-error" {
			return err
		}
	}
	if bounded {
		return nil
	}
	if sp.s.bug == "ignores-cancel" {
		time.Sleep(time.Hour)
	}
	<-ctx.Done()
	return ctx.Err()
}

func newList(bug string) func(t *testing.T) source.Source {
	return func(t *testing.T) source.Source {
		r := source.ReplayExact
		if bug == "superset-skips" {
			r = source.ReplaySuperset
		}
		return &listSource{bug: bug, replay: r}
	}
}

const envBug = "SOURCETEST_BROKEN"

// TestBrokenSource runs the suite against listSource with the bug named by
// $SOURCETEST_BROKEN; TestSuiteFails runs it in a child process.
func TestBrokenSource(t *testing.T) {
	bug, ok := os.LookupEnv(envBug)
	if !ok {
		t.Skip("run by TestSuiteFails in a child process")
	}
	newSource := newList(bug)
	if bug == "superset-skips" {
		newSource = func(t *testing.T) source.Source {
			return &supersetSkips{listSource{bug: bug, replay: source.ReplaySuperset}}
		}
	}
	sourcetest.Run(t, newSource, sourcetest.Options{CancelTimeout: 500 * time.Millisecond, Timeout: 5 * time.Second})
}

// supersetSkips claims ReplaySuperset and replays from two records before
// the state, but skips the record right after it.
type supersetSkips struct{ listSource }

func (s *supersetSkips) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.listSource.Open(ctx, streams, resume)
	for _, sp := range splits {
		if ls := sp.(*listSplit); ls.next > 0 {
			ls.skip = ls.next
			ls.next = max(0, ls.next-2)
		}
	}
	return splits, err
}

// The suite passes a correct source, and fails each broken one in the
// check that covers its bug. Each case runs the suite in a child process
// (the suite reports through a real *testing.T) and reads its verdict from
// the exit status and the -test.v output.
func TestSuiteFails(t *testing.T) {
	if _, ok := os.LookupEnv(envBug); ok {
		t.Skip("in the child process")
	}
	for _, c := range []struct {
		bug  string
		want []string // checks that must fail
	}{
		{"", nil},
		{"bad-stream-name", []string{"Discover"}},
		{"unstable-discover", []string{"Discover"}},
		{"duplicate-split-ids", []string{"Open"}},
		{"unstable-split-ids", []string{"Open"}},
		{"no-final-resume-point", []string{"Read"}},
		{"seq-decreases", []string{"Read"}},
		{"update-in-non-cdc", []string{"Read"}},
		{"emits-unselected", []string{"OpenSubset"}},
		{"resume-off-by-one", []string{"Resume"}},
		{"resume-one-back", []string{"Resume"}},
		{"retains-state", []string{"Resume"}},
		{"superset-skips", []string{"Resume"}},
		{"ignores-cancel", []string{"Cancel"}},
		{"swallows-emitter-error", []string{"EmitterError"}},
		{"accepts-corrupt-state", []string{"CorruptState"}},
		{"ack-rejects", []string{"Ack"}},
		// Correct: the suite resumes a split beside the other splits'
		// states, so no work moves between them.
		{"shares-work", nil},
		{"retains-others-state", []string{"Resume"}},
	} {
		name := c.bug
		if name == "" {
			name = "correct"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testutil.SuiteVerdict(t, "TestBrokenSource", envBug+"="+c.bug, c.want, false)
		})
	}
}
