package etl_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// TestEngineWorkers: a pipeline of several streams normalized by one,
// two or three engine workers (each stream stays with one) writes the
// same rows, counts the same and saves the same engine state as with
// one: each stream's schema from the worker that evolved it. A second
// Sync, after more records, resumes from that state with the same
// result. The faker's streams read by two splits each, so every split
// reaches every worker, into three lanes.
func TestEngineWorkers(t *testing.T) {
	type outcome struct {
		state  []byte
		counts map[string]checkpoint.Counts
		rows   map[string][]string
	}
	run := func(t *testing.T, workers int) outcome {
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{})
		store := checkpoint.NewMem()
		var out outcome
		for _, rows := range []int64{3000, 5000} {
			src, err := faker.New(faker.Config{Rows: rows, SplitsPerStream: 2, MalformedShare: 0.01})
			if err != nil {
				t.Fatal(err)
			}
			p, err := etl.NewPipeline("workers").From(src).To(dst).Checkpoints(store).
				EngineWorkers(workers).Lanes(3).BatchSize(100, 1<<20).Build()
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			out.counts = res.Totals
		}
		_, head, err := store.Head(context.Background(), "workers")
		if err != nil || head == nil {
			t.Fatalf("head %v, %v", head, err)
		}
		out.state = head.Engine
		out.rows = map[string][]string{}
		for s := range out.counts {
			for _, r := range dst.Rows(s) {
				out.rows[s] = append(out.rows[s], fmt.Sprint(r.Key, r.Seq, r.Values))
			}
			slices.Sort(out.rows[s])
		}
		return out
	}
	one := run(t, 1)
	if len(one.counts) < 2 {
		t.Fatalf("the faker gave %d streams, want several", len(one.counts))
	}
	for s, c := range one.counts {
		if c.Read != 5000 || c.Quarantined == 0 || c.Written+c.Quarantined != c.Read || len(one.rows[s]) != int(c.Written) {
			t.Fatalf("one worker: stream %s counts %+v, %d rows", s, c, len(one.rows[s]))
		}
	}
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			got := run(t, workers)
			if string(got.state) != string(one.state) {
				t.Errorf("engine state\n%s\nwith one worker\n%s", got.state, one.state)
			}
			for s, c := range one.counts {
				if got.counts[s] != c {
					t.Errorf("stream %s: counts %+v, with one worker %+v", s, got.counts[s], c)
				}
				if !slices.Equal(got.rows[s], one.rows[s]) {
					t.Errorf("stream %s: %d rows differ from one worker's %d", s, len(got.rows[s]), len(one.rows[s]))
				}
			}
		})
	}
}
