package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Recover raises the pipeline's fence to gen and reports what became of
// head's epoch (see Writer for the steps), all in one transaction of
// Books: when it fails, nothing changed. It fails with an error wrapping
// sink.ErrFenced when a newer generation has recovered, and with a
// *sink.AheadError when the Marker holds an epoch after head's (the
// checkpoint log was lost or replaced); then it raises no fence.
func (w *Writer[T]) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if gen == 0 {
		return 0, fmt.Errorf("%s: Recover with generation 0", w.cfg.Name)
	}
	var lanes []Staged
	if head != nil {
		if head.Pipeline != "" && head.Pipeline != w.cfg.Pipeline {
			return 0, fmt.Errorf("%s: Recover of pipeline %q given a record of pipeline %q", w.cfg.Name, w.cfg.Pipeline, head.Pipeline)
		}
		cs := make([]sink.Committable, len(head.Committables))
		for i, c := range head.Committables {
			cs[i] = c
		}
		var err error
		if lanes, err = w.open(head.Epoch, cs); err != nil {
			return 0, err
		}
	}
	var out sink.Outcome
	err := w.cfg.Books.Tx(ctx, func(tx T) error {
		m, err := w.marker(ctx, tx)
		if err != nil {
			return err
		}
		// A zombie learns it is one first: a newer generation may have
		// applied epochs after this one's head.
		if err := w.fenced(m, gen); err != nil {
			return err
		}
		if err := sink.CheckAhead(w.cfg.Pipeline, w.cfg.Where, m.Epoch, m.Generation, gen, head); err != nil {
			return err
		}
		var keep []Staged
		if out, keep, err = w.outcome(ctx, tx, m, head, lanes); err != nil {
			return err
		}
		if head != nil && head.Final && m.Finished < head.Epoch && out != sink.Lost {
			// The head ended a Sync that read everything, and the process
			// died before Finish: finish it here, applying it first if
			// need be, so that this attempt starts a new read.
			if out == sink.Recoverable {
				if err := w.apply(ctx, tx, &m, head.Epoch, gen, lanes); err != nil {
					return err
				}
				out, keep = sink.Applied, nil
			}
			if err := w.finish(ctx, tx, &m, head.Epoch); err != nil {
				return err
			}
		}
		if err := w.cfg.Applier.Discard(ctx, tx, w.cfg.Pipeline, keep); err != nil {
			return fmt.Errorf("%s: pipeline %q: discard what earlier attempts staged: %w", w.cfg.Name, w.cfg.Pipeline, err)
		}
		m.Fence = gen
		return w.setMarker(ctx, tx, m)
	})
	if err != nil {
		return 0, err
	}
	w.gen.Store(uint64(gen))
	var epoch uint64
	if head != nil {
		epoch = head.Epoch
	}
	w.cfg.Logger.Info(w.cfg.Name+": recovered", "pipeline", w.cfg.Pipeline, "generation", gen, "epoch", epoch, "outcome", out.String())
	return out, nil
}

// outcome decides what head's epoch is, given the Marker m, and which
// of its lanes' staged data Commit will still need.
func (w *Writer[T]) outcome(ctx context.Context, tx T, m Marker, head *checkpoint.Record, lanes []Staged) (sink.Outcome, []Staged, error) {
	switch {
	case head == nil || m.Epoch >= head.Epoch:
		return sink.Applied, nil, nil
	case m.Epoch < head.Epoch-1:
		// The destination lost applied epochs (restored from an older
		// copy?): applying head's would skip the ones between. Lost
		// rewinds the log one record at a time down to what it has.
		w.cfg.Logger.Warn(w.cfg.Name+": the epoch before the checkpoint's is not applied: reading it again",
			"pipeline", w.cfg.Pipeline, "epoch", head.Epoch, "applied", m.Epoch)
		return sink.Lost, nil, nil
	}
	for _, s := range lanes {
		ok, err := w.cfg.Applier.Intact(ctx, tx, s)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: pipeline %q: look up lane %d's staged data of epoch %d: %w", w.cfg.Name, w.cfg.Pipeline, s.Lane, s.Epoch, err)
		}
		if !ok {
			w.cfg.Logger.Warn(w.cfg.Name+": staged data of the checkpoint's epoch is gone: reading it again",
				"pipeline", w.cfg.Pipeline, "epoch", head.Epoch, "lane", s.Lane)
			return sink.Lost, nil, nil
		}
	}
	return sink.Recoverable, lanes, nil
}

// Commit applies epoch (see Writer), in one transaction of Books. It is
// idempotent: an epoch the Marker has applied is skipped. It fails with
// an error wrapping sink.ErrFenced when a generation newer than the one
// Recover got has recovered since, and before Recover.
func (w *Writer[T]) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	gen := checkpoint.Generation(w.gen.Load())
	if gen == 0 {
		return fmt.Errorf("%s: Commit of epoch %d before Recover", w.cfg.Name, epoch)
	}
	lanes, err := w.open(epoch, committables)
	if err != nil {
		return err
	}
	return w.cfg.Books.Tx(ctx, func(tx T) error {
		m, err := w.marker(ctx, tx)
		if err != nil {
			return err
		}
		// The fence first: a zombie's Commit fails even for an epoch
		// that is applied.
		if err := w.fenced(m, gen); err != nil {
			return err
		}
		switch {
		case m.Epoch >= epoch:
			return nil // applied before, by this attempt or another
		case m.Fence < gen:
			return fmt.Errorf("%s: pipeline %q: the fence is at generation %d, below generation %d that recovered: were the destination's books reset?",
				w.cfg.Name, w.cfg.Pipeline, m.Fence, gen)
		case m.Epoch < epoch-1:
			return fmt.Errorf("%s: pipeline %q: epoch %d can't be applied after epoch %d: the epochs between are missing (was the destination restored from an older copy?)",
				w.cfg.Name, w.cfg.Pipeline, epoch, m.Epoch)
		}
		if err := w.apply(ctx, tx, &m, epoch, gen, lanes); err != nil {
			return err
		}
		return w.setMarker(ctx, tx, m)
	})
}

