package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/openetl/etl/checkpoint"
)

// HeadTransition is one move of a pipeline's HEAD, as the store wrapper
// saw it land (including writes whose response the simulation then lost).
type HeadTransition struct {
	Attempt int
	Op      string // "claim", "commit" or "rewind"
	Gen     checkpoint.Generation
	// Ref is the record HEAD points at afterwards; nil for none.
	Ref *checkpoint.Ref
}

func (t HeadTransition) String() string {
	ref := "none"
	if t.Ref != nil {
		ref = fmt.Sprintf("epoch %d (gen %d)", t.Ref.Epoch, t.Ref.Generation)
	}
	return fmt.Sprintf("HEAD %s by attempt %d: gen %d → %s", t.Op, t.Attempt, t.Gen, ref)
}

// simStore is the checkpoint store shared by every attempt: the memory
// store, with every HEAD write serialized so the log of transitions is in
// the order they landed.
type simStore struct {
	inner checkpoint.Store
	mu    sync.Mutex
	trans []HeadTransition
	// onRewind is called (holding mu) before a rewind lands, with the
	// epoch HEAD points at.
	onRewind func(a *attempt, from *checkpoint.Ref)
	// onRewound is called (holding mu) after a rewind landed, with the
	// record HEAD points at now (nil: none).
	onRewound func(a *attempt, to *checkpoint.Ref)
}

func (s *simStore) head() *checkpoint.Ref {
	for i := len(s.trans) - 1; i >= 0; i-- {
		return s.trans[i].Ref
	}
	return nil
}

func (s *simStore) transitions() []HeadTransition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]HeadTransition(nil), s.trans...)
}

// attemptStore is one attempt's view of the store: it injects the
// attempt's faults and refuses every call once the attempt crashed.
type attemptStore struct {
	s *simStore
	a *attempt
}

var (
	_ checkpoint.Store       = (*attemptStore)(nil)
	_ checkpoint.FileDeleter = (*attemptStore)(nil)
	_ checkpoint.FileLister  = (*attemptStore)(nil)
)

// finish applies an after-effect fault to a call that took effect.
func (w *attemptStore) finish(after action, err error) error {
	if err != nil || after == none {
		return err
	}
	switch after {
	case errAfter:
		return errInjected
	case crashAfter:
		w.a.kill("crash after store call")
		return errCrashed
	}
	return nil
}

func (w *attemptStore) Claim(ctx context.Context, pipeline string) (checkpoint.Generation, *checkpoint.Record, error) {
	after, err := w.a.hook(ctx, pStoreClaim, "")
	if err != nil {
		return 0, nil, err
	}
	w.s.mu.Lock()
	gen, rec, err := w.s.inner.Claim(ctx, pipeline)
	if err == nil {
		var ref *checkpoint.Ref
		if rec != nil {
			r := rec.Ref()
			ref = &r
		}
		w.s.trans = append(w.s.trans, HeadTransition{Attempt: w.a.n, Op: "claim", Gen: gen, Ref: ref})
	}
	w.s.mu.Unlock()
	if err == nil {
		w.a.logf("claimed generation %d, HEAD at epoch %d", gen, epochOf(rec))
	}
	if err := w.finish(after, err); err != nil {
		return 0, nil, err
	}
	return gen, rec, nil
}

func (w *attemptStore) Commit(ctx context.Context, gen checkpoint.Generation, rec *checkpoint.Record) error {
	after, err := w.a.hook(ctx, pStoreCommit, fmt.Sprintf("epoch %d", rec.Epoch))
	if err != nil {
		return err
	}
	w.s.mu.Lock()
	err = w.s.inner.Commit(ctx, gen, rec)
	if err == nil {
		r := rec.Ref()
		// A retried Commit that already landed moves nothing.
		if cur := w.s.head(); cur == nil || *cur != r {
			w.s.trans = append(w.s.trans, HeadTransition{Attempt: w.a.n, Op: "commit", Gen: gen, Ref: &r})
		}
	}
	w.s.mu.Unlock()
	return w.finish(after, err)
}

