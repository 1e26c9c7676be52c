package testutil

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openetl/etl/source"
)

// Kill tests run a pipeline in a child process and SIGKILL it part way.
// A kill timed by the clock alone misses on a fast machine: the child has
// finished before the kill lands. These helpers make the child wait at a
// point the parent chose, so that it cannot finish before it is killed:
// the parent starts it with StartChild and a Hold, the child wraps its
// source with HoldSource, and the parent kills at a random moment or,
// once the child reports it is held, soon after.

const (
	holdEnv   = "OPENETL_TEST_HOLD"    // "<records> <split ID regexp>"
	holdFDEnv = "OPENETL_TEST_HOLD_FD" // the pipe the child reports holds on
)

// Hold says where a child started by StartChild holds: each split whose
// ID matches Splits (a regular expression; empty: every split) stops at
// its first resume point after it emitted After records in this process,
// and waits there until its Read's context ends. The runner goes on
// placing barriers for it (it sits at a resume point), so everything up
// to there commits; the sync can't end, because that split never does.
// After <= 0: no hold.
type Hold struct {
	After  int64
	Splits string
}

// A Child is a process of a kill test, with its stdout and stderr
// captured (through a pipe the test reads, so that BlockOutput can stop
// it).
type Child struct {
	Cmd    *exec.Cmd
	held   chan string
	exited chan struct{}
	err    error // Wait's, once exited is closed

	mu      sync.Mutex
	out     bytes.Buffer
	wrote   chan struct{} // a token each time output arrives
	r       *os.File      // read end of the output pipe
	fill    int           // a non-blocking write end of it, for BlockOutput
	pause   chan struct{} // non-nil while BlockOutput holds the reader
	paused  chan struct{} // the reader's answer: it stopped reading
	drained chan struct{} // closed when the reader saw EOF
}

// StartChild starts cmd (its Stdout, Stderr and ExtraFiles must be
// unset) as a child of t, asking it, through its environment, to hold as
// h says. The child is killed at the end of the test if it still runs.
func StartChild(t testing.TB, cmd *exec.Cmd, h Hold) *Child {
	t.Helper()
	c := &Child{Cmd: cmd, held: make(chan string, 16), exited: make(chan struct{}), wrote: make(chan struct{}, 1),
		drained: make(chan struct{}), paused: make(chan struct{}), fill: -1}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// A second open file description of the write end, non-blocking, for
	// BlockOutput to fill the pipe with (w itself turns blocking once the
	// child gets it).
	if c.fill, err = syscall.Open(fmt.Sprintf("/proc/self/fd/%d", w.Fd()), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err != nil {
		t.Fatalf("opening the output pipe again: %v", err)
	}
	c.r = r
	cmd.Stdout, cmd.Stderr = w, w
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	var hr, hw *os.File
	if h.After > 0 {
		if _, err := regexp.Compile(h.Splits); err != nil {
			t.Fatalf("hold: splits %q: %v", h.Splits, err)
		}
		if hr, hw, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		cmd.ExtraFiles = []*os.File{hw}
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d %s", holdEnv, h.After, h.Splits), holdFDEnv+"=3")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if hw != nil {
		hw.Close()
		go func() {
			s := bufio.NewScanner(hr)
			for s.Scan() {
				select {
				case c.held <- s.Text():
				default: // enough said
				}
			}
			hr.Close()
		}()
	}
	go c.read()
	go func() {
		c.err = cmd.Wait()
		c.mu.Lock()
		syscall.Close(c.fill)
		c.fill = -1
		c.mu.Unlock()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			c.Kill()
		}
	})
	return c
}

// read copies the child's output into c.out until EOF, pausing while
// BlockOutput holds it.
func (c *Child) read() {
	defer close(c.drained)
	defer c.r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.r.Read(buf)
		c.mu.Lock()
		// Bytes BlockOutput wrote are zeros; the children write text.
		c.out.Write(bytes.ReplaceAll(buf[:n], []byte{0}, nil))
		pause := c.pause
		c.mu.Unlock()
		if n > 0 {
			select {
			case c.wrote <- struct{}{}:
			default:
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if pause != nil {
				c.paused <- struct{}{}
				<-pause
			}
			c.r.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			return
		}
	}
}

