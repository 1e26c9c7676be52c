package sinktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// memStore is the storage of memDest: what every Destination of one run
// shares, like a bucket.
type memStore struct {
	mu      sync.Mutex
	fence   map[string]checkpoint.Generation // pipeline → highest recovered
	applied map[string]uint64                // pipeline → last applied epoch
	staged  map[string][]stagedRow           // stage key → rows
	visible map[string][]sinktest.Row        // stream → rows
	nonce   int
}

type stagedRow struct {
	stream string
	row    sinktest.Row
}

func newStore() *memStore {
	return &memStore{
		fence:   make(map[string]checkpoint.Generation),
		applied: make(map[string]uint64),
		staged:  make(map[string][]stagedRow),
		visible: make(map[string][]sinktest.Row),
	}
}

func (st *memStore) rows(stream string) []sinktest.Row {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]sinktest.Row(nil), st.visible[stream]...)
}

// memDest is a stage-and-apply destination in memory with injectable bugs
// (bug "" is correct; "deliver-ack" is a correct deliver-ack destination).
type memDest struct {
	st  *memStore
	bug string
}

func (d *memDest) Class() sink.Class {
	if d.bug == "deliver-ack" {
		return sink.DeliverAck
	}
	return sink.StageAndApply
}

func (d *memDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }

func (d *memDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	d.st.mu.Lock()
	defer d.st.mu.Unlock()
	d.st.nonce++
	return &memWriter{d: d, st: d.st, pipeline: cfg.Pipeline, lane: cfg.Lane, nonce: d.st.nonce, schemas: make(map[string]*arrow.Schema)}, nil
}

type memWriter struct {
	d        *memDest
	st       *memStore
	pipeline string
	lane     int
	nonce    int
	gen      checkpoint.Generation // guarded by st.mu

	pending []stagedRow
	last    string // stage key of the last PreCommit
	schemas map[string]*arrow.Schema
}

type memCommittable struct {
	Epoch uint64 `json:"epoch"`
	Key   string `json:"key"`
}

func (w *memWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if prev := w.schemas[stream]; prev != nil && !prev.Equal(rec.Schema()) && w.d.bug == "rejects-widening" {
		return errors.New("schema changed")
	}
	w.schemas[stream] = rec.Schema()
	rows, err := sinktest.RowsFromRecord(rec)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if w.d.bug == "drops-new-column" {
			delete(r.Values, "note")
		}
		if w.d.bug == "deliver-ack" || w.d.bug == "visible-on-write" {
			w.st.mu.Lock()
			w.st.visible[stream] = append(w.st.visible[stream], r)
			w.st.mu.Unlock()
			continue
		}
		w.pending = append(w.pending, stagedRow{stream, r})
	}
	return nil
}

func (w *memWriter) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	if len(w.pending) == 0 && w.d.bug == "empty-epoch-fails" {
		return nil, errors.New("nothing to commit")
	}
	key := fmt.Sprintf("%s/%d/%d/%d", w.pipeline, w.nonce, w.lane, epoch)
	w.st.mu.Lock()
	w.st.staged[key] = w.pending
	if w.d.bug == "precommit-visible" {
		for _, r := range w.pending {
			w.st.visible[r.stream] = append(w.st.visible[r.stream], r.row)
		}
	}
	w.st.mu.Unlock()
	w.pending, w.last = nil, key
	return json.Marshal(memCommittable{Epoch: epoch, Key: key})
}

func (w *memWriter) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	if f := w.st.fence[w.pipeline]; f > w.gen && w.d.bug != "no-fence" {
		return fmt.Errorf("generation %d fenced by %d: %w", w.gen, f, sink.ErrFenced)
	}
	if w.st.applied[w.pipeline] >= epoch && w.d.bug != "double-commit" {
		return nil
	}
	if w.d.bug == "lane0-only" {
		cs = cs[:1]
	}
	var keys []string
	for _, c := range cs {
		var mc memCommittable
		if err := json.Unmarshal(c, &mc); err != nil {
			return err
		}
		keys = append(keys, mc.Key)
	}
	if w.d.bug == "applies-all-staged" { // also later epochs' staged rows
		keys = keys[:0]
		for k := range w.st.staged {
			if strings.HasPrefix(k, w.pipeline+"/") {
				keys = append(keys, k)
			}
		}
	}
	if w.d.bug != "precommit-visible" {
		for _, k := range keys {
			for _, r := range w.st.staged[k] {
				w.st.visible[r.stream] = append(w.st.visible[r.stream], r.row)
			}
			if w.d.bug == "applies-all-staged" {
				delete(w.st.staged, k)
			}
		}
	}
	w.st.applied[w.pipeline] = epoch
	return nil
}