func (w *attemptStore) Head(ctx context.Context, pipeline string) (checkpoint.Generation, *checkpoint.Record, error) {
	after, err := w.a.hook(ctx, pStoreGet, "head")
	if err != nil {
		return 0, nil, err
	}
	gen, rec, err := w.s.inner.Head(ctx, pipeline)
	if err := w.finish(after, err); err != nil {
		return 0, nil, err
	}
	return gen, rec, nil
}

func (w *attemptStore) Get(ctx context.Context, pipeline string, ref checkpoint.Ref) (*checkpoint.Record, error) {
	after, err := w.a.hook(ctx, pStoreGet, "")
	if err != nil {
		return nil, err
	}
	rec, err := w.s.inner.Get(ctx, pipeline, ref)
	if err := w.finish(after, err); err != nil {
		return nil, err
	}
	return rec, nil
}

func (w *attemptStore) Rewind(ctx context.Context, pipeline string, gen checkpoint.Generation, to checkpoint.Ref) error {
	after, err := w.a.hook(ctx, pStoreRewind, fmt.Sprintf("to epoch %d", to.Epoch))
	if err != nil {
		return err
	}
	w.s.mu.Lock()
	from := w.s.head()
	if w.s.onRewind != nil {
		w.s.onRewind(w.a, from)
	}
	err = w.s.inner.Rewind(ctx, pipeline, gen, to)
	if err == nil {
		var ref *checkpoint.Ref
		if to != (checkpoint.Ref{}) {
			r := to
			ref = &r
		}
		if cur := w.s.head(); !sameRef(cur, ref) {
			w.s.trans = append(w.s.trans, HeadTransition{Attempt: w.a.n, Op: "rewind", Gen: gen, Ref: ref})
		}
		if w.s.onRewound != nil {
			w.s.onRewound(w.a, ref)
		}
	}
	w.s.mu.Unlock()
	return w.finish(after, err)
}

func (w *attemptStore) WriteFile(ctx context.Context, pipeline, name string, data []byte) error {
	after, err := w.a.hook(ctx, pStoreWriteFile, name)
	if err != nil {
		return err
	}
	return w.finish(after, w.s.inner.WriteFile(ctx, pipeline, name, data))
}

func (w *attemptStore) ReadFile(ctx context.Context, pipeline, name string) ([]byte, error) {
	after, err := w.a.hook(ctx, pStoreReadFile, name)
	if err != nil {
		return nil, err
	}
	b, err := w.s.inner.ReadFile(ctx, pipeline, name)
	if err := w.finish(after, err); err != nil {
		return nil, err
	}
	return b, nil
}

// DeleteFile implements checkpoint.FileDeleter when the shared store does.
func (w *attemptStore) DeleteFile(ctx context.Context, pipeline, name string) error {
	d, ok := w.s.inner.(checkpoint.FileDeleter)
	if !ok {
		return fmt.Errorf("sim: the store can't delete: %w", errors.ErrUnsupported)
	}
	after, err := w.a.hook(ctx, pStoreDeleteFile, name)
	if err != nil {
		return err
	}
	return w.finish(after, d.DeleteFile(ctx, pipeline, name))
}

// ListFiles lists the side files of the shared store; a crashed
// attempt's call fails.
func (w *attemptStore) ListFiles(ctx context.Context, pipeline, prefix string) ([]string, error) {
	l, ok := w.s.inner.(checkpoint.FileLister)
	if !ok {
		return nil, fmt.Errorf("sim: the store can't list: %w", errors.ErrUnsupported)
	}
	if w.a.dead.Load() {
		return nil, errCrashed
	}
	return l.ListFiles(ctx, pipeline, prefix)
}

// Close does nothing: the store outlives attempts.
func (w *attemptStore) Close(context.Context) error { return nil }

func sameRef(a, b *checkpoint.Ref) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func epochOf(r *checkpoint.Record) uint64 {
	if r == nil {
		return 0
	}
	return r.Epoch
}

// epochWrote reports whether the record of epoch by gen counts a written
// row (true when it can't tell: the record is missing).
func (s *sim) epochWrote(epoch uint64, gen checkpoint.Generation) bool {
	rec, err := s.store.inner.Get(context.Background(), pipelineName, checkpoint.Ref{Epoch: epoch, Generation: gen})
	if err != nil {
		return true
	}
	for _, c := range rec.Counts {
		if c.Written > 0 {
			return true
		}
	}
	return false
}