// Held receives the ID of each split that holds.
func (c *Child) Held() <-chan string { return c.held }

// Exited is closed when the child has exited; Err then tells how.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Wrote receives a token when output arrived since the last one.
func (c *Child) Wrote() <-chan struct{} { return c.wrote }

// Err is the child's exit error (nil: it exited with status 0). Call it
// after Exited is closed.
func (c *Child) Err() error { return c.err }

// Output returns what the child wrote so far (all of it once Kill or
// Wait returned).
func (c *Child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// Wait waits for the child to exit on its own and for its output.
func (c *Child) Wait() error {
	<-c.exited
	c.unblock()
	<-c.drained
	return c.err
}

// Kill SIGKILLs the child unless it exited already, waits for it and its
// output, and reports whether the signal ended it.
func (c *Child) Kill() (killed bool) {
	c.Cmd.Process.Signal(syscall.SIGKILL)
	c.Wait()
	st, ok := c.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && st.Signaled() && st.Signal() == syscall.SIGKILL
}

// BlockOutput makes the child's next write to its stdout or stderr block
// until it is killed: the test stops reading the pipe and fills it. A
// program that reports progress synchronously (as the quickstart does,
// from OnProgress, which runs on the runner's coordinator) is held at its
// next report, and can't print its summary and exit.
func (c *Child) BlockOutput() error {
	c.mu.Lock()
	if c.fill < 0 || c.pause != nil {
		c.mu.Unlock()
		return errors.New("the child has exited, or its output is blocked already")
	}
	c.pause = make(chan struct{})
	c.r.SetReadDeadline(time.Now())
	c.mu.Unlock()
	select {
	case <-c.paused:
	case <-c.drained:
		return errors.New("the child has exited")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fill < 0 {
		return errors.New("the child has exited")
	}
	// Whole pages first, then single bytes into what is left of the
	// last one: a write of at most PIPE_BUF bytes is atomic, so once a
	// single byte no longer fits, no write of the child's does.
	zeros := make([]byte, 64<<10)
	for _, size := range []int{len(zeros), 1} {
		for {
			_, err := syscall.Write(c.fill, zeros[:size])
			if err == syscall.EAGAIN {
				break
			}
			if err != nil {
				return fmt.Errorf("filling the output pipe: %w", err)
			}
		}
	}
	return nil
}

// unblock lets the reader go on after BlockOutput.
func (c *Child) unblock() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pause != nil {
		close(c.pause)
		c.pause = nil
	}
}

// HoldSource is the child's side of a Hold: it returns src wrapped to
// hold as the environment StartChild set says, or src itself when the
// process was not started with a hold. The wrapper forwards every
// optional capability of the source contract (Ack, Close, Resnapshot and Shard to src; Lag,
// SnapshotProgress and Paused to the splits; Report to the runner's
// Emitter).
func HoldSource(src source.Source) source.Source {
	spec := os.Getenv(holdEnv)
	if spec == "" {
		return src
	}
	n, pattern, _ := strings.Cut(spec, " ")
	after, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", holdEnv, spec, err))
	}
	fd, err := strconv.Atoi(os.Getenv(holdFDEnv))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", holdFDEnv, err))
	}
	return &holdSource{Source: src, after: after, match: regexp.MustCompile(pattern), report: os.NewFile(uintptr(fd), "hold")}
}

// HoldUntil is a Hold in the test's own process: it returns src wrapped
// so that each split stops at its first resume point after it emitted
// after records in a Read, and waits there until release is closed (then
// reads on) or the Read's context ends. A test uses it to keep a read
// under way, whatever the machine's speed, until something else has
// happened. The wrapper forwards what HoldSource's does.
func HoldUntil(src source.Source, after int64, release <-chan struct{}) source.Source {
	return &holdSource{Source: src, after: after, match: regexp.MustCompile(""), release: release}
}

