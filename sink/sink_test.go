package sink_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

func TestCheckAhead(t *testing.T) {
	head := &checkpoint.Record{Pipeline: "p", Epoch: 4, Generation: 2}
	for _, c := range []struct {
		name             string
		epoch            uint64
		applied, claimed checkpoint.Generation
		head             *checkpoint.Record
		ahead, fenced    bool
	}{
		{"nothing applied, no record", 0, 0, 1, nil, false, false},
		{"rolled back to epoch 0, no record", 0, 3, 3, nil, false, false},
		{"applied up to head", 4, 2, 3, head, false, false},
		{"applied before head", 3, 2, 3, head, false, false},
		{"applied, log empty", 1, 1, 1, nil, true, false},
		{"applied after head", 5, 2, 3, head, true, false},
		{"applied by a newer generation", 5, 4, 3, head, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := sink.CheckAhead("p", "table t", c.epoch, c.applied, c.claimed, c.head)
			if got := errors.Is(err, sink.ErrAhead); got != c.ahead {
				t.Errorf("CheckAhead = %v: errors.Is ErrAhead = %v, want %v", err, got, c.ahead)
			}
			if got := errors.Is(err, sink.ErrFenced); got != c.fenced {
				t.Errorf("CheckAhead = %v: errors.Is ErrFenced = %v, want %v", err, got, c.fenced)
			}
			if !c.ahead {
				return
			}
			var ae *sink.AheadError
			if !errors.As(err, &ae) || ae.Pipeline != "p" || ae.Where != "table t" || ae.Epoch != c.epoch || ae.Claimed != c.claimed {
				t.Fatalf("CheckAhead = %#v, want an *AheadError with the arguments", err)
			}
			for _, want := range []string{`pipeline "p"`, "table t", "holds epoch", "restore", "start over"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}

// TestWrapperDroppingFinish: Finish is part of sink.Writer, so a wrapper
// that forwards every other method but forgets Finish (which silently
// left grouped and overwrite commits unfinished while Finish was an
// optional interface) does not compile.
func TestWrapperDroppingFinish(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "vet", "./testdata/dropfinish").CombinedOutput()
	if err == nil {
		t.Fatal("a Writer wrapper without Finish compiled")
	}
	if !strings.Contains(string(out), "missing method Finish") {
		t.Fatalf("building a Writer wrapper without Finish failed, but not for the missing Finish:\n%s", out)
	}
}
