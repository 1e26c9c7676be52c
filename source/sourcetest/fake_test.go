package sourcetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// fakeCollect is an Emitter that keeps what a split emits.
type fakeCollect struct {
	seqs   []int64
	states []string
}

func (c *fakeCollect) Record(_ string, _ source.Op, seq int64, _, _ []byte) error {
	c.seqs = append(c.seqs, seq)
	return nil
}

func (c *fakeCollect) ResumePoint(state []byte) error {
	c.states = append(c.states, string(state))
	return nil
}

// liveCollect is a fakeCollect that closes end at the resume point
// after the 10th record.
type liveCollect struct {
	fakeCollect
	end chan struct{}
}

func (c *liveCollect) ResumePoint(state []byte) error {
	c.fakeCollect.ResumePoint(state)
	if string(state) == "10" {
		close(c.end)
	}
	return nil
}

func fakeReadAll(t *testing.T, s *sourcetest.FakeSource, resume map[source.SplitID][]byte) map[source.SplitID]*fakeCollect {
	t.Helper()
	ctx := context.Background()
	cat, err := s.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range cat.Streams {
		names = append(names, st.Name)
	}
	splits, err := s.Open(ctx, names, resume)
	if err != nil {
		t.Fatal(err)
	}
	out := map[source.SplitID]*fakeCollect{}
	for _, sp := range splits {
		c := &fakeCollect{}
		if err := sp.Read(ctx, c, true); err != nil {
			t.Fatal(err)
		}
		out[sp.ID()] = c
	}
	return out
}

func TestFakeSourceDataAndLatest(t *testing.T) {
	cfg := sourcetest.FakeSourceConfig{Seed: 42, Replay: source.ReplayExact, Streams: []sourcetest.FakeStream{
		{Name: "a", CDC: true, Splits: 2, Rows: 50, BadEvery: 4},
		{Name: "b", Unkeyed: true, Rows: 10},
	}}
	s := sourcetest.NewFakeSource(cfg)
	if got := sourcetest.NewFakeSource(cfg).Records("a"); !slices.EqualFunc(got, s.Records("a"), func(x, y sourcetest.FakeRecord) bool {
		return string(x.Payload) == string(y.Payload) && x.Op == y.Op && x.Seq == y.Seq
	}) {
		t.Fatal("same seed, different records")
	}
	ops := map[source.Op]int{}
	latest := map[string]sourcetest.FakeRecord{}
	bad := 0
	for _, r := range s.Records("a") {
		ops[r.Op]++
		if r.Bad {
			bad++
			continue
		}
		if r.Op == source.OpDelete {
			if _, ok := latest[string(r.Key)]; !ok {
				t.Fatalf("delete of key %s that is not live", r.Key)
			}
			delete(latest, string(r.Key))
		} else {
			if r.Op == source.OpUpdate {
				if _, ok := latest[string(r.Key)]; !ok {
					t.Fatalf("update of key %s that is not live", r.Key)
				}
			}
			latest[string(r.Key)] = r
		}
	}
	if ops[source.OpUpdate] == 0 || ops[source.OpDelete] == 0 || bad == 0 {
		t.Fatalf("CDC stream lacks updates, deletes or bad records: %v, %d bad", ops, bad)
	}
	got := s.Latest("a")
	if len(got) != len(latest) {
		t.Fatalf("Latest has %d keys, want %d", len(got), len(latest))
	}
	for k, r := range latest {
		if got[k].Seq != r.Seq {
			t.Fatalf("key %s: latest seq %d, want %d", k, got[k].Seq, r.Seq)
		}
	}
	for _, r := range s.Records("b") {
		if r.Key != nil || r.Op != source.OpInsert {
			t.Fatalf("unkeyed stream record %+v", r)
		}
	}
	cat := s.Catalog()
	if len(cat.Streams) != 2 || !cat.Streams[0].CDC || len(cat.Streams[1].PrimaryKey) != 0 {
		t.Fatalf("catalog %+v", cat)
	}
}

