package sinktest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

func (s *suite) checkRecoverNil() {
	w := s.writer(s.dest, 0)
	if out := s.recoverGen(w, 1, nil); out != sink.Applied {
		s.t.Errorf("Recover(1, nil head) = %v, want applied: a new pipeline has nothing to recover", out)
	}
	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, nil); out != sink.Applied {
		s.t.Errorf("Recover(2, nil head) by the next attempt = %v, want applied", out)
	}
}

func (s *suite) checkInvisible() {
	if !s.exactlyOnce() {
		s.t.Skip("a deliver-ack destination may show rows once written")
	}
	a := s.stream("a")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	r := s.write(w, a, 10, false)
	s.checkVisible("after Write, before PreCommit", a)
	c := s.preCommit(w, 1)
	s.checkVisible("after PreCommit(1), before Commit", a)
	s.commit(w, 1, c)
	s.expect(a, r)
	s.checkVisible("after Commit(1)", a)
}

func (s *suite) checkCommit() {
	a, b := s.stream("a"), s.stream("b")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	for epoch := uint64(1); epoch <= 3; epoch++ {
		ra := s.write(w, a, 7*int(epoch), false)
		ra2 := s.write(w, a, 3, false)
		var rb []wantRow
		if epoch != 2 {
			rb = s.write(w, b, 11, false)
		}
		c := s.preCommit(w, epoch)
		s.commit(w, epoch, c)
		s.expect(a, ra, ra2)
		s.expect(b, rb)
		s.checkVisible(fmt.Sprintf("after Commit(%d)", epoch), a, b)
	}
}

func (s *suite) checkCommitTwice() {
	a := s.stream("a")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	r1 := s.write(w, a, 20, false)
	c1 := s.preCommit(w, 1)
	s.commit(w, 1, c1)
	s.expect(a, r1)
	s.checkVisible("after Commit(1)", a)
	s.commit(w, 1, c1)
	s.checkVisible("after Commit(1) a second time on the same writer", a)

	// The next attempt (another process) finds epoch 1 applied, commits
	// it again as the runner may, and carries on.
	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, s.head(1, 1, c1)); out != sink.Applied {
		s.t.Errorf("Recover(2, head epoch 1) after Commit(1) = %v, want applied", out)
	}
	s.commit(w2, 1, c1)
	s.checkVisible("after Commit(1) again by the next attempt's writer", a)
	r2 := s.write(w2, a, 5, false)
	c2 := s.preCommit(w2, 2)
	s.commit(w2, 2, c2)
	s.commit(w2, 2, c2)
	s.expect(a, r2)
	s.checkVisible("after Commit(2) twice by the next attempt's writer", a)
}

func (s *suite) checkEmptyEpoch() {
	a, b := s.stream("a"), s.stream("b")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	c1 := s.preCommit(w, 1)
	s.commit(w, 1, c1)
	s.checkVisible("after an empty epoch 1", a, b)

	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, s.head(1, 1, c1)); out != sink.Applied {
		s.t.Errorf("Recover(2, head: the committed empty epoch 1) = %v, want applied", out)
	}
	r2 := s.write(w2, a, 5, false) // b has no rows in epoch 2
	c2 := s.preCommit(w2, 2)
	s.commit(w2, 2, c2)
	s.expect(a, r2)
	s.checkVisible("after epoch 2, with rows in one stream only", a, b)
	c3 := s.preCommit(w2, 3)
	s.commit(w2, 3, c3)
	s.checkVisible("after an empty epoch 3", a, b)

	// An empty epoch pre-committed but never committed (a crash): the
	// next attempt finds it applied or recoverable, never lost.
	w3 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w3, 3, s.head(3, 2, c3)); out != sink.Applied {
		s.t.Errorf("Recover(3, head: the committed empty epoch 3) = %v, want applied", out)
	}
	c4 := s.preCommit(w3, 4)
	w4 := s.writer(s.destination(), 0)
	switch out := s.recoverGen(w4, 4, s.head(4, 3, c4)); out {
	case sink.Applied:
	case sink.Recoverable:
		s.commit(w4, 4, c4)
	default:
		s.t.Errorf("Recover(4, head: the empty epoch 4, pre-committed, not committed) = %v, want applied or recoverable", out)
	}
	s.checkVisible("after recovering an empty epoch", a, b)
}

