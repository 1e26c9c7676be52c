package sinktest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// The checks of Finish and of the write modes beyond append (merge with
// soft and hard deletes, overwrite). A mode's checks run only when the
// destination's Capabilities declare it: the runner never gives a
// writer a mode they don't (Build refuses it), so a writer that declares
// one must write it as sink.StreamSpec says.

func cloneSpecs(specs []sink.StreamSpec) []sink.StreamSpec {
	out := slices.Clone(specs)
	for i := range out {
		out[i].Key = slices.Clone(out[i].Key)
		out[i].Columns = slices.Clone(out[i].Columns)
	}
	return out
}

// needs skips the check unless the destination declares what it checks.
func (s *suite) needs(what string, declared bool) {
	s.t.Helper()
	if !declared {
		s.t.Skipf("the destination's Capabilities don't declare %s: Build refuses such streams, so no writer gets one", what)
	}
}

func (s *suite) finish(l *lane, epoch uint64) {
	s.t.Helper()
	if err := l.Finish(s.ctx(), epoch); err != nil {
		s.t.Fatalf("Finish(%d) on lane %d: %v", epoch, l.n, err)
	}
}

// finalHead is the checkpoint record of epoch that ends a Sync which
// read everything: the runner calls Finish after its Commit.
func (s *suite) finalHead(epoch uint64, gen checkpoint.Generation, cs ...sink.Committable) *checkpoint.Record {
	r := s.head(epoch, gen, cs...)
	r.Final = true
	return r
}

// zombieFinish has a writer of an older generation call Finish after a
// newer one recovered: it must change nothing, and fail with an error
// wrapping sink.ErrFenced (or do nothing and return nil).
func (s *suite) zombieFinish(zw *lane, who string, epoch uint64, check func(when string)) {
	s.t.Helper()
	if err := zw.Finish(s.ctx(), epoch); err != nil && !errors.Is(err, sink.ErrFenced) {
		s.t.Errorf("Finish(%d) by %s: %v, want an error wrapping sink.ErrFenced (or nil, changing nothing)", epoch, who, err)
	}
	check(fmt.Sprintf("after Finish(%d) by %s", epoch, who))
}

// checkFinish: Finish after the Commit of a Final epoch leaves exactly
// the committed rows visible (a writer that groups epochs into fewer
// commits makes them visible then), again changes nothing; Recover of
// a Final head that was finished, or committed and not finished, or
// pre-committed and not committed, leaves exactly the committed rows.
func (s *suite) checkFinish() {
	a, b := s.stream("a"), s.stream("b")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	ra1, rb1 := s.write(w, a, 10, false), s.write(w, b, 5, false)
	s.commit(w, 1, s.preCommit(w, 1))
	ra2 := s.write(w, a, 4, false)
	c2 := s.preCommit(w, 2)
	s.commit(w, 2, c2)
	s.finish(w, 2)
	s.expect(a, ra1, ra2)
	s.expect(b, rb1)
	s.checkVisible("after Commit and Finish(2) of the Final epoch 2", a, b)
	s.finish(w, 2)
	s.checkVisible("after Finish(2) again", a, b)

	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, s.finalHead(2, 1, c2)); out != sink.Applied {
		s.t.Errorf("Recover(2, the Final head epoch 2, finished) = %v, want applied", out)
	}
	s.checkVisible("after the next attempt's Recover of the finished Final head", a, b)
	ra3 := s.write(w2, a, 3, false)
	c3 := s.preCommit(w2, 3)
	s.commit(w2, 3, c3)
	s.expect(a, ra3)
	// The process dies before Finish(3).
	w3 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w3, 3, s.finalHead(3, 2, c3)); out != sink.Applied {
		s.t.Errorf("Recover(3, the Final head epoch 3, committed, not finished) = %v, want applied", out)
	}
	s.checkVisible("after Recover of the Final epoch 3, committed, whose Finish never ran: Recover finishes a Final head"+
		" (the runner calls Finish only right after a Commit, never after Recover)", a, b)

	ra4 := s.write(w3, a, 6, false)
	c4 := s.preCommit(w3, 4)
	// The process dies before Commit(4).
	w4 := s.writer(s.destination(), 0)
	switch out := s.recoverGen(w4, 4, s.finalHead(4, 3, c4)); {
	case out == sink.Recoverable:
		s.commit(w4, 4, c4)
	case out == sink.Applied:
	default:
		s.t.Fatalf("Recover(4, the Final head epoch 4, pre-committed, not committed) = %v, want applied or recoverable", out)
	}
	s.expect(a, ra4)
	s.checkVisible("after the next attempt recovered the Final epoch 4, pre-committed, not committed", a, b)
	s.zombieFinish(w3, "a zombie (generation 3)", 4, func(when string) { s.checkVisible(when, a, b) })
}

