package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openetl/etl/checkpoint/object"
)

// maxRaces bounds how often one call re-reads HEAD after losing a
// compare-and-swap without HEAD's generation or record changing. Every
// legitimate HEAD write changes one of them, so hitting it means a bug.
const maxRaces = 100

// logStore is the checkpoint protocol over an object.Bucket. The backends
// differ only in how they store objects; fencing, conflict detection and
// record immutability are all here.
type logStore struct {
	b object.Bucket
}

func newStore(b object.Bucket) *logStore { return &logStore{b: b} }

// readHead returns the pipeline's HEAD and its version token, or
// object.ErrNotExist for a pipeline never claimed.
func (s *logStore) readHead(ctx context.Context, pipeline string) (*head, object.Token, error) {
	data, tok, err := s.b.Read(ctx, headKey(pipeline))
	if err != nil {
		return nil, "", err
	}
	h, err := decodeHead(pipeline, data)
	return h, tok, err
}

// swapHead replaces HEAD, read with token tok, by next. It reports false
// when another writer got there first. A lost race is double-checked: if
// HEAD now holds exactly our bytes (our nonce), the write landed and only
// the answer was lost (an SDK retry can do that on object stores).
func (s *logStore) swapHead(ctx context.Context, pipeline string, tok object.Token, next *head) (bool, error) {
	key, data := headKey(pipeline), next.encode()
	var err error
	if tok == "" {
		err = s.b.Create(ctx, key, data)
	} else {
		err = s.b.Replace(ctx, key, data, tok)
	}
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, object.ErrPrecondition) && !errors.Is(err, object.ErrExists) {
		return false, fmt.Errorf("checkpoint: pipeline %q: write HEAD: %w", pipeline, err)
	}
	cur, _, err := s.b.Read(ctx, key)
	if err != nil && !errors.Is(err, object.ErrNotExist) {
		return false, fmt.Errorf("checkpoint: pipeline %q: read HEAD: %w", pipeline, err)
	}
	return bytes.Equal(cur, data), nil
}

// Claim implements Store.
func (s *logStore) Claim(ctx context.Context, pipeline string) (Generation, *Record, error) {
	if err := validPipeline(pipeline); err != nil {
		return 0, nil, err
	}
	for {
		h, tok, err := s.readHead(ctx, pipeline)
		switch {
		case errors.Is(err, object.ErrNotExist):
			h = &head{Pipeline: pipeline} // next() makes it generation 1, seq 1
		case err != nil:
			return 0, nil, fmt.Errorf("checkpoint: claim %q: %w", pipeline, err)
		}
		// Keep the record HEAD points at; only the generation moves.
		next := h.next(h.Generation+1, h.Ref)
		next.Holder = holderNow()
		won, err := s.swapHead(ctx, pipeline, tok, next)
		if err != nil {
			return 0, nil, err
		}
		if !won {
			continue // another Claim or a Commit got in between: claim on top of it
		}
		if next.Ref == nil {
			return next.Generation, nil, nil
		}
		rec, err := s.Get(ctx, pipeline, *next.Ref)
		if err != nil {
			return 0, nil, fmt.Errorf("checkpoint: claim %q: HEAD points at %s: %w", pipeline, next.Ref, err)
		}
		return next.Generation, rec, nil
	}
}

// Head implements Store.
func (s *logStore) Head(ctx context.Context, pipeline string) (Generation, *Record, error) {
	if err := validPipeline(pipeline); err != nil {
		return 0, nil, err
	}
	h, _, err := s.readHead(ctx, pipeline)
	switch {
	case errors.Is(err, object.ErrNotExist):
		return 0, nil, nil
	case err != nil:
		return 0, nil, fmt.Errorf("checkpoint: head %q: %w", pipeline, err)
	case h.Ref == nil:
		return h.Generation, nil, nil
	}
	rec, err := s.Get(ctx, pipeline, *h.Ref)
	if err != nil {
		return 0, nil, fmt.Errorf("checkpoint: head %q: HEAD points at %s: %w", pipeline, h.Ref, err)
	}
	return h.Generation, rec, nil
}

