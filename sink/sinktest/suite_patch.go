package sinktest

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/sink"
)

// patch is one row of a patch batch: set value on the row with id.
type patch struct {
	id, value string
	seq       int64
}

// patchBatch builds a patch batch of the column value.
func (s *suite) patchBatch(ps []patch) arrow.RecordBatch {
	md := arrow.NewMetadata([]string{sink.PatchMetadataKey}, []string{sink.PatchMetadataValue})
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "value", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	}, &md)
	b := array.NewRecordBuilder(s.mem, sc)
	defer b.Release()
	for _, p := range ps {
		b.Field(0).(*array.StringBuilder).Append(p.value)
		b.Field(1).(*array.StringBuilder).Append(p.id)
		b.Field(2).(*array.Int64Builder).Append(p.seq)
	}
	return b.NewRecordBatch()
}

func (s *suite) writePatches(l *lane, stream string, ps []patch) {
	s.t.Helper()
	rec := s.patchBatch(ps)
	defer rec.Release()
	if err := l.Write(s.ctx(), stream, rec); err != nil {
		s.t.Fatalf("Write(%s, a patch batch of %d rows) on lane %d: %v", stream, len(ps), l.n, err)
	}
}

func (s *suite) checkPatches() {
	s.needs("patches", s.dest.Capabilities().Patches)
	a := s.stream("a")
	w := s.writer(s.dest, 0)
	s.recoverGen(w, 1, nil)
	rows := s.write(w, a, 12, false)
	c1 := s.preCommit(w, 1)
	s.commit(w, 1, c1)
	s.expect(a, rows)
	s.checkVisible("after Commit(1)", a)

	// Rows 0, 5 and 10 have a null value; row 1 has one.
	ps := []patch{
		{id: rows[0].id, value: "patched-0", seq: rows[0].seq},
		{id: rows[5].id, value: "patched-5", seq: rows[5].seq},
		{id: rows[1].id, value: "overwritten", seq: rows[1].seq},
		{id: rowID(a, 1_000_000), value: "nobody", seq: 1},
	}
	// An attempt that stages the patches and dies before its commit
	// point changes nothing.
	dead := s.writer(s.destination(), 0)
	s.recoverGen(dead, 2, s.head(1, 1, c1))
	s.writePatches(dead, a, ps)
	s.preCommit(dead, 2)
	if s.exactlyOnce() {
		s.checkVisible("after a patch batch's PreCommit(2)", a)
	}
	s.close(dead)

	w2 := s.writer(s.destination(), 0)
	s.recoverGen(w2, 3, s.head(1, 1, c1))
	s.writePatches(w2, a, ps[:2])
	s.writePatches(w2, a, ps[2:])
	more := s.write(w2, a, 1, false) // row 12, written with them
	c2 := s.preCommit(w2, 2)
	if s.exactlyOnce() {
		s.checkVisible("after PreCommit(2) of the patches", a)
	}
	s.commit(w2, 2, c2)
	s.mu.Lock()
	want := s.want[a]
	for i := range want {
		switch want[i].id {
		case rows[0].id:
			want[i].patched = "patched-0"
		case rows[5].id:
			want[i].patched = "patched-5"
		}
	}
	s.mu.Unlock()
	s.expect(a, more)
	s.checkVisible("after Commit(2) of the patches", a)
	s.commit(w2, 2, c2)
	s.checkVisible("after Commit(2) again", a)
}