// overwriteSpec makes the check's writers write stream o in overwrite
// mode.
func (s *suite) overwriteSpec(o string) {
	s.specs = []sink.StreamSpec{{Stream: o, Table: o, Mode: sink.Overwrite, Key: []string{"id"}}}
}

// rowsVisible checks that a reader sees exactly want of stream.
func (s *suite) rowsVisible(when, stream string, want ...[]wantRow) {
	s.t.Helper()
	rows := slices.Concat(want...)
	s.compare(fmt.Sprintf("%s (want exactly %d rows)", when, len(rows)), stream, s.visible(stream), rows)
}

// checkOverwrite: an overwrite stream's epochs are not visible until
// Finish of the refresh's Final epoch, which replaces the table's rows
// with every row of the refresh (over lanes and attempts) in one step;
// readers see the previous refresh whole until then; Finish again, and
// a zombie's Finish, change nothing; Recover of a Final head whose
// Finish never ran finishes it.
func (s *suite) checkOverwrite() {
	s.needs("Overwrite", s.dest.Capabilities().Overwrite)
	o := s.stream("o")
	s.overwriteSpec(o)
	w, w1 := s.writer(s.dest, 0), s.writer(s.dest, 1)
	s.recoverGen(w, 1, nil)

	// Refresh 1: epochs 1 and 2, on two lanes.
	r1a, r1b := s.write(w, o, 6, false), s.write(w1, o, 4, false)
	s.commit(w, 1, s.preCommit(w, 1), s.preCommit(w1, 1))
	s.rowsVisible("after Commit(1) of a refresh: the table keeps its contents (none yet) until Finish", o)
	r1c := s.write(w, o, 5, false)
	s.commit(w, 2, s.preCommit(w, 2), s.preCommit(w1, 2))
	s.rowsVisible("after Commit(2), the refresh's Final epoch, before Finish", o)
	s.finish(w, 2)
	s.rowsVisible("after Finish(2): the refresh's rows, from both lanes and both epochs, replace the table's", o, r1a, r1b, r1c)
	s.finish(w, 2)
	s.rowsVisible("after Finish(2) again", o, r1a, r1b, r1c)

	// Refresh 2: epochs 3 and 4; the process dies before Finish(4).
	r2a := s.write(w, o, 4, false)
	s.commit(w, 3, s.preCommit(w, 3), s.preCommit(w1, 3))
	s.rowsVisible("after Commit(3) of the next refresh: readers see the last refresh whole until Finish", o, r1a, r1b, r1c)
	r2b := s.write(w1, o, 3, false)
	c40, c41 := s.preCommit(w, 4), s.preCommit(w1, 4)
	s.commit(w, 4, c40, c41)
	w2 := s.writer(s.destination(), 0)
	if out := s.recoverGen(w2, 2, s.finalHead(4, 1, c40, c41)); out != sink.Applied {
		s.t.Errorf("Recover(2, the Final head epoch 4, committed, not finished) = %v, want applied", out)
	}
	s.rowsVisible("after the next attempt's Recover of the Final epoch 4, whose Finish never ran: Recover must finish it"+
		" (the runner calls Finish only right after a Commit, never after Recover)", o, r2a, r2b)
	s.zombieFinish(w, "the zombie (generation 1)", 4, func(when string) { s.rowsVisible(when, o, r2a, r2b) })

	// Refresh 3 spans attempts: epoch 5 by generation 2, which stops
	// (not Final); epoch 6 by generation 3, which dies after
	// PreCommit(6).
	r3a := s.write(w2, o, 5, false)
	c5 := s.preCommit(w2, 5)
	s.commit(w2, 5, c5)
	s.close(w2)
	w3 := s.writer(s.destination(), 0)
	switch out := s.recoverGen(w3, 3, s.head(5, 2, c5)); out {
	case sink.Applied:
	case sink.Recoverable:
		// A writer that keeps a refresh's files waiting for Finish may
		// say so; the runner commits the epoch again.
		s.commit(w3, 5, c5)
	default:
		s.t.Fatalf("Recover(3, head epoch 5, committed, not Final) = %v, want applied or recoverable", out)
	}
	s.rowsVisible("after an attempt stopped in the middle of a refresh (epoch 5 committed, not Final)", o, r2a, r2b)
	r3b := s.write(w3, o, 2, false)
	c6 := s.preCommit(w3, 6)
	w4 := s.writer(s.destination(), 0)
	when := "after the next attempt's Recover of the Final epoch 6, pre-committed, not committed"
	switch out := s.recoverGen(w4, 4, s.finalHead(6, 3, c6)); out {
	case sink.Applied:
	case sink.Recoverable:
		s.commit(w4, 6, c6)
		when += " (it reported recoverable, and the runner then commits it, but never calls Finish after Recover:" +
			" Recover must finish a Final head itself and report applied)"
	default:
		s.t.Fatalf("Recover(4, the Final head epoch 6, pre-committed, not committed) = %v, want applied", out)
	}
	s.rowsVisible(when+": the refresh is every row of epochs 5 and 6", o, r3a, r3b)

	// Refresh 4 starts.
	s.write(w4, o, 3, false)
	s.commit(w4, 7, s.preCommit(w4, 7))
	s.rowsVisible("after Commit(7) of the next refresh", o, r3a, r3b)
}

