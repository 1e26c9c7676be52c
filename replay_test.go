package etl_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
)

// replayRig is a pipeline "rp" of the docs source into Parquet files in
// a local directory, with a checkpoint directory beside them.
type replayRig struct {
	t             *testing.T
	src           *docs
	tables, ckpts string
	retry         *etl.Retry      // when set, build's pipelines retry with it
	onEvent       func(etl.Event) // when set, build's pipelines send it their events
}

func newReplayRig(t *testing.T, docs0 ...string) *replayRig {
	dir := t.TempDir()
	return &replayRig{t: t, src: &docs{docs: docs0}, tables: filepath.Join(dir, "tables"), ckpts: filepath.Join(dir, "checkpoints")}
}

// build makes the pipeline; wrap, when set, wraps the destination.
func (g *replayRig) build(policy etl.Policy, wrap func(sink.Destination) sink.Destination) *etl.Pipeline {
	t := g.t
	t.Helper()
	bucket, err := fileblob.OpenBucket(g.tables, &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	pq, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	var dst sink.Destination = pq
	if wrap != nil {
		dst = wrap(pq)
	}
	store, err := checkpoint.OpenDir(g.ckpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	b := etl.NewPipeline("rp").From(g.src).To(dst).Checkpoints(store).CommitRetries(1, time.Millisecond)
	if policy != "" {
		b = b.SchemaPolicy(policy, "docs")
	}
	if g.retry != nil {
		b = b.Retry(*g.retry)
	}
	if g.onEvent != nil {
		b = b.OnEvent(g.onEvent, 64)
	}
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func (g *replayRig) sync(p *etl.Pipeline, more ...string) etl.Result {
	g.t.Helper()
	g.src.mu.Lock()
	g.src.docs = append(g.src.docs, more...)
	g.src.mu.Unlock()
	res, err := p.Sync(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	return res
}

// seqs returns the sorted _openetl_seq of every row of docs, as pyarrow
// reads them by following the manifest, and the table's columns.
func (g *replayRig) seqs() ([]int64, []string) {
	g.t.Helper()
	st := testutil.ReadParquetTables(g.t, g.tables)["docs"]
	if st == nil {
		g.t.Fatal("no docs table")
	}
	if st.Rows != st.DistinctIDs || st.Rows != st.DistinctSeqs {
		g.t.Errorf("docs: %d rows, %d distinct ids, %d distinct seqs: a row twice", st.Rows, st.DistinctIDs, st.DistinctSeqs)
	}
	return st.Seqs, st.Columns
}

func wantReplay(t *testing.T, what string, res etl.ReplayResult, err error, selected, written, quarantined int64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.Selected != selected || res.Written != written || res.Quarantined != quarantined {
		t.Errorf("%s: selected %d, written %d, quarantined %d; want %d, %d, %d", what,
			res.Selected, res.Written, res.Quarantined, selected, written, quarantined)
	}
	if res.Selected != res.Written+res.Quarantined {
		t.Errorf("%s: selected %d != written %d + quarantined %d", what, res.Selected, res.Written, res.Quarantined)
	}
	if c := res.Streams["docs"]; c.Read != 0 || c.Replayed != selected {
		t.Errorf("%s: counts %+v: want nothing read and %d replayed", what, c, selected)
	}
}

// TestReplayQuarantine: records a frozen schema refused, and one that
// isn't JSON, are set aside in three epochs; after the policy is lifted,
// Replay selects them by reason and by epoch range, writes each that now
// passes exactly once, quarantines the one that still fails again with
// its reason (and a later Replay selects that new line), counts them,
// and replays nothing twice. The next Sync reads on from the source's
// position as it was.
func TestReplayQuarantine(t *testing.T) {
	g := newReplayRig(t, `{"id":1,"a":1}`, `{"id":2,"a":2}`)
	g.sync(g.build("", nil)) // learns the schema the frozen pipeline keeps
	frozen := g.build(etl.PolicyFreeze, nil)
	e2 := g.sync(frozen, `{"id":3,"a":3,"b":"x"}`, `not json`, `{"id":4,"a":4}`)
	e3 := g.sync(frozen, `{"id":5,"a":5,"c":true}`)
	if q := e2.Streams["docs"].Quarantined + e3.Streams["docs"].Quarantined; q != 3 {
		t.Fatalf("%d quarantined by the frozen pipeline, want 3", q)
	}
	if seqs, _ := g.seqs(); !slices.Equal(seqs, []int64{1, 2, 5}) {
		t.Fatalf("before replay: seqs %v, want 1 2 5", seqs)
	}

	p := g.build("", nil) // the default policy, evolve: the fix
	ctx := context.Background()
	res, err := p.Replay(ctx, etl.Replay{Stream: "docs", Reasons: []string{"parse_error"}})
	wantReplay(t, "replay parse_error", res, err, 1, 0, 1)
	requarantined := res.Epoch
	b, err := checkpointFile(t, g.ckpts, etl.QuarantineName("docs", requarantined))
	if err != nil || !strings.Contains(b, `"reason":"parse_error"`) || !strings.Contains(b, `"payload":"not json"`) {
		t.Errorf("the record that failed again is not quarantined again in epoch %d: %q, %v", requarantined, b, err)
	}

	res, err = p.Replay(ctx, etl.Replay{Stream: "docs", FromEpoch: e2.Epoch, ToEpoch: e2.Epoch})
	wantReplay(t, "replay epoch 2", res, err, 1, 1, 0)
	if seqs, _ := g.seqs(); !slices.Equal(seqs, []int64{1, 2, 3, 5}) {
		t.Errorf("after replaying epoch %d: seqs %v, want 1 2 3 5", e2.Epoch, seqs)
	}

	// Everything left: the record of epoch 3, and the line of the
	// parse_error that failed again.
	res, err = p.Replay(ctx, etl.Replay{Stream: "docs"})
	wantReplay(t, "replay all", res, err, 2, 1, 1)
	for _, sel := range []etl.Replay{{Stream: "docs", Reasons: []string{"type_conflict"}}, {Stream: "docs", ToEpoch: e3.Epoch}} {
		res, err = p.Replay(ctx, sel)
		wantReplay(t, "replay again", res, err, 0, 0, 0)
		if res.Epochs != 0 {
			t.Errorf("a replay of nothing committed %d epochs", res.Epochs)
		}
	}

	last := g.sync(p, `{"id":7,"a":7,"b":"y"}`)
	if c := last.Streams["docs"]; c.Read != 1 || c.Written != 1 {
		t.Errorf("the sync after the replays: %+v, want the one new document read and written", c)
	}
	// The Sync carried the account of what was replayed on; the record
	// that isn't JSON has a new line each time it fails.
	res, err = p.Replay(ctx, etl.Replay{Stream: "docs", Reasons: []string{"type_conflict"}})
	wantReplay(t, "replay after the sync", res, err, 0, 0, 0)
	res, err = p.Replay(ctx, etl.Replay{Stream: "docs"})
	wantReplay(t, "replay all after the sync", res, err, 1, 0, 1)
	seqs, cols := g.seqs()
	if !slices.Equal(seqs, []int64{1, 2, 3, 5, 6, 7}) {
		t.Errorf("seqs %v, want 1 2 3 5 6 7 (each once; 4, not JSON, stays quarantined)", seqs)
	}
	for _, c := range []string{"b", "c"} {
		if !slices.Contains(cols, c) {
			t.Errorf("columns %v: no %s, which only replayed records have", cols, c)
		}
	}
	ck, err := p.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tot := ck.Totals["docs"]; tot.Read != 7 || tot.Replayed != 5 || tot.Read+tot.Replayed != tot.Written+tot.Quarantined {
		t.Errorf("totals %+v: want 7 read, 5 replayed, read + replayed = written + quarantined", tot)
	}
}

// TestReplayCrash: a replay whose attempt dies before its epoch's commit
// point (at PreCommit) replays everything again next time; one that dies
// after it (the destination's Commit lost) has its epoch applied by the
// next attempt's recovery and replays nothing again. Either way each
// record is written once.
func TestReplayCrash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    sinktest.FakeDestOp
		fault sinktest.FakeFault
		again int64 // selected by the second Replay
	}{
		{"before the commit point", sinktest.FakePreCommit, sinktest.FakeFault{Crash: true}, 2},
		{"after the commit point", sinktest.FakeCommit, sinktest.FakeFault{After: true, Crash: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newReplayRig(t, `{"id":1,"a":1}`)
			g.sync(g.build("", nil))
			frozen := g.build(etl.PolicyFreeze, nil)
			g.sync(frozen, `{"id":2,"a":2,"b":"x"}`, `{"id":3,"a":3,"b":"y"}`)
			head, err := frozen.Inspect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var dst *sinktest.FaultyDestination
			faulty := g.build("", func(d sink.Destination) sink.Destination {
				fault := tc.fault
				dst = sinktest.WithFaults(d, sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
					if c.Op == tc.op && c.Epoch > head.Epoch {
						return &fault
					}
					return nil
				}})
				return dst
			})
			if _, err := faulty.Replay(context.Background(), etl.Replay{Stream: "docs"}); !errors.Is(err, sinktest.ErrFakeFault) && !errors.Is(err, sinktest.ErrFakeKilled) {
				t.Fatalf("the faulty replay: %v, want the injected fault", err)
			}
			p := g.build("", nil)
			res, err := p.Replay(context.Background(), etl.Replay{Stream: "docs"})
			wantReplay(t, "the replay after the crash", res, err, tc.again, tc.again, 0)
			res, err = p.Replay(context.Background(), etl.Replay{Stream: "docs"})
			wantReplay(t, "a third replay", res, err, 0, 0, 0)
			if seqs, _ := g.seqs(); !slices.Equal(seqs, []int64{1, 2, 3}) {
				t.Errorf("seqs %v, want 1 2 3 once each", seqs)
			}
		})
	}
}

