package runner_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// configDest is a sinktest.FakeDestination that keeps the WriterConfig
// of every Writer call.
type configDest struct {
	*sinktest.FakeDestination
	mu      sync.Mutex
	configs []sink.WriterConfig
}

func (d *configDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	d.mu.Lock()
	d.configs = append(d.configs, cfg)
	d.mu.Unlock()
	return d.FakeDestination.Writer(ctx, cfg)
}

func (d *configDest) tables() [][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out [][]string
	for _, c := range d.configs {
		var ts []string
		for _, s := range c.Streams {
			ts = append(ts, s.Stream+"→"+s.Table)
		}
		out = append(out, ts)
	}
	return out
}

// TestRewindRenamesReopenWriters: table names are given in selection
// order when an attempt starts. When recovery rewinds past a lost epoch
// that was the first to name two streams whose names collide, the
// streams are named again, in this attempt's order, and the writers are
// opened again with the new names (and recovered again) before any row
// is written, so every row lands under the name its writer was told.
func TestRewindRenamesReopenWriters(t *testing.T) {
	ctx := context.Background()
	var failCommit atomic.Bool
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class: sink.StageAndApply, Capabilities: sink.Capabilities{IdentifierCase: "lower", SimpleIdentifiers: true},
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == sinktest.FakeCommit && failCommit.Load() {
				return errors.New("commit refused")
			}
			return nil
		},
	})
	dst := &configDest{FakeDestination: fake}
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Replay: source.ReplayExact, Streams: []sourcetest.FakeStream{
		{Name: "Orders", Rows: 3}, {Name: "orders", Rows: 3}}})
	store := checkpoint.NewMem()
	cfg := runner.Config{Name: "p", Source: src, Destination: dst, Store: store, Streams: []string{"orders", "Orders"},
		CommitRetries: 1, CommitBackoff: time.Millisecond}

	// The first attempt's epoch is recorded but never applied, and its
	// staged data is then lost.
	failCommit.Store(true)
	if _, err := runner.Sync(ctx, cfg); err == nil {
		t.Fatal("a sync whose commit fails succeeded")
	}
	failCommit.Store(false)
	if n := fake.DropStaged("p"); n == 0 {
		t.Fatal("nothing staged to drop")
	}

	cfg.Streams = []string{"Orders", "orders"}
	if _, err := runner.Sync(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	got := dst.tables()
	want := [][]string{
		{"orders→orders", "Orders→orders_2"}, // the first attempt
		{"Orders→orders_2", "orders→orders"}, // the names in the lost epoch's record
		{"Orders→orders", "orders→orders_2"}, // named again after the rewind
	}
	if len(got) != len(want) {
		t.Fatalf("writers got tables %q, want %q", got, want)
	}
	for i := range want {
		if len(got[i]) != 2 || got[i][0] != want[i][0] || got[i][1] != want[i][1] {
			t.Fatalf("writers got tables %q, want %q", got, want)
		}
	}
	for table, stream := range map[string]string{"orders": "Orders", "orders_2": "orders"} {
		rows := fake.Rows(table)
		if len(rows) != 3 {
			t.Errorf("table %s (stream %s) has %d rows, want 3", table, stream, len(rows))
		}
	}
}