// checkOverwriteEmpty: a refresh that writes no rows (the source has
// none) empties the table at Finish.
func (s *suite) checkOverwriteEmpty() {
	s.needs("Overwrite", s.dest.Capabilities().Overwrite)
	o := s.stream("o")
	s.overwriteSpec(o)
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	r := s.write(w, o, 5, false)
	s.commit(w, 1, s.preCommit(w, 1))
	s.finish(w, 1)
	s.rowsVisible("after the first refresh's Finish(1)", o, r)
	s.commit(w, 2, s.preCommit(w, 2))
	s.finish(w, 2)
	s.rowsVisible("after Finish(2) of a refresh that wrote no rows: the table must be empty, as the source is", o)
}

// version is one version of a key of a merged stream, as the engine
// emits it: the key in column id, value "v<key>@<seq>" (null for a
// delete), and the metadata columns.
type version struct {
	key int
	op  string
	seq int64
}

func ins(key int, seq int64) version { return version{key, sink.OpInsert, seq} }
func upd(key int, seq int64) version { return version{key, sink.OpUpdate, seq} }
func del(key int, seq int64) version { return version{key, sink.OpDelete, seq} }

func (v version) String() string { return fmt.Sprintf("seq %d (%s)", v.seq, v.op) }

func versionID(stream string, v version) string {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return fmt.Sprintf("%016x%08x%08x", h.Sum64(), uint32(v.key), uint64(v.seq))
}

func versionValue(v version) (string, bool) {
	return fmt.Sprintf("v%d@%d", v.key, v.seq), v.op != sink.OpDelete
}

