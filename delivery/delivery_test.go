package delivery_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// rule is one row of the expected-guarantee table: "*" matches anything.
// The first matching row wins. The table restates docs/delivery.md's rules
// independently of Decide's code. declared is whether the destination's
// Capabilities declare the mode beyond append (Merge, Overwrite).
type rule struct {
	replay, class, mode, key, declared, skipByID, required string
	want                                                   string // level, or "invalid"
}

var rules = []rule{
	{"*", "*", "merge", "no", "*", "*", "*", "invalid"},
	{"*", "*", "merge", "*", "no", "*", "*", "invalid"},
	{"*", "*", "overwrite", "*", "no", "*", "*", "invalid"},
	{"none", "*", "*", "*", "*", "*", "*", "best effort"},
	{"*", "deliver-ack", "*", "*", "*", "*", "*", "at least once"},
	{"exact", "stage-and-apply", "*", "*", "*", "*", "*", "exactly once"},
	{"exact", "transactional", "*", "*", "*", "*", "*", "exactly once"},
	{"superset", "stage-and-apply", "merge", "yes", "yes", "*", "*", "effectively once"},
	{"superset", "*", "append", "*", "*", "yes", "effectively once", "exactly once"},
	{"superset", "*", "append", "*", "*", "yes", "exactly once", "exactly once"},
	{"superset", "*", "overwrite", "*", "*", "yes", "effectively once", "exactly once"},
	{"superset", "*", "overwrite", "*", "*", "yes", "exactly once", "exactly once"},
	{"superset", "*", "*", "*", "*", "*", "*", "at least once"},
}

func yesno(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func match(pat, v string) bool { return pat == "*" || pat == v }

func expect(replay source.Replay, class sink.Class, mode delivery.Mode, key, declared, skip bool, required delivery.Level) string {
	for _, r := range rules {
		if match(r.replay, replay.String()) && match(r.class, class.String()) && match(r.mode, mode.String()) &&
			match(r.key, yesno(key)) && match(r.declared, yesno(declared)) && match(r.skipByID, yesno(skip)) &&
			match(r.required, required.String()) {
			return r.want
		}
	}
	return "no rule"
}

// TestDecideEveryCombination covers destination class × replay class ×
// write mode × primary key × the mode declared or not × skip capability
// × required level.
func TestDecideEveryCombination(t *testing.T) {
	n := 0
	for _, replay := range []source.Replay{source.ReplayNone, source.ReplaySuperset, source.ReplayExact} {
		for _, class := range []sink.Class{sink.DeliverAck, sink.StageAndApply, sink.Transactional} {
			for _, mode := range []delivery.Mode{delivery.Append, delivery.Merge, delivery.Overwrite} {
				for _, key := range []bool{false, true} {
					for _, declared := range []bool{false, true} {
						for _, skip := range []bool{false, true} {
							for _, req := range []delivery.Level{delivery.BestEffort, delivery.AtLeastOnce, delivery.EffectivelyOnce, delivery.ExactlyOnce} {
								n++
								s := delivery.Stream{Name: "t", Replay: replay, Class: class, Mode: mode, HasKey: key,
									Capabilities: sink.Capabilities{Merge: declared, Overwrite: declared, SkipByID: skip}}
								want := expect(replay, class, mode, key, declared, skip, req)
								name := fmt.Sprintf("%v/%v/%v/key=%v/declared=%v/skip=%v/req=%v", replay, class, mode, key, declared, skip, req)
								g, err := delivery.Decide(s, req)
								if want == "invalid" {
									if !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), `"t"`) {
										t.Errorf("%s: want ErrInvalid naming the stream, got %v (%v)", name, g.Level, err)
									}
									continue
								}
								if err != nil || g.Level.String() != want || g.Reason == "" || g.Stream != "t" {
									t.Errorf("%s: got %v (%q) %v, want %s", name, g.Level, g.Reason, err, want)
								}
								_, cerr := delivery.Check([]delivery.Stream{s}, req)
								if unmet := g.Level < req; unmet != errors.Is(cerr, delivery.ErrUnmet) {
									t.Errorf("%s: Check error %v, want unmet=%v", name, cerr, unmet)
								}
							}
						}
					}
				}
			}
		}
	}
	if n != 3*3*3*2*2*2*4 {
		t.Fatalf("covered %d combinations", n)
	}
}

// TestDecideDeletes: hard deletes need a destination that declares
// them; soft deletes any that merges; an unknown handling is invalid.
func TestDecideDeletes(t *testing.T) {
	for _, c := range []struct {
		caps    sink.Capabilities
		deletes sink.Deletes
		want    string // "" for valid
	}{
		{sink.Capabilities{Merge: true}, sink.SoftDeletes, ""},
		{sink.Capabilities{Merge: true}, sink.HardDeletes, `stream "t": hard deletes requested, but the destination keeps a deleted key's row`},
		{sink.Capabilities{Merge: true, HardDeletes: true}, sink.HardDeletes, ""},
		{sink.Capabilities{Merge: true, HardDeletes: true}, sink.Deletes(7), `stream "t": unknown delete handling`},
	} {
		s := delivery.Stream{Name: "t", Replay: source.ReplayExact, Class: sink.StageAndApply, Mode: delivery.Merge, HasKey: true,
			Capabilities: c.caps, Deletes: c.deletes}
		_, err := delivery.Decide(s, delivery.ExactlyOnce)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v, %v deletes: %v", c.caps, c.deletes, err)
		case c.want != "" && (!errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v, %v deletes: %v, want ErrInvalid saying %s", c.caps, c.deletes, err, c.want)
		}
		// Append and overwrite write a delete as a row: their Deletes
		// is ignored.
		s.Mode, s.Capabilities.Overwrite = delivery.Append, true
		if _, err := delivery.Decide(s, delivery.ExactlyOnce); err != nil && c.deletes <= sink.HardDeletes {
			t.Errorf("append with %v deletes: %v", c.deletes, err)
		}
	}
}

func TestCheckNamesEveryFailingStream(t *testing.T) {
	streams := []delivery.Stream{
		{Name: "orders", Replay: source.ReplayExact, Class: sink.StageAndApply},
		{Name: "events", Replay: source.ReplaySuperset, Class: sink.StageAndApply},
		{Name: "clicks", Replay: source.ReplayExact, Class: sink.DeliverAck},
		{Name: "users", Replay: source.ReplayExact, Class: sink.StageAndApply, Mode: delivery.Merge},
	}
	gs, err := delivery.Check(streams, delivery.ExactlyOnce)
	if len(gs) != 3 || gs[0].Level != delivery.ExactlyOnce {
		t.Fatalf("guarantees %+v", gs)
	}
	for _, want := range []string{`"events" gets at least once`, `"clicks" gets at least once`, `"users": merge needs a primary key`, "deliver-and-acknowledge"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check error %v: want it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"orders"`) {
		t.Errorf("Check error names a stream that meets the level: %v", err)
	}
}