// Finish finishes the Final epoch (see Finisher), in one transaction of
// Books: once per epoch, so calling it again does nothing. It fails
// with an error wrapping sink.ErrFenced as Commit does, and when epoch
// is not applied.
func (w *Writer[T]) Finish(ctx context.Context, epoch uint64) error {
	gen := checkpoint.Generation(w.gen.Load())
	if gen == 0 {
		return fmt.Errorf("%s: Finish of epoch %d before Recover", w.cfg.Name, epoch)
	}
	return w.cfg.Books.Tx(ctx, func(tx T) error {
		m, err := w.marker(ctx, tx)
		if err != nil {
			return err
		}
		if err := w.fenced(m, gen); err != nil {
			return err
		}
		switch {
		case m.Finished >= epoch:
			return nil
		case m.Epoch < epoch:
			return fmt.Errorf("%s: pipeline %q: Finish of epoch %d, which is not applied (the last applied is %d)",
				w.cfg.Name, w.cfg.Pipeline, epoch, m.Epoch)
		}
		if err := w.finish(ctx, tx, &m, epoch); err != nil {
			return err
		}
		return w.setMarker(ctx, tx, m)
	})
}

// apply applies every lane's staged data of epoch in tx and records it
// in m.
func (w *Writer[T]) apply(ctx context.Context, tx T, m *Marker, epoch uint64, gen checkpoint.Generation, lanes []Staged) error {
	for _, s := range lanes {
		if err := w.cfg.Applier.Apply(ctx, tx, s); err != nil {
			return fmt.Errorf("%s: pipeline %q: apply lane %d's data of epoch %d: %w", w.cfg.Name, w.cfg.Pipeline, s.Lane, epoch, err)
		}
	}
	m.Epoch, m.Generation = epoch, gen
	return nil
}

// finish finishes epoch in tx and records it in m.
func (w *Writer[T]) finish(ctx context.Context, tx T, m *Marker, epoch uint64) error {
	if f, ok := w.cfg.Applier.(Finisher[T]); ok {
		if err := f.Finish(ctx, tx, w.cfg.Pipeline, epoch); err != nil {
			return fmt.Errorf("%s: pipeline %q: finish epoch %d: %w", w.cfg.Name, w.cfg.Pipeline, epoch, err)
		}
	}
	m.Finished = epoch
	return nil
}

func (w *Writer[T]) fenced(m Marker, gen checkpoint.Generation) error {
	if m.Fence > gen {
		return fmt.Errorf("%s: pipeline %q: generation %d is fenced by generation %d: %w", w.cfg.Name, w.cfg.Pipeline, gen, m.Fence, sink.ErrFenced)
	}
	return nil
}

func (w *Writer[T]) marker(ctx context.Context, tx T) (Marker, error) {
	m, err := w.cfg.Books.Marker(ctx, tx, w.cfg.Pipeline)
	if err != nil {
		return m, fmt.Errorf("%s: read the marker of pipeline %q: %w", w.cfg.Name, w.cfg.Pipeline, err)
	}
	return m, nil
}

func (w *Writer[T]) setMarker(ctx context.Context, tx T, m Marker) error {
	if err := w.cfg.Books.SetMarker(ctx, tx, w.cfg.Pipeline, m); err != nil {
		return fmt.Errorf("%s: write the marker of pipeline %q: %w", w.cfg.Name, w.cfg.Pipeline, err)
	}
	return nil
}

// envelope is a committable: a lane's Staged, as JSON.
type envelope struct {
	Format   int    `json:"ledger"` // envelopeFormat
	Pipeline string `json:"pipeline"`
	Epoch    uint64 `json:"epoch"`
	Lane     int    `json:"lane"`
	Data     []byte `json:"data,omitempty"`
}

const envelopeFormat = 1

func (w *Writer[T]) seal(epoch uint64, data []byte) (sink.Committable, error) {
	return json.Marshal(envelope{Format: envelopeFormat, Pipeline: w.cfg.Pipeline, Epoch: epoch, Lane: w.cfg.Lane, Data: data})
}

// open returns the Staged of each lane's committable of epoch that
// staged anything, in lane order.
func (w *Writer[T]) open(epoch uint64, committables []sink.Committable) ([]Staged, error) {
	var out []Staged
	for lane, c := range committables {
		var e envelope
		if err := json.Unmarshal(c, &e); err != nil || e.Format == 0 {
			if err == nil {
				err = errors.New("no format")
			}
			return nil, fmt.Errorf("%s: lane %d's committable of epoch %d is not one of package ledger (%v): was the pipeline written by another destination?",
				w.cfg.Name, lane, epoch, err)
		}
		switch {
		case e.Format != envelopeFormat:
			return nil, fmt.Errorf("%s: lane %d's committable of epoch %d has format %d, which this version does not know", w.cfg.Name, lane, epoch, e.Format)
		case e.Pipeline != w.cfg.Pipeline || e.Epoch != epoch || e.Lane != lane:
			return nil, fmt.Errorf("%s: lane %d's committable is of pipeline %q epoch %d lane %d, not of pipeline %q epoch %d",
				w.cfg.Name, lane, e.Pipeline, e.Epoch, e.Lane, w.cfg.Pipeline, epoch)
		}
		if len(e.Data) > 0 {
			out = append(out, Staged{Pipeline: e.Pipeline, Epoch: e.Epoch, Lane: e.Lane, Data: e.Data})
		}
	}
	return out, nil
}
