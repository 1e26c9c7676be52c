package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// checkedSchema is what the destination's sink.SchemaChecker said of a
// table's schema: the fields to hold back (indexes, increasing) and the
// schema of the batches the writers get instead.
type checkedSchema struct {
	sc      *arrow.Schema
	drop    []int
	reasons []string
	out     *arrow.Schema
}

// holdBack asks a destination that implements sink.SchemaChecker about
// rec's schema when it is new for table. When columns are rejected, it
// stages their non-null values as held lines (counted in c.Held) and
// returns rec without them, having released rec; otherwise it returns
// rec. The engine stage calls it, once per batch, for the rows of
// split's raw batch of stream, with its cache of answers (checked, by
// table); a lane calls it for a transform's output, with its own.
func (r *runner) holdBack(ctx context.Context, checked map[string]*checkedSchema, stream string, split int, table string,
	rec arrow.RecordBatch, c *checkpoint.Counts, side map[sideKey][]byte, epoch uint64) (arrow.RecordBatch, error) {
	chk, ok := r.cfg.Destination.(sink.SchemaChecker)
	if !ok {
		return rec, nil
	}
	cs := checked[table]
	if cs == nil || cs.sc != rec.Schema() && !cs.sc.Equal(rec.Schema()) {
		var err error
		if cs, err = r.checkSchema(ctx, chk, stream, table, rec.Schema(), epoch); err != nil {
			return rec, err
		}
		checked[table] = cs
	}
	if len(cs.drop) == 0 {
		return rec, nil
	}
	id, seq, op := metaColumn(rec, sink.ColumnID), metaColumn(rec, sink.ColumnSeq), metaColumn(rec, sink.ColumnOp)
	seqs, _ := seq.(*array.Int64)
	k := sideKey{kindHeld, stream}
	buf := side[k]
	for j, fi := range cs.drop {
		col := rec.Column(fi)
		for i := 0; i < int(rec.NumRows()); i++ {
			if col.IsNull(i) {
				continue
			}
			l := heldLine{Stream: stream, Table: table, Split: string(r.pumps[split].id), Epoch: epoch,
				Generation: uint64(r.gen), Column: cs.sc.Field(fi).Name, Reason: cs.reasons[j]}
			l.Value = col.ValueStr(i)
			if id != nil {
				l.ID = id.ValueStr(i)
			}
			if seqs != nil {
				l.Seq = seqs.Value(i)
			}
			if op != nil {
				l.Op = op.ValueStr(i)
			}
			line, _ := json.Marshal(l) // only strings and numbers: cannot fail
			buf = append(append(buf, line...), '\n')
			c.Held++
		}
	}
	side[k] = buf
	cols := make([]arrow.Array, 0, len(rec.Columns())-len(cs.drop))
	d := 0
	for i, col := range rec.Columns() {
		if d < len(cs.drop) && cs.drop[d] == i {
			d++
			continue
		}
		cols = append(cols, col)
	}
	out := array.NewRecordBatch(cs.out, cols, rec.NumRows())
	rec.Release()
	return out, nil
}

// checkSchema asks the destination about sc and reports what it rejects.
func (r *runner) checkSchema(ctx context.Context, chk sink.SchemaChecker, stream, table string, sc *arrow.Schema, epoch uint64) (*checkedSchema, error) {
	rej, err := chk.CheckSchema(ctx, table, sc)
	if err != nil {
		return nil, fmt.Errorf("destination: check the schema of table %q: %w", table, err)
	}
	cs := &checkedSchema{sc: sc}
	at := make([]int, len(rej)) // each rejected column's field index
	for i, rc := range rej {
		idx := sc.FieldIndices(rc.Column)
		if len(idx) == 0 {
			return nil, fmt.Errorf("destination: check the schema of table %q: it rejects column %q, which the batch doesn't have", table, rc.Column)
		}
		at[i] = idx[0]
	}
	order := make([]int, len(rej))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return at[order[a]] < at[order[b]] })
	for _, i := range order {
		rc, fi := rej[i], at[i]
		if len(cs.drop) > 0 && cs.drop[len(cs.drop)-1] == fi {
			continue
		}
		cs.drop, cs.reasons = append(cs.drop, fi), append(cs.reasons, rc.Reason)
		to := sc.Field(fi).Type.String()
		r.log.Warn("the destination can't take a column: its values are held", "stream", stream, "table", table,
			"column", rc.Column, "type", to, "reason", rc.Reason)
		r.mon.emit(Event{Kind: EventSchemaBlocked, Generation: r.gen, Epoch: epoch, Stream: stream, Column: rc.Column,
			Change: "held", To: to})
	}
	if len(cs.drop) > 0 {
		fields := make([]arrow.Field, 0, sc.NumFields()-len(cs.drop))
		d := 0
		for i, f := range sc.Fields() {
			if d < len(cs.drop) && cs.drop[d] == i {
				d++
				continue
			}
			fields = append(fields, f)
		}
		md := sc.Metadata()
		cs.out = arrow.NewSchema(fields, &md)
	}
	return cs, nil
}

// metaColumn returns rec's column name, matched without regard to case
// (naming rules may fold it), or nil.
func metaColumn(rec arrow.RecordBatch, name string) arrow.Array {
	for i, f := range rec.Schema().Fields() {
		if strings.EqualFold(f.Name, name) {
			return rec.Column(i)
		}
	}
	return nil
}