type holdSource struct {
	source.Source
	after   int64
	match   *regexp.Regexp
	mu      sync.Mutex
	report  *os.File        // a child's: where it says it holds
	release <-chan struct{} // HoldUntil's; nil: hold until the end
}

func (s *holdSource) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.Source.Open(ctx, streams, resume)
	for i, sp := range splits {
		if s.match.MatchString(string(sp.ID())) {
			splits[i] = &holdSplit{Split: sp, s: s}
		}
	}
	return splits, err
}

func (s *holdSource) Ack(ctx context.Context, states map[source.SplitID][]byte) error {
	if a, ok := s.Source.(source.Acker); ok {
		return a.Ack(ctx, states)
	}
	return nil
}

func (s *holdSource) Permanent(err error) bool {
	c, ok := s.Source.(source.Classifier)
	return ok && c.Permanent(err)
}

func (s *holdSource) Resnapshot(ctx context.Context, stream string) error {
	if r, ok := s.Source.(source.Resnapshotter); ok {
		return r.Resnapshot(ctx, stream)
	}
	return fmt.Errorf("re-snapshot of %q: %w", stream, errors.ErrUnsupported)
}

// Shard forwards to src and holds the shard's splits as src's.
func (s *holdSource) Shard(index, count int) (source.Source, error) {
	sh, ok := s.Source.(source.Sharder)
	if !ok {
		return nil, fmt.Errorf("shard %d of %d: %w: %T can't be sharded", index, count, source.ErrUnshardable, s.Source)
	}
	src, err := sh.Shard(index, count)
	if err != nil {
		return nil, err
	}
	return &holdSource{Source: src, after: s.after, match: s.match, report: s.report, release: s.release}, nil
}

func (s *holdSource) Close(ctx context.Context) error {
	if c, ok := s.Source.(source.Closer); ok {
		return c.Close(ctx)
	}
	return nil
}

type holdSplit struct {
	source.Split
	s *holdSource
}

func (sp *holdSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	return sp.Split.Read(ctx, &holdEmitter{Emitter: e, sp: sp, ctx: ctx}, bounded)
}

func (sp *holdSplit) Lag() (behind int64, unit string, age time.Duration, ok bool) {
	if r, is := sp.Split.(source.LagReporter); is {
		return r.Lag()
	}
	return 0, "", 0, false
}

func (sp *holdSplit) SnapshotProgress() (stream string, done, estimated int64, ok bool) {
	if r, is := sp.Split.(source.SnapshotReporter); is {
		return r.SnapshotProgress()
	}
	return "", 0, 0, false
}

func (sp *holdSplit) Paused() (paused bool, since time.Time, ok bool) {
	if r, is := sp.Split.(source.PauseReporter); is {
		return r.Paused()
	}
	return false, time.Time{}, false
}

var (
	_ source.Acker            = (*holdSource)(nil)
	_ source.Classifier       = (*holdSource)(nil)
	_ source.Closer           = (*holdSource)(nil)
	_ source.Resnapshotter    = (*holdSource)(nil)
	_ source.LagReporter      = (*holdSplit)(nil)
	_ source.SnapshotReporter = (*holdSplit)(nil)
	_ source.PauseReporter    = (*holdSplit)(nil)
	_ source.Reporter         = (*holdEmitter)(nil)
)

type holdEmitter struct {
	source.Emitter
	sp  *holdSplit
	ctx context.Context
	n   int64
}

func (e *holdEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	e.n++
	return e.Emitter.Record(stream, op, seq, key, payload)
}

func (e *holdEmitter) Report(n source.Notice) {
	if r, ok := e.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

func (e *holdEmitter) ResumePoint(state []byte) error {
	if err := e.Emitter.ResumePoint(state); err != nil || e.n < e.sp.s.after {
		return err
	}
	s := e.sp.s
	if s.report != nil {
		s.mu.Lock()
		fmt.Fprintf(s.report, "%s\n", e.sp.ID())
		s.mu.Unlock()
	}
	select {
	case <-e.ctx.Done():
		return context.Cause(e.ctx)
	case <-s.release:
		return nil
	}
}