func (s *suite) checkWidenSchema() {
	a, b := s.stream("a"), s.stream("b")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	r1 := s.write(w, a, 10, false)
	r2 := s.write(w, a, 10, true) // widened mid-epoch
	r3 := s.write(w, b, 5, true)
	c1 := s.preCommit(w, 1)
	s.commit(w, 1, c1)
	s.expect(a, r1, r2)
	s.expect(b, r3)
	s.checkVisible("after an epoch whose schema widened mid-epoch", a, b)
	r4 := s.write(w, a, 6, true)
	c2 := s.preCommit(w, 2)
	s.commit(w, 2, c2)
	s.expect(a, r4)
	s.checkVisible("after an epoch of the widened schema", a, b)
}

func (s *suite) checkCrash() {
	a, b := s.stream("a"), s.stream("b")
	w1 := s.writer(s.dest, 0)
	s.recoverGen(w1, 1, nil)
	r0 := s.write(w1, a, 8, false)
	c0 := s.preCommit(w1, 1)
	s.commit(w1, 1, c0)
	s.expect(a, r0)
	r1 := s.write(w1, a, 12, false)
	rb := s.write(w1, b, 3, false)
	c1 := s.preCommit(w1, 2)
	// The process dies here: HEAD is epoch 2, which nobody committed; w1
	// is never used again (nor closed, until the test ends).
	if s.exactlyOnce() {
		s.checkVisible("after PreCommit(2) and a crash before Commit", a, b)
	}
	head := s.head(2, 1, c1)
	w2 := s.writer(s.destination(), 0)
	out := s.recoverGen(w2, 2, head)
	switch {
	case out == sink.Recoverable:
		s.commit(w2, 2, c1)
	case out == sink.Applied && !s.exactlyOnce():
	default:
		s.t.Fatalf("Recover(2, head epoch 2 pre-committed but not committed) = %v, want recoverable", out)
	}
	s.expect(a, r1)
	s.expect(b, rb)
	s.checkVisible("after the next attempt's Recover and Commit(2)", a, b)

	w3 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w3, 3, head); out != sink.Applied {
		s.t.Errorf("Recover(3, head epoch 2) after the recovered Commit(2) = %v, want applied", out)
	}
	s.commit(w3, 2, c1)
	s.checkVisible("after a third attempt's Commit(2) of the applied epoch", a, b)
	r3 := s.write(w3, a, 4, false)
	c3 := s.preCommit(w3, 3)
	s.commit(w3, 3, c3)
	s.expect(a, r3)
	s.checkVisible("after the third attempt's Commit(3)", a, b)
}

