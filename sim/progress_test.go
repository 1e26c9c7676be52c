package sim

import (
	"context"
	"strings"
	"testing"

	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// checkProgress flags a merged key whose row goes back to an older
// version between two reads, and nothing else: not a newer version, a
// new key, a deleted key, or an appended stream's rows.
func TestCheckProgress(t *testing.T) {
	var reads [][]sinktest.Row
	row := func(id, seq int64, op string) sinktest.Row {
		return sinktest.Row{ID: op + string(rune('a'+seq)), Seq: seq, Op: op, Values: map[string]any{"id": id}}
	}
	s := &sim{rep: &Report{}, w: &workload{
		streams:  []sourcetest.FakeStream{{Name: "users"}, {Name: "orders"}},
		modes:    map[string]delivery.Mode{"users": delivery.Merge},
		replay:   source.ReplaySuperset,
		class:    sink.StageAndApply,
		caps:     sink.Capabilities{Merge: true},
		required: delivery.EffectivelyOnce,
	}}
	s.dst = &targetDest{s: s, t: &Target{Read: func(_ context.Context, stream string) ([]sinktest.Row, error) {
		if stream != "users" || len(reads) == 0 {
			return []sinktest.Row{row(1, 9, "insert"), row(1, 1, "insert")}, nil // orders: append, never checked
		}
		r := reads[0]
		reads = reads[1:]
		return r, nil
	}}}
	reads = [][]sinktest.Row{
		{row(1, 5, "insert"), row(2, 3, "insert")},
		{row(1, 6, "update"), row(2, 4, "delete"), row(3, 1, "insert")}, // forward only
		{row(1, 6, "update"), row(3, 1, "insert")},                      // 2 purged: fine
		{row(1, 4, "update"), row(2, 2, "insert"), row(3, 1, "insert")}, // 1 and 2 went back
	}
	for i := range 3 {
		s.checkProgress("read " + string(rune('1'+i)))
		if len(s.rep.Violations) > 0 {
			t.Fatalf("read %d: %v", i+1, s.rep.Violations)
		}
	}
	s.checkProgress("read 4")
	if len(s.rep.Violations) != 1 {
		t.Fatalf("violations %v, want one naming keys 1 and 2", s.rep.Violations)
	}
	v := s.rep.Violations[0]
	for _, want := range []string{"2 keys went back", "key 1 at seq 4 (update), seq 6 was visible before", "key 2 at seq 2 (insert), seq 4 was visible before"} {
		if !strings.Contains(v, want) {
			t.Errorf("violation %q lacks %q", v, want)
		}
	}
}
