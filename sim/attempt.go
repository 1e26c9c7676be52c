package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/sourcetest"
)

// none is the "no after-effect fault" answer of attempt.hook.
const none action = 255

var (
	errInjected = errors.New("sim: injected fault")
	errCrashed  = errors.New("sim: attempt crashed")
)

// attempt is one Sync or Run of the pipeline with its own views of the
// fakes and the store, its fault plan, and a dead flag: once it crashed,
// every view refuses every call, so the attempt has no further effect.
type attempt struct {
	n    int
	plan attemptPlan
	s    *sim

	ctx    context.Context
	cancel context.CancelFunc
	dead   atomic.Bool
	once   sync.Once

	counts [numAllPoints]atomic.Int64

	// onRecover, when set, is called once before the attempt's first
	// destination Recover.
	onRecover     func()
	onRecoverOnce sync.Once

	stalled   chan struct{} // closed when a stall fault fires
	stallOnce sync.Once
	release   chan struct{} // closed to let a stalled attempt go on
	relOnce   sync.Once
	done      chan struct{} // closed when the runner returned

	src     *sourcetest.FakeSource
	dst     sink.Destination
	killDst func()
	store   *attemptStore

	err error
	res runner.Result
}

func (s *sim) newAttempt(n int, plan attemptPlan) (*attempt, error) {
	a := &attempt{n: n, plan: plan, s: s, stalled: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	a.src = s.src.WithControl(a.sourceControl)
	var err error
	if a.dst, a.killDst, err = s.dst.view(a); err != nil {
		return nil, err
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.store = &attemptStore{s: s.store, a: a}
	return a, nil
}

func (a *attempt) logf(format string, args ...any) {
	a.s.logf("attempt %d: "+format, append([]any{a.n}, args...)...)
}

// kill crashes the attempt: from now on none of its calls has an effect.
func (a *attempt) kill(why string) {
	a.once.Do(func() {
		a.dead.Store(true)
		a.logf("CRASH (%s): the attempt's process is gone", why)
		a.src.Kill()
		a.killDst()
		a.cancel()
	})
}

func (a *attempt) letGo() { a.relOnce.Do(func() { close(a.release) }) }

// hook is called before every call the attempt makes to a fake or the
// store. It fires the faults planned for this call, and returns the
// fault to apply after the call's effect (none, errAfter or crashAfter),
// or an error to return without effect.
func (a *attempt) hook(ctx context.Context, p point, detail string) (action, error) {
	if a.dead.Load() {
		return none, errCrashed
	}
	if p == pDstRecover && a.onRecover != nil {
		a.onRecoverOnce.Do(a.onRecover)
	}
	n := int(a.counts[p].Add(1))
	after := none
	for _, f := range a.plan.faults {
		if f.at != p || n < f.nth || n >= f.nth+max(f.times, 1) {
			continue
		}
		if detail != "" {
			a.logf("fault fired: %v (%s)", f, detail)
		} else {
			a.logf("fault fired: %v", f)
		}
		switch f.act {
		case errBefore:
			return none, fmt.Errorf("%w at %v", errInjected, p)
		case errAfter:
			after = errAfter
		case crashBefore:
			a.kill(f.reason)
			return none, errCrashed
		case crashAfter:
			after = crashAfter
		case slow:
			time.Sleep(f.delay)
		case stall:
			a.stallOnce.Do(func() { close(a.stalled) })
			<-a.release // a paused process ignores its context
			a.logf("released: running on as a zombie")
		}
	}
	if a.dead.Load() {
		return none, errCrashed
	}
	return after, nil
}

var srcPoints = map[sourcetest.FakeSourceOp]point{
	sourcetest.FakeDiscover: pSrcDiscover, sourcetest.FakeOpen: pSrcOpen, sourcetest.FakeRead: pSrcRead,
	sourcetest.FakeResumePoint: pSrcResume, sourcetest.FakeAck: pSrcAck,
}

func (a *attempt) sourceControl(ctx context.Context, c sourcetest.FakeSourceCall) error {
	detail := ""
	if c.Op == sourcetest.FakeRead {
		detail = fmt.Sprintf("split %s record %d", c.Split, c.Index)
	}
	after, err := a.hook(ctx, srcPoints[c.Op], detail)
	if err != nil {
		return err
	}
	switch after {
	case errAfter:
		return errInjected
	case crashAfter:
		a.kill("crash at source call")
		return errCrashed
	}
	return nil
}

var dstPoints = map[sinktest.FakeDestOp]point{
	sinktest.FakeWrite: pDstWrite, sinktest.FakePreCommit: pDstPreCommit, sinktest.FakeCommit: pDstCommit,
	sinktest.FakeRecover: pDstRecover, sinktest.FakeClose: pDstClose, sinktest.FakeFinish: pDstFinish,
}

func (a *attempt) destControl(ctx context.Context, c sinktest.FakeDestCall) error {
	detail := ""
	switch c.Op {
	case sinktest.FakeWrite:
		detail = fmt.Sprintf("lane %d stream %s, %d rows", c.Lane, c.Stream, c.Rows)
	case sinktest.FakePreCommit:
		detail = fmt.Sprintf("lane %d epoch %d", c.Lane, c.Epoch)
	case sinktest.FakeCommit:
		detail = fmt.Sprintf("epoch %d gen %d", c.Epoch, c.Gen)
	case sinktest.FakeRecover:
		detail = fmt.Sprintf("gen %d, HEAD epoch %d", c.Gen, c.Epoch)
	case sinktest.FakeFinish:
		detail = fmt.Sprintf("epoch %d gen %d", c.Epoch, c.Gen)
	}
	after, err := a.hook(ctx, dstPoints[c.Op], detail)
	if err != nil {
		return err
	}
	switch after {
	case errAfter:
		return &sinktest.FakeFault{After: true, Err: errInjected}
	case crashAfter:
		a.kill("crash right after a destination call took effect")
		return &sinktest.FakeFault{After: true, Crash: true, Err: errCrashed}
	}
	return nil
}

// start runs the attempt on a goroutine of its own.
func (a *attempt) start() {
	s := a.s
	w := s.w
	cfg := runner.Config{
		Name: pipelineName, Source: a.src, Destination: a.dst, Store: a.store,
		Required: w.required, Modes: w.modes, Transforms: w.transformsConfig(), Filters: w.filtersConfig(), Routes: w.routes, Lanes: w.lanes, EngineWorkers: w.engineWorkers, BatchRows: w.batchRows,
		EpochInterval: w.epochInterval, EpochBytes: w.epochBytes,
		CommitRetries: w.commitRetries, CommitBackoff: time.Millisecond, StopTimeout: 5 * time.Second,
		Logger: s.opts.Logger, NewEngine: s.opts.NewEngine,
	}
	kind := "sync"
	if a.plan.run {
		kind = fmt.Sprintf("run for %v", a.plan.runFor)
	}
	if a.plan.earlyRelease && a.plan.stalls() {
		kind += "; if it stalls, it goes on as the next attempt recovers"
	}
	a.logf("starting (%s), faults %v", kind, a.plan.faults)
	go func() {
		defer close(a.done)
		if a.plan.run {
			t := time.AfterFunc(a.plan.runFor, a.cancel) // a clean stop
			a.err = runner.Run(a.ctx, cfg)
			t.Stop()
		} else {
			a.res, a.err = runner.Sync(a.ctx, cfg)
		}
		state := "ok"
		switch {
		case a.dead.Load():
			state = "crashed"
		case a.err != nil:
			state = "failed"
		}
		a.logf("ended %s: epoch %d, %d epochs committed, err=%v", state, a.res.Epoch, a.res.Epochs, a.err)
	}()
}

// wait waits for the attempt to return, up to the attempt timeout.
func (a *attempt) wait() bool {
	t := time.NewTimer(a.s.opts.AttemptTimeout)
	defer t.Stop()
	select {
	case <-a.done:
		return true
	case <-t.C:
		return false
	}
}