// ids returns the visible IDs of stream, sorted.
func (s *suite) ids(stream string) []string {
	s.t.Helper()
	var out []string
	for _, r := range s.visible(stream) {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

func (s *suite) unchanged(what, stream string, before []string) {
	s.t.Helper()
	if after := s.ids(stream); !slices.Equal(before, after) {
		s.t.Errorf("%s changed what is visible in %s: %d rows before, %d after", what, stream, len(before), len(after))
	}
}

func (s *suite) checkZombie() {
	a := s.stream("a")
	zw := s.writer(s.dest, 0)
	s.recoverGen(zw, 1, nil)
	r1 := s.write(zw, a, 10, false)
	c1 := s.preCommit(zw, 1)

	// A new attempt claims generation 2 and recovers while the old one
	// runs on: the old one is a zombie from now on.
	nw := s.writer(s.destination(), 0)
	out := s.recoverGen(nw, 2, s.head(1, 1, c1))
	if s.exactlyOnce() && out != sink.Recoverable {
		s.t.Errorf("Recover(2, head epoch 1 pre-committed, not committed) = %v, want recoverable", out)
	}
	if s.exactlyOnce() {
		s.checkVisible("before the zombie's Commit(1)", a)
	}
	before := s.ids(a)
	s.fenced("the zombie's (generation 1) Commit(1) after Recover(2)", zw.Commit(s.ctx(), 1, []sink.Committable{c1}))
	s.unchanged("the zombie's fenced Commit(1)", a, before)
	if out == sink.Recoverable {
		s.commit(nw, 1, c1)
	}
	s.expect(a, r1)
	s.checkVisible("after the new attempt's Commit(1)", a)

	// The zombie writes on; its next epoch must not land.
	s.zombieEpoch(zw, "the zombie (generation 1)", 2, a)

	// A third attempt recovers; generation 2 is now a zombie too, and an
	// attempt that recovers late with generation 2 does not lower the
	// fence.
	w3 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w3, 3, s.head(1, 1, c1)); out != sink.Applied {
		s.t.Errorf("Recover(3, head epoch 1) after Commit(1) = %v, want applied", out)
	}
	s.zombieEpoch(nw, "generation 2 after Recover(3)", 2, a)
	late := s.writer(s.destination(), 0)
	if _, err := late.Recover(s.ctx(), 2, s.head(1, 1, c1)); err == nil {
		s.zombieEpoch(late, "a writer of generation 2 recovered after generation 3", 2, a)
	}
	r2 := s.write(w3, a, 3, false)
	c2 := s.preCommit(w3, 2)
	s.commit(w3, 2, c2)
	s.expect(a, r2)
	s.checkVisible("after generation 3's Commit(2)", a)
}

// zombieEpoch has a fenced writer write and pre-commit epoch; its Commit
// must fail with ErrFenced and change nothing visible. Write and PreCommit
// may fail too.
func (s *suite) zombieEpoch(zw *lane, who string, epoch uint64, stream string) {
	s.t.Helper()
	rec, rows := s.rows(stream, 5, false)
	defer rec.Release()
	if !s.exactlyOnce() {
		s.allow(rows) // visible once written, fenced or not
	}
	if err := zw.Write(s.ctx(), stream, rec); err != nil {
		return
	}
	c, err := zw.PreCommit(s.ctx(), epoch)
	if err != nil {
		return
	}
	before := s.ids(stream)
	s.fenced(fmt.Sprintf("Commit(%d) by %s", epoch, who), zw.Commit(s.ctx(), epoch, []sink.Committable{c}))
	s.unchanged(fmt.Sprintf("Commit(%d) by %s", epoch, who), stream, before)
	if s.exactlyOnce() {
		s.checkVisible(fmt.Sprintf("after %s pre-committed epoch %d", who, epoch), stream)
	}
}

func (s *suite) checkConcurrent() {
	a, b := s.stream("a"), s.stream("b")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	prevA := s.write(w, a, 50, false)
	prevB := s.write(w, b, 20, false)
	c := s.preCommit(w, 1)
	const epochs = 8
	for epoch := uint64(2); epoch <= epochs; epoch++ {
		// Commit(epoch-1) on the commit goroutine while the lane's
		// goroutine writes and pre-commits epoch: the runner's pipelining.
		ctx := s.ctx()
		var commitErr error
		var wg sync.WaitGroup
		wg.Go(func() { commitErr = w.Commit(ctx, epoch-1, []sink.Committable{c}) })
		var ra, rb []wantRow
		for range 4 {
			ra = append(ra, s.write(w, a, 25, epoch > epochs/2)...)
			rb = append(rb, s.write(w, b, 5, false)...)
		}
		next := s.preCommit(w, epoch)
		wg.Wait()
		if commitErr != nil {
			s.t.Fatalf("Commit(%d) alongside Write and PreCommit(%d): %v", epoch-1, epoch, commitErr)
		}
		s.expect(a, prevA)
		s.expect(b, prevB)
		if s.exactlyOnce() {
			s.checkVisible(fmt.Sprintf("after Commit(%d) ran alongside Write and PreCommit(%d)", epoch-1, epoch), a, b)
		}
		c, prevA, prevB = next, ra, rb
	}
	s.commit(w, epochs, c)
	s.expect(a, prevA)
	s.expect(b, prevB)
	s.checkVisible(fmt.Sprintf("after the last Commit(%d)", epochs), a, b)
}

func (s *suite) checkLanes() {
	a, b, only := s.stream("a"), s.stream("b"), s.stream("last")
	n := s.opts.Lanes
	ws := make([]*lane, n)
	for k := range ws {
		ws[k] = s.writer(s.dest, k)
	}
	s.recoverGen(ws[0], 1, nil)
	var cs1 []sink.Committable
	for k, w := range ws {
		s.expect(a, s.write(w, a, 5+k, false))
		if k%2 == 0 {
			s.expect(b, s.write(w, b, 3, false))
		}
		if k == n-1 {
			s.expect(only, s.write(w, only, 4, false))
		}
		cs1 = append(cs1, s.preCommit(w, 1))
	}
	if s.exactlyOnce() {
		s.unexpect(a, b, only)
	}
	s.commit(ws[0], 1, cs1...)
	s.checkVisible("after lane 0 committed every lane's committables of epoch 1", a, b, only)

	var cs2 []sink.Committable
	for k, w := range ws {
		if k != 1 { // lane 1 has no rows in epoch 2
			s.expect(a, s.write(w, a, 2, false))
		}
		cs2 = append(cs2, s.preCommit(w, 2))
	}
	s.commit(ws[0], 2, cs2...)
	s.checkVisible("after lane 0 committed epoch 2, where lane 1 had no rows", a, b, only)

	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, s.head(2, 1, cs2...)); out != sink.Applied {
		s.t.Errorf("Recover(2, head epoch 2 of %d lanes) after Commit(2) = %v, want applied", n, out)
	}
	s.commit(w2, 2, cs2...)
	s.checkVisible("after the next attempt's Commit(2) of the applied epoch", a, b, only)
}

