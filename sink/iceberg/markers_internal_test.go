package iceberg

import (
	"context"
	"testing"
	"time"
)

// TestShardPipelineMarkers: a shard's pipeline name has a dot
// (etl.ShardKey: orders.shard-1-of-4); its marker keys are read back
// as its own, and never as another pipeline's.
func TestShardPipelineMarkers(t *testing.T) {
	if err := checkPipeline("orders.shard-1-of-4"); err != nil {
		t.Fatalf("checkPipeline(shard key): %v", err)
	}
	for _, bad := range []string{"", "a/b", "a b", "a\\b", "a\x00b"} {
		if checkPipeline(bad) == nil {
			t.Errorf("checkPipeline(%q) = nil, want an error", bad)
		}
	}
	for _, p := range []string{"orders", "orders.shard-1-of-4", "a.epoch"} {
		for _, k := range []string{epochKey(p), genKey(p), fenceKey(p)} {
			if got, ok := markerPipeline(k); !ok || got != p {
				t.Errorf("markerPipeline(%q) = %q, %v; want %q", k, got, ok, p)
			}
		}
	}
	for _, k := range []string{"openetl.pipeline", "openetl.epoch", "openetl.overwrite", "openetl..epoch", "openetl.a.other", "other.a.epoch"} {
		if p, ok := markerPipeline(k); ok {
			t.Errorf("markerPipeline(%q) = %q, want no marker", k, p)
		}
	}
	m, err := readMarkers(map[string]string{
		epochKey("orders"): "9", epochKey("orders.shard-0-of-2"): "4", fenceKey("orders.shard-0-of-2"): "3",
	}, "orders.shard-0-of-2")
	if err != nil || m.epoch != 4 || m.fence != 3 {
		t.Errorf("readMarkers of a shard: %+v, %v; want epoch 4, fence 3", m, err)
	}
}

// TestConflictWait: pauses grow from conflictPause to conflictMaxPause,
// each drawn from [d/2, d]; a cancelled context ends one at once.
func TestConflictWait(t *testing.T) {
	start := time.Now()
	if err := conflictWait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < conflictPause/2 {
		t.Errorf("first pause %v, want at least %v", took, conflictPause/2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	if err := conflictWait(ctx, 40); err == nil {
		t.Error("conflictWait with a cancelled context: nil, want its error")
	}
	if took := time.Since(start); took >= conflictMaxPause/2 {
		t.Errorf("cancelled pause took %v", took)
	}
}
