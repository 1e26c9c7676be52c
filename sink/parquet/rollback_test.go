package parquet_test

import (
	"context"
	"strings"
	"testing"

	"gocloud.dev/blob"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

// TestLostEpochTakenBack: a Commit cut short between streams (stream a
// applied, stream b's staged file gone) leaves epoch 2 in a's manifest
// only. Recover reports it Lost and a gives it back, so when the runner
// writes epoch 2 again from the record before (other rows this time),
// Commit applies it to both streams: a holds epoch 1's rows and the new
// epoch 2's, none of the old epoch 2's (found by package sim with staged
// files expiring, seeds 2950726719676093 and 2950726719676341).
func TestLostEpochTakenBack(t *testing.T) {
	forEachBucket(t, func(t *testing.T, b *blob.Bucket) {
		ctx := context.Background()
		d := newDest(t, b, parquet.Config{})
		w := newWriter(t, d, "p", 0)
		recoverGen(t, w, 1, nil)
		write(t, w, "a", 0, 10, false)
		write(t, w, "b", 0, 10, false)
		commit(t, w, 1, preCommit(t, w, 1))
		head1 := record("p", 1, 1, nil)

		// Epoch 2: a gets ids 10-14, b ids 10-19; b's staged file goes.
		write(t, w, "a", 10, 5, false)
		write(t, w, "b", 10, 10, false)
		c2 := preCommit(t, w, 2)
		head2 := record("p", 2, 1, c2)
		staged := keys(t, b, "_staging/p/b/")
		if len(staged) != 1 {
			t.Fatalf("staged files of b: %v", staged)
		}
		if err := b.Delete(ctx, staged[0]); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, 2, []sink.Committable{c2}); err == nil || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("Commit with b's staged file gone: %v, want an error saying the epoch is lost", err)
		}
		if m := manifest(t, b, "", "a"); m.Epoch != 2 {
			t.Fatalf("a's manifest at epoch %d: the test wants a applied before b failed", m.Epoch)
		}

		w2 := newWriter(t, d, "p", 0)
		if out := recoverGen(t, w2, 2, head2); out != sink.Lost {
			t.Fatalf("Recover: %v, want lost", out)
		}
		m := manifest(t, b, "", "a")
		if m.Epoch != 1 || m.Generation != 2 {
			t.Errorf("a's manifest after Recover: epoch %d generation %d, want epoch 1 by generation 2", m.Epoch, m.Generation)
		}
		ids, _ := readStream(t, b, "", "a")
		wantIDs(t, ids, 10)
		// The runner rewinds to epoch 1 and asks again: applied.
		if out := recoverGen(t, w2, 2, head1); out != sink.Applied {
			t.Fatalf("Recover of epoch 1: %v, want applied", out)
		}
		// Epoch 2 again, read further this time: a ids 10-19, b 10-19.
		write(t, w2, "a", 10, 10, false)
		write(t, w2, "b", 10, 10, false)
		commit(t, w2, 2, preCommit(t, w2, 2))
		for _, s := range []string{"a", "b"} {
			ids, _ := readStream(t, b, "", s)
			wantIDs(t, ids, 20)
		}
	})
}