// checkGen returns ErrFenced unless h belongs to gen.
func checkGen(pipeline string, gen Generation, h *head) error {
	switch {
	case h.Generation > gen:
		by := ""
		if h.Holder != "" {
			by = " (" + h.Holder + ")"
		}
		return fmt.Errorf("%w: pipeline %q: generation %d%s claimed it after %d", ErrFenced, pipeline, h.Generation, by, gen)
	case h.Generation < gen:
		return fmt.Errorf("%w: pipeline %q: generation %d was never claimed (HEAD is at %d)", ErrFenced, pipeline, gen, h.Generation)
	}
	return nil
}

// Commit implements Store.
//
// The record is written before HEAD moves, so HEAD never names a missing
// record. A record left behind by a Commit that then lost (a zombie's,
// fenced at the HEAD swap) is harmless: its name carries its generation,
// so no later record can collide with it, and nothing points at it.
func (s *logStore) Commit(ctx context.Context, gen Generation, rec *Record) error {
	if err := validRecord(gen, rec); err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("checkpoint: commit %q %s: encode: %w", rec.Pipeline, rec.Ref(), err)
	}
	pipeline, ref := rec.Pipeline, rec.Ref()
	written := false
	for range maxRaces {
		h, tok, err := s.readHead(ctx, pipeline)
		if errors.Is(err, object.ErrNotExist) {
			return fmt.Errorf("%w: pipeline %q has never been claimed", ErrFenced, pipeline)
		}
		if err != nil {
			return fmt.Errorf("checkpoint: commit %q %s: %w", pipeline, ref, err)
		}
		if err := checkGen(pipeline, gen, h); err != nil {
			return err
		}
		if !sameRef(h.Ref, rec.Prev) {
			if sameRef(h.Ref, &ref) && s.sameRecord(ctx, pipeline, ref, data) {
				return nil // a retry of a Commit that succeeded
			}
			return fmt.Errorf("%w: pipeline %q: HEAD is at %s, record %s follows %s",
				ErrConflict, pipeline, refString(h.Ref), ref, refString(rec.Prev))
		}
		if !written {
			if err := s.putRecord(ctx, pipeline, ref, data); err != nil {
				return err
			}
			written = true
		}
		won, err := s.swapHead(ctx, pipeline, tok, h.next(gen, &ref))
		if err != nil || won {
			return err
		}
		// Lost the swap: re-read, and the checks above say who won.
	}
	return fmt.Errorf("checkpoint: commit %q %s: HEAD kept changing without a new generation or record", pipeline, ref)
}

// validRecord checks what Commit can check without reading the store.
func validRecord(gen Generation, rec *Record) error {
	if rec == nil {
		return errors.New("checkpoint: commit: nil record")
	}
	if err := validPipeline(rec.Pipeline); err != nil {
		return err
	}
	if gen == 0 || rec.Generation != gen {
		return fmt.Errorf("checkpoint: commit %q: record generation %d, committing as %d: must be equal and not 0",
			rec.Pipeline, rec.Generation, gen)
	}
	if p := rec.Prev; p != nil && (p.Generation == 0 || p.Generation > gen || p.Epoch >= rec.Epoch) {
		return fmt.Errorf("checkpoint: commit %q %s: prev %s must have a lower epoch and a generation in 1..%d",
			rec.Pipeline, rec.Ref(), p, gen)
	}
	return nil
}

// putRecord creates a record object. Records are never overwritten: an
// existing object with the same bytes is a retry and fine; different bytes
// mean two writers in one generation.
func (s *logStore) putRecord(ctx context.Context, pipeline string, ref Ref, data []byte) error {
	err := s.b.Create(ctx, recordKey(pipeline, ref), data)
	if errors.Is(err, object.ErrExists) {
		if s.sameRecord(ctx, pipeline, ref, data) {
			return nil
		}
		return fmt.Errorf("%w: pipeline %q: record %s already exists with different content", ErrConflict, pipeline, ref)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: write record %q %s: %w", pipeline, ref, err)
	}
	return nil
}