// TestReplayRetriedAttempt: a retrying Replay whose first attempt's
// destination Commit failed past its commit point selects, over its
// attempts, each line once: the retry's recovery applies the epoch, and
// the line the record that failed again left in that epoch's quarantine
// file is not replayed by the retry (it is a later Replay's).
func TestReplayRetriedAttempt(t *testing.T) {
	ctx := context.Background()
	g := newReplayRig(t, `{"id":1,"a":1}`)
	g.sync(g.build("", nil))
	frozen := g.build(etl.PolicyFreeze, nil)
	g.sync(frozen, `{"id":2,"a":2,"b":"x"}`, `not json`)
	head, err := frozen.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.retry = &etl.Retry{Sync: true, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	var retried atomic.Int32
	g.onEvent = func(e etl.Event) {
		if e.Kind == etl.EventSyncRetrying {
			retried.Add(1)
		}
	}
	// The first three Commits fail after taking effect: more than the
	// attempt's own commit retries (CommitRetries(1, ...)), so the
	// attempt fails and the Replay retries it.
	var failed atomic.Int32
	p := g.build("", func(d sink.Destination) sink.Destination {
		return sinktest.WithFaults(d, sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == sinktest.FakeCommit && c.Epoch > head.Epoch && failed.Add(1) <= 3 {
				return &sinktest.FakeFault{After: true}
			}
			return nil
		}})
	})
	if _, err := p.Replay(ctx, etl.Replay{Stream: "docs"}); err != nil {
		t.Fatal(err)
	}
	p.Close(ctx) // delivers the events queued
	if retried.Load() == 0 {
		t.Fatalf("the replay was not retried (%d Commits failed): the test proves nothing", failed.Load())
	}
	// The Result leaves out the epoch whose Commit failed (the retry's
	// recovery applied it); the checkpoint's totals count it.
	ck, err := p.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tot := ck.Totals["docs"]; tot.Replayed != 2 || tot.Read+tot.Replayed != tot.Written+tot.Quarantined {
		t.Errorf("totals %+v: want 2 replayed once each, read + replayed = written + quarantined", tot)
	}
	lines := 0
	for e := head.Epoch + 1; e <= ck.Epoch; e++ {
		b, err := checkpointFile(t, g.ckpts, etl.QuarantineName("docs", e))
		if err == nil {
			lines += strings.Count(b, `"payload":"not json"`)
		}
	}
	if lines != 1 {
		t.Errorf("the record that failed again has %d quarantine lines from the replay, want 1", lines)
	}
	g.retry, g.onEvent = nil, nil
	res, err := g.build("", nil).Replay(ctx, etl.Replay{Stream: "docs"})
	wantReplay(t, "a later replay", res, err, 1, 0, 1)
	if seqs, _ := g.seqs(); !slices.Equal(seqs, []int64{1, 2}) {
		t.Errorf("seqs %v, want 1 2 once each", seqs)
	}
}

