package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// With Options.Transforms the workload gives some streams a Go transform
// (etl.Builder.Transform), picked by the seed from a random stream of its
// own: the identity (each batch emitted as it came), or the filter, which
// decides by each record's "id" (a keyed stream's key, so every version of
// a key shares its fate): it rejects ids ≡ 3 (mod 7) (quarantined, reason
// sim_rejected), drops ids ≡ 1 (mod 5), adds a column tag = "t<id>" to
// the rows it keeps, and, in streams not written by merge, writes a second
// row for ids ≡ 2 (mod 4) with its own _openetl_id (etl.DerivedID). The
// checks then expect what the transform makes of the source's records.

// transformKind is the transform the workload gives a stream.
type transformKind uint8

const (
	tfNone transformKind = iota
	tfIdentity
	tfFilter
	// tfRowFilter is no Go transform but the engine's row filter
	// (etl.Builder.Filter) n < rowFilterBelow: appended streams drop the
	// inserts and updates that fail it, merged ones write them as deletes
	// of their key; deletes pass.
	tfRowFilter
)

// rowFilterBelow is the row filter's bound on the documents' "n".
const rowFilterBelow = 500

func (k transformKind) String() string {
	return [...]string{"none", "identity", "filter", "rowfilter"}[k]
}

// The filter's rules.
func filterRejects(id int64) bool { return id%7 == 3 }
func filterDrops(id int64) bool   { return !filterRejects(id) && id%5 == 1 }
func filterDoubles(id int64, merged bool) bool {
	return !merged && !filterRejects(id) && !filterDrops(id) && id%4 == 2
}

// filtersConfig returns the runner's row filters for the workload.
func (w *workload) filtersConfig() map[string]*engine.Cond {
	var out map[string]*engine.Cond
	for name, k := range w.transforms {
		if k == tfRowFilter {
			if out == nil {
				out = map[string]*engine.Cond{}
			}
			out[name] = &engine.Cond{Op: engine.OpLt, Column: "n", Value: int64(rowFilterBelow)}
		}
	}
	return out
}

// rowFilterKeeps says whether a good record passes the row filter.
func rowFilterKeeps(r sourcetest.FakeRecord) bool {
	if r.Op == source.OpDelete {
		return true
	}
	var doc struct {
		N *int64 `json:"n"`
	}
	err := json.NewDecoder(bytes.NewReader(r.Payload)).Decode(&doc)
	return err == nil && doc.N != nil && *doc.N < rowFilterBelow
}

// transformsConfig returns the runner's transforms for the workload.
func (w *workload) transformsConfig() map[string]runner.Transform {
	if len(w.transforms) == 0 {
		return nil
	}
	out := map[string]runner.Transform{}
	for name, k := range w.transforms {
		switch k {
		case tfIdentity:
			out[name] = identityTransform
		case tfFilter:
			out[name] = filterTransform(w.modes[name] == delivery.Merge, w.flakyFilter)
		}
	}
	return out
}

func identityTransform(_ context.Context, c *runner.TransformCall) error {
	c.Emit(c.In)
	return nil
}

// filterTransform is the filter; merged: the stream is written by merge
// (no second rows); flaky: it also drops the first row of about one batch
// in three, at random.
func filterTransform(merged, flaky bool) runner.Transform {
	return func(_ context.Context, c *runner.TransformCall) error {
		flakyRow := -1
		if flaky && rand.IntN(3) == 0 {
			flakyRow = 0
		}
		in := c.In
		ids, ok := column(in, "id").(*array.Int64)
		if !ok {
			return fmt.Errorf("sim: stream %s: no int64 column id in %v", c.Stream, in.Schema())
		}
		idCol := column(in, sink.ColumnID).(*array.String)
		outSchema := withTag(in.Schema())
		n := int(in.NumRows())
		var doubled []int
		// Runs of kept rows, emitted as slices of the batch with the tag.
		emit := func(lo, hi int) {
			if hi <= lo {
				return
			}
			part := in.NewSlice(int64(lo), int64(hi))
			defer part.Release()
			tag := tags(ids, lo, hi, nil)
			defer tag.Release()
			rec := array.NewRecordBatch(outSchema, append(append([]arrow.Array{}, part.Columns()...), tag), int64(hi-lo))
			c.Emit(rec)
			rec.Release()
		}
		lo := 0
		for i := range n {
			id := ids.Value(i)
			switch {
			case filterRejects(id):
				c.Reject(i, "sim_rejected", fmt.Sprintf("id %d", id))
			case filterDrops(id), i == flakyRow:
			default:
				if filterDoubles(id, merged) {
					doubled = append(doubled, i)
				}
				continue
			}
			emit(lo, i)
			lo = i + 1
		}
		emit(lo, n)
		if len(doubled) == 0 {
			return nil
		}
		// The second rows: the rows doubled, each with a derived ID.
		cols := make([]arrow.Array, 0, in.NumCols()+1)
		for j := range int(in.NumCols()) {
			if in.ColumnName(j) == sink.ColumnID {
				b := array.NewStringBuilder(memory.DefaultAllocator)
				for _, i := range doubled {
					b.Append(runner.DerivedID(idCol.Value(i), 1))
				}
				cols = append(cols, b.NewArray())
				b.Release()
				continue
			}
			parts := make([]arrow.Array, len(doubled))
			for k, i := range doubled {
				parts[k] = array.NewSlice(in.Column(j), int64(i), int64(i+1))
			}
			col, err := array.Concatenate(parts, memory.DefaultAllocator)
			for _, p := range parts {
				p.Release()
			}
			if err != nil {
				return err
			}
			cols = append(cols, col)
		}
		cols = append(cols, tags(ids, 0, 0, doubled))
		rec := array.NewRecordBatch(outSchema, cols, int64(len(doubled)))
		for _, col := range cols {
			col.Release()
		}
		c.EmitAdded(rec)
		rec.Release()
		return nil
	}
}