func TestFakeSourceReplay(t *testing.T) {
	streams := []sourcetest.FakeStream{{Name: "a", Rows: 20, Splits: 3}}
	for _, tc := range []struct {
		replay source.Replay
		max    int
	}{{source.ReplayExact, 0}, {source.ReplaySuperset, 4}} {
		t.Run(tc.replay.String(), func(t *testing.T) {
			s := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Replay: tc.replay, SupersetMax: tc.max, Streams: streams, ResumeEvery: 5})
			first := fakeReadAll(t, s, nil)
			for id, c := range first {
				if len(c.seqs) != 20 || c.states[len(c.states)-1] != "20" {
					t.Fatalf("split %s: %d records, states %v", id, len(c.seqs), c.states)
				}
			}
			restarts := map[int]bool{}
			for range 50 {
				resume := map[source.SplitID][]byte{}
				for _, id := range s.SplitIDs() {
					resume[id] = []byte("10")
				}
				for id, c := range fakeReadAll(t, s, resume) {
					start := int(c.seqs[0]) - 1
					if start > 10 || start < 10-tc.max {
						t.Fatalf("split %s resumed at %d from state 10 (max back %d)", id, start, tc.max)
					}
					restarts[start] = true
				}
			}
			if tc.replay == source.ReplaySuperset && len(restarts) < 2 {
				t.Fatalf("superset source always restarts at %v", restarts)
			}
		})
	}
}

func TestFakeSourceControlAndKill(t *testing.T) {
	boom := errors.New("disconnect")
	s := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Replay: source.ReplayExact, Streams: []sourcetest.FakeStream{{Name: "a", Rows: 10}}})
	v := s.WithControl(func(_ context.Context, c sourcetest.FakeSourceCall) error {
		if c.Op == sourcetest.FakeRead && c.Index == 4 {
			return boom
		}
		return nil
	})
	ctx := context.Background()
	splits, err := v.Open(ctx, []string{"a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCollect{}
	if err := splits[0].Read(ctx, c, true); !errors.Is(err, boom) || len(c.seqs) != 4 {
		t.Fatalf("read returned %v after %d records, want the disconnect after 4", err, len(c.seqs))
	}
	v.Kill()
	if _, err := v.Discover(ctx); !errors.Is(err, sourcetest.ErrFakeKilled) {
		t.Fatalf("killed view: %v", err)
	}
	if _, err := s.Discover(ctx); err != nil {
		t.Fatalf("other view: %v", err)
	}
	if err := s.Ack(ctx, map[source.SplitID][]byte{"a#0": []byte("4")}); err != nil || len(s.Acks()) != 1 {
		t.Fatalf("ack: %v, %v", err, s.Acks())
	}
}

func TestFakeSourceLive(t *testing.T) {
	s := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Live: true, Replay: source.ReplayExact, Streams: []sourcetest.FakeStream{{Name: "a", Rows: 10}}})
	s.SetHorizon(3)
	if c := fakeReadAll(t, s, nil)["a#0"]; len(c.seqs) != 3 {
		t.Fatalf("bounded read of a live source read %d records, want 3", len(c.seqs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	splits, _ := s.Open(ctx, []string{"a"}, map[source.SplitID][]byte{"a#0": []byte("3")})
	c := &liveCollect{end: make(chan struct{})}
	done := make(chan error)
	go func() { done <- splits[0].Read(ctx, c, false) }()
	// The read waits at the horizon (in a select, the split's only one)
	// until it grows.
	testutil.Until(t, "the unbounded read to wait at the horizon", func() bool {
		for _, g := range testutil.Goroutines("sourcetest.(*fakeSplit).Read") {
			if strings.Contains(g, "[select") {
				return true
			}
		}
		return false
	})
	s.SetHorizon(-1)
	testutil.Recv(t, "the read to reach the end of the grown log", c.end)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("unbounded read returned %v", err)
	}
	if len(c.seqs) != 7 || c.states[len(c.states)-1] != strconv.Itoa(10) {
		t.Fatalf("unbounded read got %d records, states %v", len(c.seqs), c.states)
	}
}

func ExampleFakeSource() {
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{
		Seed: 1, Replay: source.ReplayExact,
		Streams: []sourcetest.FakeStream{{Name: "orders", CDC: true, Splits: 2, Rows: 100}},
		// A disconnect: the 10th record of every split fails once read.
		Control: func(_ context.Context, c sourcetest.FakeSourceCall) error {
			if c.Op == sourcetest.FakeRead && c.Index == 9 {
				return errors.New("connection reset")
			}
			return nil
		},
	})
	fmt.Println(len(src.Records("orders")), len(src.SplitIDs()))
	// Output: 200 2
}