// TestReplayRefuses: a replay of a merge stream, of a stream the
// pipeline doesn't have, or of an empty epoch range fails with
// delivery.ErrInvalid, naming why, before it claims the pipeline.
func TestReplayRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  etl.Replay
		want string
	}{
		{"merge", etl.Replay{Stream: "docs"}, "only append streams"},
		{"unknown stream", etl.Replay{Stream: "nope"}, `"nope" is not selected`},
		{"no stream", etl.Replay{}, "no stream"},
		{"empty range", etl.Replay{Stream: "docs", FromEpoch: 3, ToEpoch: 2}, "empty range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &docs{docs: []string{`{"id":1}`}}
			dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply,
				Capabilities: sink.Capabilities{Merge: true}})
			b := etl.NewPipeline("rm").From(src).To(dst).Checkpoints(checkpoint.NewMem())
			if tc.name == "merge" {
				b = b.Mode(delivery.Merge, "docs")
			}
			p, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Replay(context.Background(), tc.sel)
			if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("replay %+v: %v, want delivery.ErrInvalid saying %q", tc.sel, err, tc.want)
			}
			if ck, _ := p.Inspect(context.Background()); ck.Generation != 0 {
				t.Errorf("the refused replay claimed generation %d", ck.Generation)
			}
		})
	}
}

func checkpointFile(t *testing.T, dir, name string) (string, error) {
	t.Helper()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		return "", err
	}
	defer store.Close(context.Background())
	b, err := store.ReadFile(context.Background(), "rp", name)
	return string(b), err
}