func (w *memWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	if f := w.st.fence[w.pipeline]; f > gen && w.d.bug != "fence-lowers" {
		return 0, fmt.Errorf("generation %d fenced by %d: %w", gen, f, sink.ErrFenced)
	}
	ahead := sink.CheckAhead(w.pipeline, "memDest", w.st.applied[w.pipeline], 0, gen, head)
	if w.d.bug == "no-ahead-check" {
		ahead = nil
	}
	if ahead != nil && w.d.bug != "ahead-after-fence" {
		return 0, ahead
	}
	w.st.fence[w.pipeline] = gen
	w.gen = gen
	if ahead != nil { // ahead-after-fence: refused once the fence is raised
		return 0, ahead
	}
	switch {
	case head == nil && w.d.bug == "recover-nil-recoverable":
		return sink.Recoverable, nil
	case head == nil, w.st.applied[w.pipeline] >= head.Epoch, w.d.bug == "recover-always-applied":
		return sink.Applied, nil
	}
	for _, c := range head.Committables {
		var mc memCommittable
		if err := json.Unmarshal(c, &mc); err != nil {
			return 0, err
		}
		if _, ok := w.st.staged[mc.Key]; !ok {
			return sink.Lost, nil
		}
	}
	return sink.Recoverable, nil
}

func (w *memWriter) Finish(context.Context, uint64) error { return nil }

func (w *memWriter) Close(ctx context.Context) error {
	if w.d.bug == "close-keeps" && w.last != "" {
		w.st.mu.Lock()
		w.st.staged[w.last] = append(w.st.staged[w.last], w.pending...)
		w.st.mu.Unlock()
	}
	w.pending = nil
	return nil
}

// TestMemDest runs the suite against memDest with the bug named by
// $SINKTEST_BROKEN; TestSuiteFails runs it in a child process.
func TestMemDest(t *testing.T) {
	bug, ok := os.LookupEnv(envBug)
	if !ok {
		t.Skip("run by TestSuiteFails in a child process")
	}
	st := newStore()
	sinktest.Run(t, func(t *testing.T) sink.Destination { return &memDest{st: st, bug: bug} }, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) { return st.rows(stream), nil },
	})
}

const envBug = "SINKTEST_BROKEN"

// The suite passes correct destinations of two classes, and fails each
// broken one in the check that covers its bug. Each case runs the suite in
// a child process (the suite reports through a real *testing.T) and reads
// its verdict from the exit status and the -test.v output.
func TestSuiteFails(t *testing.T) {
	if _, ok := os.LookupEnv(envBug); ok {
		t.Skip("in the child process")
	}
	for _, c := range []struct {
		bug   string
		want  []string // checks that must fail
		anyOf bool     // one of want failing is enough (the bug shows up by timing)
	}{
		{"", nil, false},
		{"deliver-ack", nil, false},
		{"recover-nil-recoverable", []string{"RecoverNil"}, false},
		{"visible-on-write", []string{"Invisible"}, false},
		{"precommit-visible", []string{"Invisible", "Crash"}, false},
		{"double-commit", []string{"CommitTwice"}, false},
		{"empty-epoch-fails", []string{"EmptyEpoch"}, false},
		{"drops-new-column", []string{"WidenSchema"}, false},
		{"rejects-widening", []string{"WidenSchema"}, false},
		{"recover-always-applied", []string{"Crash"}, false},
		{"no-fence", []string{"Zombie"}, false},
		{"fence-lowers", []string{"Zombie"}, false},
		// Applying later epochs' staged data shows in Concurrent when
		// Commit(N) races PreCommit(N+1), and in Zombie otherwise.
		{"applies-all-staged", []string{"Concurrent", "Zombie"}, true},
		{"lane0-only", []string{"Lanes"}, false},
		{"close-keeps", []string{"CloseDiscards"}, false},
		{"no-ahead-check", []string{"Ahead"}, false},
		{"ahead-after-fence", []string{"Ahead"}, false},
	} {
		name := c.bug
		if name == "" {
			name = "correct"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testutil.SuiteVerdict(t, "TestMemDest", envBug+"="+c.bug, c.want, c.anyOf)
		})
	}
}