// unexpect is checkVisible's converse for the Lanes check: before Commit
// no stream shows anything. It runs before the expected rows are visible,
// so it compares against empty.
func (s *suite) unexpect(streams ...string) {
	s.t.Helper()
	for _, st := range streams {
		if n := len(s.visible(st)); n != 0 {
			s.t.Errorf("before Commit(1): stream %s shows %d rows, want none", st, n)
		}
	}
}

func (s *suite) checkCloseDiscards() {
	if !s.exactlyOnce() {
		s.t.Skip("a deliver-ack destination shows rows once written")
	}
	a, b := s.stream("a"), s.stream("b")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	r1 := s.write(w, a, 10, false)
	c1 := s.preCommit(w, 1)
	s.write(w, a, 7, false) // never pre-committed: Close discards them
	s.write(w, b, 3, false)
	s.close(w)
	s.checkVisible("after Close, before any Commit", a, b)

	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, s.head(1, 1, c1)); out != sink.Recoverable {
		s.t.Fatalf("Recover(2, head epoch 1 pre-committed, not committed) = %v, want recoverable", out)
	}
	s.commit(w2, 1, c1)
	s.expect(a, r1)
	s.checkVisible("after the next attempt's Commit(1): only epoch 1's rows, none written after PreCommit(1)", a, b)
	r2 := s.write(w2, a, 4, false)
	c2 := s.preCommit(w2, 2)
	s.commit(w2, 2, c2)
	s.expect(a, r2)
	s.write(w2, b, 5, false) // after a Commit, never pre-committed
	s.close(w2)

	w3 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w3, 3, s.head(2, 2, c2)); out != sink.Applied {
		s.t.Errorf("Recover(3, head epoch 2) after Commit(2) = %v, want applied", out)
	}
	c3 := s.preCommit(w3, 3)
	s.commit(w3, 3, c3)
	s.checkVisible("after an attempt closed with rows it never pre-committed", a, b)
}

func (s *suite) checkAhead() {
	if !s.exactlyOnce() {
		s.t.Skip("a deliver-ack destination need not keep which epochs it applied")
	}
	a := s.stream("a")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	r1 := s.write(w, a, 6, false)
	c1 := s.preCommit(w, 1)
	s.commit(w, 1, c1)
	r2 := s.write(w, a, 4, false)
	c2 := s.preCommit(w, 2)
	s.commit(w, 2, c2)
	s.expect(a, r1, r2)
	s.close(w)

	// The checkpoint store is lost: the next attempts start a new, empty
	// log, with generations above the fence (below it, Recover's fenced
	// error is what the runner tells apart from a newer attempt's).
	for gen := checkpoint.Generation(2); gen <= 3; gen++ {
		lw := s.writer(s.destination(), 0)
		_, err := lw.Recover(s.ctx(), gen, nil)
		s.ahead(fmt.Sprintf("Recover(%d, nil head) of a destination that applied epoch 2", gen), err)
	}
	// The store is restored from an older copy: HEAD is epoch 1.
	ow := s.writer(s.destination(), 0)
	_, err := ow.Recover(s.ctx(), 4, s.head(1, 1, c1))
	s.ahead("Recover(4, head epoch 1) of a destination that applied epoch 2", err)
	s.checkVisible("after the refused recoveries", a)

	// The store is restored as it was: its next generation, below those
	// of the refused attempts, recovers (they raised no fence) and
	// carries on.
	rw := s.writer(s.destination(), 0)
	if out := s.recoverGen(rw, 2, s.head(2, 1, c2)); out != sink.Applied {
		s.t.Errorf("Recover(2, head epoch 2) of the restored log after Commit(2) = %v, want applied", out)
	}
	r3 := s.write(rw, a, 5, false)
	c3 := s.preCommit(rw, 3)
	s.commit(rw, 3, c3)
	s.expect(a, r3)
	s.checkVisible("after the restored log's Commit(3)", a)
}
