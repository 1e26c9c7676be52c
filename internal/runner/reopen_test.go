package runner_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openetl/etl/source"
)

// TestReopenStartsANewAttempt: a split's error wrapping source.ErrReopen
// ends the attempt and the sync goes on in a new one, which reads what
// the first didn't commit: every record lands exactly once, and the
// Result counts both attempts.
func TestReopenStartsANewAttempt(t *testing.T) {
	f := newFixture(t, 4, 400)
	f.src.failStream, f.src.failAt, f.src.failOnce = "s2", 150, true
	f.src.failErr = fmt.Errorf("a column appeared: %w", source.ErrReopen)
	cfg := f.config(2)
	cfg.EpochInterval = time.Millisecond
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatalf("sync over a reopen: %v", err)
	}
	if res.Generation != 2 {
		t.Errorf("generation %d, want 2 (a second attempt)", res.Generation)
	}
	var written int64
	for _, c := range res.Streams {
		written += c.Written
	}
	if written < 4*400 {
		t.Errorf("the result counts %d written rows over both attempts, want at least the 1600 records", written)
	}
	f.checkExactlyOnce(t)
	f.checkLog(t)
	checkNoRunnerGoroutines(t)
}

// TestReopenGivesUp: a source that asks to reopen again and again
// without an epoch committed in between gets its error returned after
// a bounded number of new attempts.
func TestReopenGivesUp(t *testing.T) {
	f := newFixture(t, 1, 100)
	f.src.failStream, f.src.failAt = "s0", 0
	f.src.failErr = fmt.Errorf("stuck: %w", source.ErrReopen)
	res, err := syncWithin(t, f.config(1))
	if !errors.Is(err, source.ErrReopen) {
		t.Fatalf("want the reopen error after the retries, got %v", err)
	}
	if res.Generation != 4 {
		t.Errorf("generation %d, want 4 (the first attempt and 3 reopens)", res.Generation)
	}
	checkNoRunnerGoroutines(t)
}
