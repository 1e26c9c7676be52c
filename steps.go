package etl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"

	"github.com/openetl/etl/internal/runner"
)

// AfterSync adds a step that runs after every Sync that read to the
// source's end and committed, such as `dbt build` over the tables the
// Sync loaded (see Command). Steps run in the order added, in Sync's
// goroutine with its context, and get its Result; each runs also after
// a Sync that copied nothing new (Result.Epochs 0), so a step that failed
// runs again on the next Sync. A step that fails fails the Sync with a
// *StepError that names it, and the steps after it don't run; what the
// Sync copied stays committed (the checkpoint holds, so the next Sync
// doesn't copy it again). Cancelling the Sync's context while a step
// runs cancels the step's context.
//
// Run never runs the steps: a continuous pipeline has no end to run them
// after. A host that runs one schedules its transformations itself, for
// instance on EventEpochCommitted.
//
// Each step reports EventStepStarted and EventStepSucceeded or
// EventStepFailed, and Status is in PhaseSteps while one runs. Build
// fails when name is empty or repeated or step is nil.
func (b *Builder) AfterSync(name string, step func(ctx context.Context, res Result) error) *Builder {
	pipeline := b.cfg.Name
	var run func(context.Context, runner.Result) error
	if step != nil {
		run = func(ctx context.Context, res runner.Result) error {
			err := step(ctx, Result(res))
			if err == nil {
				return nil
			}
			se := &StepError{Pipeline: pipeline, Step: name, Epoch: res.Epoch, Err: err}
			var out *outputError
			if errors.As(err, &out) {
				se.Output, se.Err = out.output, out.err
			}
			if ctx.Err() != nil && !errors.Is(se.Err, context.Cause(ctx)) {
				// A command killed by the cancellation fails with its
				// signal; the host's restart loop needs to see why.
				se.Err = fmt.Errorf("%w: %w", context.Cause(ctx), se.Err)
			}
			return se
		}
	}
	b.cfg.Steps = append(b.cfg.Steps, runner.Step{Name: name, Run: run})
	return b
}

// StepError is the error of a Sync whose after-sync step (AfterSync)
// failed. Everything the Sync copied is committed (the Sync's Result
// says what); only the step failed.
//
// IsPermanent is false for it unless the step's own error says so (an
// error in Err's chain with a method Permanent() bool returning true),
// and IsRetryable true unless the Sync's context was cancelled: a
// failed transformation is no reason to stop loading, and running Sync
// again, which copies nothing new, runs the step again. A host that
// wants to tell a failed step from a failed copy asks errors.As.
type StepError struct {
	Pipeline string
	// Step is the step's name, as given to AfterSync.
	Step string
	// Epoch is the last committed epoch when the step ran.
	Epoch uint64
	// Output is what a Command step printed, stdout and stderr
	// interleaved, up to its last 64 KiB; empty for other steps.
	Output string
	// Err is the step's error; for a Command step that exited non-zero,
	// an *exec.ExitError.
	Err error
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("etl: pipeline %q: after-sync step %q failed (the sync committed up to epoch %d; the step runs again on the next sync): %v",
		e.Pipeline, e.Step, e.Epoch, e.Err)
	if tail := lastLines(e.Output, 12, 2048); tail != "" {
		msg += "; output ends:\n" + tail
	}
	return runner.RedactSecrets(msg)
}

func (e *StepError) Unwrap() error { return e.Err }

// Command returns an AfterSync step that runs the command newCmd makes,
// a new one for each run (an exec.Cmd runs once). Make it with
// exec.CommandContext(ctx, ...) so that cancelling the Sync stops it;
// set its Dir and Env as the program needs. What it prints to stdout
// and stderr is kept, up to the last 64 KiB, and also goes wherever
// newCmd pointed Stdout and Stderr. When it exits non-zero the Sync
// fails with a *StepError whose Output holds what it printed and whose
// Err is the *exec.ExitError. A nil command fails the step.
func Command(newCmd func(ctx context.Context, res Result) *exec.Cmd) func(context.Context, Result) error {
	return func(ctx context.Context, res Result) error {
		cmd := newCmd(ctx, res)
		if cmd == nil {
			return errors.New("the command func returned nil")
		}
		out := &tailBuffer{max: 64 << 10}
		if stdout, stderr := cmd.Stdout, cmd.Stderr; sameWriter(stdout, stderr) {
			// One writer for both, as exec would see it: one pipe, and
			// the output in the order the program wrote it.
			w := teeTo(stdout, out)
			cmd.Stdout, cmd.Stderr = w, w
		} else {
			cmd.Stdout, cmd.Stderr = teeTo(stdout, out), teeTo(stderr, out)
		}
		if err := cmd.Run(); err != nil {
			return &outputError{err: err, output: out.String()}
		}
		return nil
	}
}

// teeTo writes to buf, and to w too when it is set.
func teeTo(w io.Writer, buf *tailBuffer) io.Writer {
	if w == nil {
		return buf
	}
	return io.MultiWriter(w, buf)
}

// sameWriter reports whether a and b are the same writer (both nil
// included), without panicking on writers that are not comparable.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// outputError carries a Command step's output to its StepError.
type outputError struct {
	err    error
	output string
}

func (e *outputError) Error() string { return e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

// tailBuffer keeps the last max bytes written to it. Safe for
// concurrent use: exec copies stdout and stderr from two goroutines
// when they are different writers.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lastLines returns the last n non-empty lines of s, at most max bytes
// of them, for an error message.
func lastLines(s string, n, max int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	var keep []string
	size := 0
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		l := strings.TrimRight(lines[i], "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		if size+len(l) > max {
			break
		}
		size += len(l) + 1
		keep = append(keep, l)
	}
	var b bytes.Buffer
	for i := len(keep) - 1; i >= 0; i-- {
		b.WriteString(keep[i])
		if i > 0 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
