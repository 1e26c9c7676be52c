package runner

import (
	"testing"
)

// TestUnackedBounded: while the visible epoch lags, the states kept for
// acknowledgement stay at most maxUnacked, oldest and newest kept and
// in order; once visibility catches up, the newest visible one is acked
// (or, where it was thinned out, the newest kept before it).
func TestUnackedBounded(t *testing.T) {
	ch := newCommitChain(nil)
	const epochs = 10_000
	for e := uint64(1); e <= epochs; e++ {
		ch.addUnacked(epochStates{epoch: e, states: map[string][]byte{"s": {byte(e)}}})
		if len(ch.unacked) > maxUnacked {
			t.Fatalf("after epoch %d: %d states kept, want at most %d", e, len(ch.unacked), maxUnacked)
		}
		// Visible stays at 0: nothing to acknowledge.
		if _, ok := ch.toAck(e, 0); ok {
			t.Fatalf("epoch %d acked with nothing visible", e)
		}
	}
	if first, last := ch.unacked[0].epoch, ch.unacked[len(ch.unacked)-1].epoch; first != 1 || last != epochs {
		t.Fatalf("kept epochs %d to %d, want 1 to %d", first, last, epochs)
	}
	for i := 1; i < len(ch.unacked); i++ {
		if ch.unacked[i].epoch <= ch.unacked[i-1].epoch {
			t.Fatalf("kept epochs out of order at %d: %d after %d", i, ch.unacked[i].epoch, ch.unacked[i-1].epoch)
		}
	}
	// Visibility catches up to the epoch before the last: the newest
	// kept state at or before it is acked, and only the last is left.
	e, ok := ch.toAck(epochs+1, epochs-1)
	if !ok || e.epoch > epochs-1 || e.epoch < epochs-1-2*epochs/maxUnacked*2 {
		t.Fatalf("acked epoch %d (%v), want the newest kept at or before %d", e.epoch, ok, epochs-1)
	}
	if len(ch.unacked) != 1 || ch.unacked[0].epoch != epochs {
		t.Fatalf("left %d states, want the last epoch's", len(ch.unacked))
	}
}