// writeVersions writes vs as one batch of stream on l.
func (s *suite) writeVersions(l *lane, stream string, vs ...version) []version {
	s.t.Helper()
	b := array.NewRecordBuilder(s.mem, schema(false))
	defer b.Release()
	s.mu.Lock()
	if s.written == nil {
		s.written = map[string]version{}
	}
	for _, v := range vs {
		id := versionID(stream, v)
		s.written[id] = v
		b.Field(0).(*array.Int64Builder).Append(int64(v.key))
		if val, ok := versionValue(v); ok {
			b.Field(1).(*array.StringBuilder).Append(val)
		} else {
			b.Field(1).AppendNull()
		}
		b.Field(2).(*array.StringBuilder).Append(id)
		b.Field(3).(*array.StringBuilder).Append(v.op)
		b.Field(4).(*array.Int64Builder).Append(v.seq)
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(syncedAt.UnixMicro()))
	}
	s.mu.Unlock()
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := l.Write(s.ctx(), stream, rec); err != nil {
		s.t.Fatalf("Write(%s, %d versions) on lane %d: %v", stream, len(vs), l.n, err)
	}
	return vs
}

// merged records versions as committed: of each key, the one with the
// highest seq is what a reader must see.
func (s *suite) merged(stream string, vss ...[]version) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest == nil {
		s.latest = map[string]map[int]version{}
	}
	if s.latest[stream] == nil {
		s.latest[stream] = map[int]version{}
	}
	for _, v := range slices.Concat(vss...) {
		if cur, ok := s.latest[stream][v.key]; !ok || v.seq > cur.seq {
			s.latest[stream][v.key] = v
		}
	}
}

// deletedFlag returns a row's _openetl_deleted, when the reader reports
// it.
func deletedFlag(r Row) (deleted, known bool) {
	switch v := r.Values[sink.ColumnDeleted].(type) {
	case bool:
		return v, true
	case string:
		return v == "true" || v == "1", true
	case int64, int32, int16, int8, uint8, uint16, uint32, uint64, int:
		return fmt.Sprint(v) != "0", true
	}
	return false, false
}

