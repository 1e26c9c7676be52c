package sourcetest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// forwarder wraps a source, its splits and their Emitters, forwarding
// every optional capability (with bug "", as a wrapper should) or not.
type forwarder struct {
	source.Source
	bug string
}

func (w *forwarder) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := w.Source.Open(ctx, streams, resume)
	for i, sp := range splits {
		switch w.bug {
		case "embeds-only":
			splits[i] = &embedSplit{sp}
		default:
			splits[i] = &fwdSplit{Split: sp, bug: w.bug}
		}
	}
	return splits, err
}

func (w *forwarder) Ack(ctx context.Context, states map[source.SplitID][]byte) error {
	if a, ok := w.Source.(source.Acker); ok {
		return a.Ack(ctx, states)
	}
	return nil
}

func (w *forwarder) Permanent(err error) bool {
	c, ok := w.Source.(source.Classifier)
	return ok && c.Permanent(err)
}

func (w *forwarder) Resnapshot(ctx context.Context, stream string) error {
	if r, ok := w.Source.(source.Resnapshotter); ok && w.bug != "resnapshot-nil" {
		return r.Resnapshot(ctx, stream)
	}
	if w.bug == "resnapshot-nil" {
		return nil // claims a re-snapshot nobody will read
	}
	return fmt.Errorf("re-snapshot of %q: %w", stream, errors.ErrUnsupported)
}

func (w *forwarder) Shard(index, count int) (source.Source, error) {
	sh, ok := w.Source.(source.Sharder)
	if !ok || w.bug == "shard-unsupported" {
		return nil, fmt.Errorf("shard %d of %d: %w", index, count, source.ErrUnshardable)
	}
	src, err := sh.Shard(index, count)
	if err != nil {
		return nil, err
	}
	return &forwarder{Source: src, bug: w.bug}, nil
}

func (w *forwarder) Close(ctx context.Context) error {
	if c, ok := w.Source.(source.Closer); ok {
		return c.Close(ctx)
	}
	return nil
}

// embedSplit forwards nothing but the required methods.
type embedSplit struct{ source.Split }

type fwdSplit struct {
	source.Split
	bug string
}

func (sp *fwdSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if sp.bug == "drops-notices" {
		return sp.Split.Read(ctx, struct{ source.Emitter }{e}, bounded)
	}
	return sp.Split.Read(ctx, &fwdEmitter{e}, bounded)
}

func (sp *fwdSplit) Lag() (int64, string, time.Duration, bool) {
	if r, ok := sp.Split.(source.LagReporter); ok {
		return r.Lag()
	}
	return 0, "", 0, false
}

func (sp *fwdSplit) SnapshotProgress() (string, int64, int64, bool) {
	if r, ok := sp.Split.(source.SnapshotReporter); ok {
		return r.SnapshotProgress()
	}
	return "", 0, 0, false
}

func (sp *fwdSplit) Paused() (bool, time.Time, bool) {
	if r, ok := sp.Split.(source.PauseReporter); ok {
		return r.Paused()
	}
	return false, time.Time{}, sp.bug == "claims-paused-known"
}

type fwdEmitter struct{ source.Emitter }

func (e *fwdEmitter) Report(n source.Notice) {
	if r, ok := e.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

const envWrapperBug = "SOURCETEST_WRAPPER_BUG"

// TestBrokenWrapper runs CheckWrapper against forwarder with the bug
// named by $SOURCETEST_WRAPPER_BUG; TestCheckWrapperFails runs it in a
// child process.
func TestBrokenWrapper(t *testing.T) {
	bug, ok := os.LookupEnv(envWrapperBug)
	if !ok {
		t.Skip("run by TestCheckWrapperFails in a child process")
	}
	sourcetest.CheckWrapper(t, func(src source.Source) source.Source { return &forwarder{Source: src, bug: bug} })
}

// CheckWrapper passes a wrapper that forwards every capability and fails
// one that forgets some, in the subtest that covers it.
func TestCheckWrapperFails(t *testing.T) {
	if _, ok := os.LookupEnv(envWrapperBug); ok {
		t.Skip("in the child process")
	}
	for _, c := range []struct {
		bug  string
		want []string
	}{
		{"", nil},
		{"embeds-only", []string{"Full"}},
		{"drops-notices", []string{"Full"}},
		{"claims-paused-known", []string{"Bare"}},
		{"resnapshot-nil", []string{"Full", "Bare"}},
		{"shard-unsupported", []string{"Full"}},
	} {
		name := c.bug
		if name == "" {
			name = "correct"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testutil.SuiteVerdict(t, "TestBrokenWrapper", envWrapperBug+"="+c.bug, c.want, false)
		})
	}
}