// withTag returns sc with the filter's tag column after its fields.
func withTag(sc *arrow.Schema) *arrow.Schema {
	fields := append(append([]arrow.Field{}, sc.Fields()...), arrow.Field{Name: "tag", Type: arrow.BinaryTypes.String, Nullable: true})
	md := sc.Metadata()
	return arrow.NewSchema(fields, &md)
}

// tags builds the tag column of rows lo..hi of ids, or of rows, when set.
func tags(ids *array.Int64, lo, hi int, rows []int) arrow.Array {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	add := func(i int) { b.Append("t" + strconv.FormatInt(ids.Value(i), 10)) }
	if rows != nil {
		for _, i := range rows {
			add(i)
		}
	} else {
		for i := lo; i < hi; i++ {
			add(i)
		}
	}
	return b.NewArray()
}

func column(rec arrow.RecordBatch, name string) arrow.Array {
	for i, f := range rec.Schema().Fields() {
		if f.Name == name {
			return rec.Column(i)
		}
	}
	return nil
}

// fakeID returns a good record's "id".
func fakeID(r sourcetest.FakeRecord) (int64, bool) {
	var doc struct {
		ID *int64 `json:"id"`
	}
	if err := json.NewDecoder(bytes.NewReader(r.Payload)).Decode(&doc); err != nil || doc.ID == nil {
		return 0, false
	}
	return *doc.ID, true
}

// expectation is what a stream's transform makes of its source's
// records: the IDs a reader must see, with the records they came from,
// and how many records it rejects, drops and adds.
type expectation struct {
	want                     map[string]sourcetest.FakeRecord
	rejected, dropped, added int
	// gone holds the keys the transform never lets through.
	gone map[string]bool
}

// expect works out stream name's expectation from its good records.
func (s *sim) expect(name string, recs []sourcetest.FakeRecord) expectation {
	e := expectation{want: map[string]sourcetest.FakeRecord{}, gone: map[string]bool{}}
	kind := s.w.transforms[name]
	merged := s.w.modes[name] == delivery.Merge
	for _, r := range recs {
		if r.Bad {
			continue
		}
		id := RecordID(name, r.Key, r.Payload, r.Seq)
		if kind == tfRowFilter {
			switch {
			case rowFilterKeeps(r) || merged:
				e.want[id] = r // a merged stream's failing row is a delete
			default:
				e.dropped++
			}
			continue
		}
		if kind != tfFilter {
			e.want[id] = r
			continue
		}
		v, ok := fakeID(r)
		if !ok {
			s.violate("stream %s: record %s has no id", name, id)
			continue
		}
		switch {
		case filterRejects(v):
			e.rejected++
			e.gone[string(r.Key)] = true
		case filterDrops(v):
			e.dropped++
			e.gone[string(r.Key)] = true
		default:
			e.want[id] = r
			if filterDoubles(v, merged) {
				e.want[runner.DerivedID(id, 1)] = r
				e.added++
			}
		}
	}
	if kind == tfRowFilter && merged {
		// The table holds the keys whose latest version matches.
		for k, r := range s.src.Latest(name) {
			if !rowFilterKeeps(r) {
				e.gone[k] = true
			}
		}
	}
	return e
}