// checkMerged compares what a reader sees of a merged stream with the
// latest committed version of each key: its row, once, with that
// version's _openetl_id, _openetl_seq and op (and values, when the
// reader reports them); a deleted key's row marked _openetl_deleted
// (soft deletes) or no row at all (hard).
func (s *suite) checkMerged(when, stream string, hard bool) {
	t := s.t
	t.Helper()
	rows := s.visible(stream)
	s.mu.Lock()
	latest := make(map[int]version, len(s.latest[stream]))
	for k, v := range s.latest[stream] {
		latest[k] = v
	}
	written := s.written
	s.mu.Unlock()
	bad := 0
	report := func(format string, args ...any) {
		t.Helper()
		if bad++; bad <= 8 {
			t.Errorf("%s: merged stream %s: "+format, append([]any{when, stream}, args...)...)
		}
	}
	byKey := map[int][]Row{}
	for _, r := range rows {
		if field, v, ok := poisoned(r); ok {
			report("a row reads back poisoned (%s = %s): %s", field, v, poisonedMessage)
			continue
		}
		v, ok := written[r.ID]
		if !ok {
			report("row %s (seq %d) is visible but was never written", r.ID, r.Seq)
			continue
		}
		byKey[v.key] = append(byKey[v.key], r)
	}
	keys := slices.Sorted(func(yield func(int) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		rs := byKey[k]
		want, committed := latest[k]
		if len(rs) > 1 {
			var got []string
			for _, r := range rs {
				got = append(got, written[r.ID].String())
			}
			report("key %d has %d visible rows (%v): merge keeps one row per key, its version with the highest %s",
				k, len(rs), got, sink.ColumnSeq)
			continue
		}
		r, got := rs[0], written[rs[0].ID]
		switch {
		case !committed:
			report("key %d is visible (%v) but none of its versions was committed", k, got)
			continue
		case want.op == sink.OpDelete && hard:
			report("key %d was deleted at seq %d (hard deletes), but a row of it is visible (%v): hard deletes remove the key's row",
				k, want.seq, got)
			continue
		case got != want && got.seq < want.seq && want.op == sink.OpDelete:
			report("key %d shows %v, but it was deleted at seq %d: the delete was not applied, or an older version came back after it",
				k, got, want.seq)
			continue
		case got != want && got.seq < want.seq:
			report("key %d shows %v, want the latest version, %v: merge keeps each key's version with the highest %s"+
				" (within an epoch and across epochs)", k, got, want, sink.ColumnSeq)
			continue
		case got != want:
			report("key %d shows %v, want %v", k, got, want)
			continue
		}
		if r.Seq != want.seq {
			report("key %d: %s = %d, want %d", k, sink.ColumnSeq, r.Seq, want.seq)
		}
		if r.Op != "" && r.Op != want.op {
			report("key %d: %s = %q, want %q", k, sink.ColumnOp, r.Op, want.op)
		}
		deleted, known := deletedFlag(r)
		switch {
		case known && want.op == sink.OpDelete && !deleted:
			report("key %d: the delete's row (soft deletes) has %s false, want true", k, sink.ColumnDeleted)
		case known && want.op != sink.OpDelete && deleted:
			report("key %d (%v) has %s true, but its latest version is not a delete", k, want, sink.ColumnDeleted)
		}
		if r.Values == nil {
			continue
		}
		if v, ok := r.Values["id"]; ok && fmt.Sprint(v) != strconv.Itoa(k) {
			report("key %d: id = %v", k, v)
		}
		if val, live := versionValue(want); live {
			if v, ok := r.Values["value"]; ok && fmt.Sprint(v) != val {
				report("key %d (%v): value = %v, want %s", k, want, v, val)
			}
		}
	}
	for _, k := range slices.Sorted(func(yield func(int) bool) {
		for k := range latest {
			if !yield(k) {
				return
			}
		}
	}) {
		want := latest[k]
		if len(byKey[k]) > 0 || (want.op == sink.OpDelete && hard) {
			continue
		}
		if want.op == sink.OpDelete {
			report("key %d, deleted at seq %d, has no visible row: soft deletes keep a deleted key's row, marked %s,"+
				" with the delete's %s and %s", k, want.seq, sink.ColumnDeleted, sink.ColumnOp, sink.ColumnSeq)
			continue
		}
		report("key %d (%v) was committed but is not visible", k, want)
	}
	if bad > 8 {
		t.Errorf("%s: merged stream %s: ... and %d more differences", when, stream, bad-8)
	}
}

// mergeSpec makes the check's writers merge stream m by its key id.
func (s *suite) mergeSpec(m string, deletes sink.Deletes) {
	s.specs = []sink.StreamSpec{{Stream: m, Table: m, Mode: sink.Merge, Key: []string{"id"}, Deletes: deletes}}
}

func (s *suite) checkMerge() {
	s.needs("Merge", s.dest.Capabilities().Merge)
	s.mergeScenario(sink.SoftDeletes)
}

func (s *suite) checkHardDeletes() {
	caps := s.dest.Capabilities()
	s.needs("Merge with HardDeletes", caps.Merge && caps.HardDeletes)
	s.mergeScenario(sink.HardDeletes)
}

// mergeScenario: a merged stream's versions, over two lanes (keys
// routed by parity, as the runner routes by key), several epochs and a
// crash: updates and deletes, versions out of order within a batch and
// within an epoch, an older insert after a delete, keys inserted again
// after their delete. After each Commit a reader sees each key's
// latest version (checkMerged).
func (s *suite) mergeScenario(deletes sink.Deletes) {
	hard := deletes == sink.HardDeletes
	m := s.stream("m")
	s.mergeSpec(m, deletes)
	w0, w1 := s.writer(s.dest, 0), s.writer(s.dest, 1)
	s.recoverGen(w0, 1, nil)

	var even, odd []version
	for k := range 10 {
		if k%2 == 0 {
			even = append(even, ins(k, 100+int64(k)))
		} else {
			odd = append(odd, ins(k, 100+int64(k)))
		}
	}
	e1 := slices.Concat(
		s.writeVersions(w0, m, even...),
		s.writeVersions(w1, m, odd...),
		s.writeVersions(w0, m, upd(0, 200), upd(2, 300), upd(2, 250)), // key 2: an older version after a newer one, in one batch
		s.writeVersions(w1, m, upd(3, 310)),
		s.writeVersions(w1, m, upd(3, 305)), // key 3: ... in the next batch
	)
	c10, c11 := s.preCommit(w0, 1), s.preCommit(w1, 1)
	if s.exactlyOnce() {
		s.checkMerged("after PreCommit(1), before Commit", m, hard)
	}
	s.commit(w0, 1, c10, c11)
	s.merged(m, e1)
	s.checkMerged("after Commit(1): inserts, and updates out of order within a batch and within the epoch", m, hard)

	e2 := slices.Concat(
		s.writeVersions(w0, m, del(4, 400), del(6, 420), ins(6, 415), upd(8, 430)), // key 6: an older insert after its delete
		s.writeVersions(w1, m, upd(5, 410), del(7, 440)),
		s.writeVersions(w1, m, ins(7, 450)), // key 7: inserted again after its delete
	)
	s.commit(w0, 2, s.preCommit(w0, 2), s.preCommit(w1, 2))
	s.merged(m, e2)
	s.checkMerged("after Commit(2): deletes, an older insert after a delete, a newer insert after a delete", m, hard)

	// The process dies after PreCommit(3).
	e3 := slices.Concat(s.writeVersions(w0, m, upd(0, 500)), s.writeVersions(w1, m, del(9, 510)))
	c30, c31 := s.preCommit(w0, 3), s.preCommit(w1, 3)
	if s.exactlyOnce() {
		s.checkMerged("after PreCommit(3) and a crash before Commit", m, hard)
	}
	nw := s.writer(s.destination(), 0)
	switch out := s.recoverGen(nw, 2, s.head(3, 1, c30, c31)); {
	case out == sink.Recoverable:
		s.commit(nw, 3, c30, c31)
	case out == sink.Applied && !s.exactlyOnce():
	default:
		s.t.Fatalf("Recover(2, head epoch 3 pre-committed but not committed) = %v, want recoverable", out)
	}
	s.merged(m, e3)
	s.checkMerged("after the next attempt's Recover and Commit(3)", m, hard)
	s.commit(nw, 3, c30, c31)
	s.checkMerged("after Commit(3) again", m, hard)

	e4 := s.writeVersions(nw, m, upd(2, 600), ins(4, 610), ins(9, 620)) // keys 4 and 9: inserted again, epochs after their deletes
	s.commit(nw, 4, s.preCommit(nw, 4))
	s.merged(m, e4)
	s.checkMerged("after Commit(4): keys deleted in earlier epochs inserted again", m, hard)
}

// checkMergeReplay: versions older than a key's committed one, written
// in a later epoch (a superset source's repeat after a restart), change
// nothing: not a live key's row, and not a deleted key's (soft deletes
// keep its tombstone, which guards it).
func (s *suite) checkMergeReplay() {
	s.needs("Merge", s.dest.Capabilities().Merge)
	m := s.stream("m")
	s.mergeSpec(m, sink.SoftDeletes)
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	e1 := s.writeVersions(w, m, ins(0, 100), ins(1, 101), ins(2, 102), ins(3, 103), upd(0, 200), del(1, 300))
	s.commit(w, 1, s.preCommit(w, 1))
	s.merged(m, e1)
	s.checkMerged("after Commit(1)", m, false)
	e2 := s.writeVersions(w, m, ins(0, 100), upd(0, 150), ins(1, 101), upd(2, 50), ins(3, 103))
	s.commit(w, 2, s.preCommit(w, 2))
	s.merged(m, e2)
	s.checkMerged("after Commit(2), which repeats older versions of committed keys, as a superset source may after a restart:"+
		" a lower "+sink.ColumnSeq+" than the table's must never replace its row, nor bring back a deleted key", m, false)
}
