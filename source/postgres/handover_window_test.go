package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// TestHandOverJobWithoutSplitStateReattached: a checkpoint can hold the
// change stream's state with a partition's hand-over job part way
// without that partition's split state (the runner places an idle
// split's barrier with no state, before the handed split's Read emitted
// its first resume point). If the partition is detached, changed and
// attached again before the next Open, its split has no state to tell
// the attachment by (snapState.Gen), so the job must not go on from its
// key of the old attachment: the rows before that key, changed while
// detached, would never be read again. The next Open's stream reads the
// whole partition again.
func TestHandOverJobWithoutSplitStateReattached(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("window"), name("pub"), name("slot")
	partitioned(t, d, tbl, 2, 100)
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	ctx := context.Background()
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 25})
	streamID := "slot:" + slot
	// The slot, and a state of the stream's with nothing read.
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := &recordKeys{}
	if err := splitByID(t, splits, streamID).Read(ctx, first, true); err != nil {
		t.Fatal(err)
	}
	// The next attempt hands both partitions over whole; the stream reads
	// p1's first chunk and the attempt ends: its state holds p1's job
	// after key 25, and (the window) no split state is recorded.
	if splits, err = src.Open(ctx, []string{tbl}, map[source.SplitID][]byte{source.SplitID(streamID): first.state}); err != nil {
		t.Fatal(err)
	}
	part := &recordKeys{limit: 30}
	if err := splitByID(t, splits, streamID).Read(ctx, part, true); err == nil {
		t.Fatal("the stream read everything before its limit")
	}
	if len(part.keys) < 25 || !strings.HasSuffix(part.keys[0], " 1|1") {
		t.Fatalf("the stream's first records: %q; want p1's first chunk", part.keys)
	}
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s_p1", tbl, tbl),
		fmt.Sprintf("UPDATE %s_p1 SET v = 'while detached' WHERE id <= 10", tbl),
		fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_p1 FOR VALUES FROM (0) TO (100)", tbl, tbl))
	if splits, err = src.Open(ctx, []string{tbl}, map[source.SplitID][]byte{source.SplitID(streamID): part.state}); err != nil {
		t.Fatal(err)
	}
	rest := &recordKeys{}
	if err := splitByID(t, splits, streamID).Read(ctx, rest, true); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, v := range rest.vals {
		if strings.Contains(v, "while detached") {
			changed++
		}
	}
	if changed != 10 {
		t.Fatalf("%d rows read with the values they got while detached, want 10 (%d records read: %q...)", changed, len(rest.keys), rest.keys[:min(5, len(rest.keys))])
	}
}