func (s *logStore) sameRecord(ctx context.Context, pipeline string, ref Ref, data []byte) bool {
	cur, _, err := s.b.Read(ctx, recordKey(pipeline, ref))
	return err == nil && bytes.Equal(cur, data)
}

// Get implements Store.
func (s *logStore) Get(ctx context.Context, pipeline string, ref Ref) (*Record, error) {
	if err := validPipeline(pipeline); err != nil {
		return nil, err
	}
	data, _, err := s.b.Read(ctx, recordKey(pipeline, ref))
	if errors.Is(err, object.ErrNotExist) {
		return nil, fmt.Errorf("%w: pipeline %q %s", ErrNotFound, pipeline, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: get %q %s: %w", pipeline, ref, err)
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("checkpoint: get %q %s: record is corrupt: %w", pipeline, ref, err)
	}
	if rec.Pipeline != pipeline || rec.Ref() != ref {
		return nil, fmt.Errorf("checkpoint: get %q %s: record is corrupt: it says pipeline %q %s",
			pipeline, ref, rec.Pipeline, rec.Ref())
	}
	return &rec, nil
}

// Rewind implements Store.
func (s *logStore) Rewind(ctx context.Context, pipeline string, gen Generation, to Ref) error {
	if err := validPipeline(pipeline); err != nil {
		return err
	}
	var target *Ref
	if to != (Ref{}) {
		target = &to
	}
	for range maxRaces {
		h, tok, err := s.readHead(ctx, pipeline)
		if errors.Is(err, object.ErrNotExist) {
			return fmt.Errorf("%w: pipeline %q has never been claimed", ErrFenced, pipeline)
		}
		if err != nil {
			return fmt.Errorf("checkpoint: rewind %q: %w", pipeline, err)
		}
		if err := checkGen(pipeline, gen, h); err != nil {
			return err
		}
		if sameRef(h.Ref, target) {
			return nil
		}
		if err := s.checkAncestor(ctx, pipeline, h.Ref, target); err != nil {
			return err
		}
		won, err := s.swapHead(ctx, pipeline, tok, h.next(gen, target))
		if err != nil || won {
			return err
		}
	}
	return fmt.Errorf("checkpoint: rewind %q: HEAD kept changing without a new generation", pipeline)
}

// checkAncestor walks back from the record from until it meets to; an
// error when it runs out first. A nil to (before the first record) is an
// ancestor of everything.
func (s *logStore) checkAncestor(ctx context.Context, pipeline string, from, to *Ref) error {
	if to == nil {
		return nil
	}
	if _, err := s.Get(ctx, pipeline, *to); err != nil {
		return fmt.Errorf("checkpoint: rewind %q to %s: %w", pipeline, to, err)
	}
	for r := from; r != nil; {
		if r.Epoch < to.Epoch {
			break // epochs only fall going back
		}
		if *r == *to {
			return nil
		}
		rec, err := s.Get(ctx, pipeline, *r)
		if err != nil {
			return fmt.Errorf("checkpoint: rewind %q: walk back from HEAD: %w", pipeline, err)
		}
		r = rec.Prev
	}
	return fmt.Errorf("checkpoint: rewind %q to %s: not an ancestor of HEAD (%s)", pipeline, to, refString(from))
}

// WriteFile implements Store.
func (s *logStore) WriteFile(ctx context.Context, pipeline, name string, data []byte) error {
	if err := validPipeline(pipeline); err != nil {
		return err
	}
	if err := validSideFile(name); err != nil {
		return err
	}
	if err := s.b.Put(ctx, pipeline+"/"+name, data); err != nil {
		return fmt.Errorf("checkpoint: write file %q %s: %w", pipeline, name, err)
	}
	return nil
}

// Close implements Store.
func (s *logStore) Close(ctx context.Context) error { return s.b.Close(ctx) }
