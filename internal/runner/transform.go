package runner

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/zeebo/xxh3"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
)

// Transforms: a stream's Go hook on Arrow batches (etl.Builder.Transform
// documents the contract users see; docs/transforms.md the design).
// A writer lane runs it on each batch of a transformed stream, after the
// engine and before the destination's Write:
//
//	engine batch ─▶ Transform ─▶ checks ─▶ SchemaChecker (holdBack) ─▶ Write
//	                  │ Reject
//	                  └▶ quarantine lines, counted with the lane's counts
//
// The lane keeps what its transforms count and set aside per epoch and
// hands it to the commit goroutine with its committable (laneExtra), which
// merges it into the epoch's counts and side files before the record is
// written. Per batch the machinery allocates nothing: the call, its
// output slice and the per-table checks are reused, and a schema is
// checked only when it changes.

// Transform is a stream's Go hook. It is called with a TransformCall that
// its lane reuses, valid until it returns; it emits the batches to write
// (TransformCall.Emit for rows that stand for rows it got, at most one
// each; EmitAdded for rows it makes beyond those) and rejects rows
// (TransformCall.Reject). An error fails the epoch; a panic is recovered
// and fails it too.
type Transform func(ctx context.Context, c *TransformCall) error

// TransformCall is one call of a Transform: the rows of one engine batch
// routed to one lane, all of one epoch. It is not safe for concurrent use.
type TransformCall struct {
	// Stream is the source's stream; Table its destination table.
	Stream, Table string
	// Epoch is the epoch the rows are read into and Lane the writer lane:
	// for logs only (they differ between attempts for the same rows).
	Epoch uint64
	Lane  int
	// In is the batch, owned by the runner: Retain it to keep it past the
	// call.
	In arrow.RecordBatch

	out     []emitted
	rejects []Reject
	open    bool
}

// emitted is a batch a transform emitted; added: with EmitAdded.
type emitted struct {
	rec   arrow.RecordBatch
	added bool
}

// Reject is a row a transform rejected, with why.
type Reject struct {
	Row            int
	Reason, Detail string
}

// Emit adds rec to the rows written for this call, taking a reference
// (rec.Retain): the caller still releases its own. Its rows stand for
// rows of In, at most one each; the rows In had that no emitted row
// stands for, less those rejected, are counted filtered. A nil rec is
// ignored.
func (c *TransformCall) Emit(rec arrow.RecordBatch) { c.emit(rec, false) }

// EmitAdded is Emit for rows made beyond the rows of In (a row split in
// several: all but one), counted added.
func (c *TransformCall) EmitAdded(rec arrow.RecordBatch) { c.emit(rec, true) }

func (c *TransformCall) emit(rec arrow.RecordBatch, added bool) {
	if !c.open {
		panic("openetl: a transform's batch was used after the transform returned")
	}
	if rec == nil {
		return
	}
	rec.Retain()
	c.out = append(c.out, emitted{rec: rec, added: added})
}

// Reject marks row (an index into In) as rejected, for reason (required)
// and detail: the runner quarantines it.
func (c *TransformCall) Reject(row int, reason, detail string) {
	if !c.open {
		panic("openetl: a transform's batch was used after the transform returned")
	}
	c.rejects = append(c.rejects, Reject{Row: row, Reason: reason, Detail: detail})
}

// ErrTransformOutput is wrapped by the error that fails an epoch because
// a transform's output breaks the rules: a metadata or key column
// dropped or retyped, nulls in _openetl_id, _openetl_seq or _openetl_op,
// a column of its own named with the reserved prefix or not under the
// destination's naming rules, a schema that loses or narrows a column it
// had, a bad Reject, more rows emitted with Emit than it got.
var ErrTransformOutput = errors.New("transform output refused")

// laneTransforms is one lane's transform state.
type laneTransforms struct {
	r     *runner
	lane  int
	epoch uint64 // the epoch the lane's rows are read into
	call  TransformCall
	// Per epoch, handed to the commit goroutine at the barrier.
	counts map[string]checkpoint.Counts
	side   map[sideKey][]byte
	// tables holds, by destination table, the last output schema checked
	// and where its metadata columns are.
	tables  map[string]*outSchema
	checked map[string]*checkedSchema // the lane's own SchemaChecker answers
	opts    map[string]streamOpts
	row     bytes.Buffer // a rejected row's JSON
}

// outSchema is a table's last checked output schema.
type outSchema struct {
	sc   *arrow.Schema
	meta []int // fields that must have no nulls: _openetl_id, _openetl_seq, _openetl_op
}

// laneExtra is what a lane's transforms did in one epoch.
type laneExtra struct {
	counts map[string]checkpoint.Counts // deltas of the engine stage's counts
	side   map[sideKey][]byte
}

func (r *runner) newLaneTransforms(lane int) *laneTransforms {
	if len(r.cfg.Transforms) == 0 {
		return nil
	}
	return &laneTransforms{r: r, lane: lane, epoch: r.firstEpoch, counts: map[string]checkpoint.Counts{},
		side: map[sideKey][]byte{}, tables: map[string]*outSchema{}, checked: map[string]*checkedSchema{},
		opts: map[string]streamOpts{}}
}

// take returns what the lane's transforms did in epoch, whose barrier the
// lane has just passed, and starts the next epoch; nil when nothing.
func (lt *laneTransforms) take(epoch uint64) *laneExtra {
	if lt == nil {
		return nil
	}
	lt.epoch = epoch + 1
	if len(lt.counts) == 0 && len(lt.side) == 0 {
		return nil
	}
	e := &laneExtra{counts: lt.counts, side: lt.side}
	lt.counts, lt.side = map[string]checkpoint.Counts{}, map[sideKey][]byte{}
	return e
}

// mergeExtras adds what the lanes' transforms did (by lane; nil entries
// did nothing) to the epoch's counts and side files, lane by lane.
func mergeExtras(info *epochInfo, extras []*laneExtra) {
	for _, e := range extras {
		if e == nil {
			continue
		}
		for k, c := range e.counts {
			info.counts[k] = info.counts[k].Add(c)
		}
		for _, k := range sortedSideKeys(e.side) {
			info.side[k] = append(info.side[k], e.side[k]...)
		}
	}
}

// run transforms one lane message and writes what the transform emits.
func (lt *laneTransforms) run(ctx context.Context, w sink.Writer, fn Transform, m laneMsg) (err error) {
	r, c := lt.r, &lt.call
	c.Stream, c.Table, c.Epoch, c.Lane, c.In = m.source, m.stream, lt.epoch, lt.lane, m.rec
	c.out, c.rejects, c.open = c.out[:0], c.rejects[:0], true
	defer func() {
		for i, e := range c.out {
			e.rec.Release()
			c.out[i] = emitted{}
		}
		c.out, c.In = c.out[:0], nil
		m.rec.Release()
	}()
	t0 := time.Now()
	err = callTransform(ctx, fn, c)
	c.open = false
	o, ok := lt.opts[m.source]
	if !ok {
		o = newStreamOpts(r.cfg.Name, m.source, r.mon.dest)
		lt.opts[m.source] = o
	}
	r.mon.inst.transformDur.Record(ctx, time.Since(t0).Seconds(), o.rec...)
	if err != nil {
		return lt.fail(m, err)
	}
	cnt := lt.counts[m.source]
	if len(c.rejects) > 0 {
		if err := lt.quarantine(m); err != nil {
			return lt.fail(m, err)
		}
	}
	in, rejected := m.rec.NumRows(), int64(len(c.rejects))
	var rows, added int64
	for _, e := range c.out {
		if err := lt.check(m, e.rec); err != nil {
			return lt.fail(m, err)
		}
		rows += e.rec.NumRows()
		if e.added {
			added += e.rec.NumRows()
		}
	}
	if kept := rows - added; kept > in-rejected {
		return lt.fail(m, fmt.Errorf("%w: Emit wrote %d rows for the %d rows of the batch not rejected: emit the rows made beyond those with EmitAdded",
			ErrTransformOutput, kept, in-rejected))
	}
	for i, e := range c.out {
		if e.rec.NumRows() == 0 {
			continue
		}
		// holdBack releases the batch when it returns another: the
		// deferred release must see the one it returned.
		if c.out[i].rec, err = r.holdBack(ctx, lt.checked, m.source, m.split, m.stream, e.rec, &cnt, lt.side, lt.epoch); err != nil {
			return err
		}
		if err := w.Write(ctx, m.stream, c.out[i].rec); err != nil {
			return fmt.Errorf("destination: lane %d: write stream %q: %w", lt.lane, m.stream, err)
		}
	}
	// The engine stage counted the batch's rows as written: count here
	// what the transform made of them.
	cnt.Written += rows - in
	cnt.Quarantined += rejected
	cnt.Filtered += in - rejected - (rows - added)
	cnt.Added += added
	lt.counts[m.source] = cnt
	return nil
}

// callTransform calls fn, turning a panic into an error. (Package etl's
// wrapper recovers first, with the stack; this is for other callers.)
func callTransform(ctx context.Context, fn Transform, c *TransformCall) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("transform panicked: %v", v)
		}
	}()
	return fn(ctx, c)
}

func (lt *laneTransforms) fail(m laneMsg, err error) error {
	return fmt.Errorf("transform: stream %q (table %q), epoch %d, lane %d: %w", m.source, m.stream, lt.epoch, lt.lane, err)
}

// quarantine stages the call's rejected rows as quarantine lines: the
// row as the transform got it, as a JSON object, with its seq, op and
// _openetl_id.
func (lt *laneTransforms) quarantine(m laneMsg) error {
	r, c := lt.r, &lt.call
	rj := c.rejects
	slices.SortFunc(rj, func(a, b Reject) int { return cmp.Compare(a.Row, b.Row) })
	n := int(c.In.NumRows())
	for i, x := range rj {
		switch {
		case x.Row < 0 || x.Row >= n:
			return fmt.Errorf("%w: Reject of row %d: the batch has rows 0 to %d", ErrTransformOutput, x.Row, n-1)
		case i > 0 && rj[i-1].Row == x.Row:
			return fmt.Errorf("%w: row %d rejected twice", ErrTransformOutput, x.Row)
		case x.Reason == "":
			return fmt.Errorf("%w: Reject of row %d: no reason", ErrTransformOutput, x.Row)
		}
	}
	id, seq, op := metaColumn(c.In, sink.ColumnID), metaColumn(c.In, sink.ColumnSeq), metaColumn(c.In, sink.ColumnOp)
	seqs, _ := seq.(*array.Int64)
	k := sideKey{kindQuarantine, m.source}
	buf := lt.side[k]
	for _, x := range rj {
		l := quarantineLine{Stream: m.source, Split: string(r.pumps[m.split].id), Epoch: lt.epoch, Generation: uint64(r.gen),
			Reason: x.Reason, Detail: x.Detail, RejectedBy: "transform"}
		if id != nil && id.IsValid(x.Row) {
			l.ID = id.ValueStr(x.Row)
		}
		if seqs != nil {
			l.Seq = seqs.Value(x.Row)
		}
		if op != nil && op.IsValid(x.Row) {
			l.Op = op.ValueStr(x.Row)
		}
		lt.row.Reset()
		one := c.In.NewSlice(int64(x.Row), int64(x.Row+1))
		err := array.RecordToJSON(one, &lt.row)
		one.Release()
		if err != nil {
			l.Detail = strings.TrimSpace(l.Detail + " (the row could not be rendered as JSON: " + err.Error() + ")")
		} else {
			l.Payload = strings.TrimSuffix(lt.row.String(), "\n")
		}
		line, _ := json.Marshal(l) // only strings and numbers: cannot fail
		buf = append(append(buf, line...), '\n')
	}
	lt.side[k] = buf
	r.mon.rec.Load().quarantined(lt.epoch, m.source, len(rj), func(i int) string { return rj[i].Reason })
	return nil
}

// check refuses an emitted batch that breaks the rules (see
// ErrTransformOutput). Its schema is checked when it changes; each batch's
// metadata columns are checked for nulls.
func (lt *laneTransforms) check(m laneMsg, rec arrow.RecordBatch) error {
	sc := rec.Schema()
	t := lt.tables[m.stream]
	if t == nil || t.sc != sc && !t.sc.Equal(sc) {
		var prev *arrow.Schema
		if t != nil {
			prev = t.sc
		}
		meta, err := lt.checkSchema(m, m.rec.Schema(), prev, sc)
		if err != nil {
			return err
		}
		t = &outSchema{sc: sc, meta: meta}
		lt.tables[m.stream] = t
	} else {
		t.sc = sc
	}
	for _, i := range t.meta {
		if col := rec.Column(i); col.NullN() > 0 {
			return fmt.Errorf("%w: column %s has %d nulls: every row needs one (copy it from the row it came from)",
				ErrTransformOutput, sc.Field(i).Name, col.NullN())
		}
	}
	return nil
}

// checkSchema checks an output schema out against the input schema in
// and the table's previous output schema prev (nil: none in this attempt
// on this lane), and returns the indexes in out of the metadata columns
// that must have no nulls.
func (lt *laneTransforms) checkSchema(m laneMsg, in, prev, out *arrow.Schema) ([]int, error) {
	var meta []int
	seen := map[string]bool{}
	for _, f := range out.Fields() {
		if seen[f.Name] {
			return nil, fmt.Errorf("%w: two columns named %q", ErrTransformOutput, f.Name)
		}
		seen[f.Name] = true
	}
	for _, f := range in.Fields() {
		if !reserved(f.Name) {
			continue
		}
		idx := out.FieldIndices(f.Name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("%w: metadata column %s dropped: a transform must keep every _openetl_ column of its input, unchanged in type (exactly once depends on them)",
				ErrTransformOutput, f.Name)
		}
		if g := out.Field(idx[0]); !arrow.TypeEqual(f.Type, g.Type) {
			return nil, fmt.Errorf("%w: metadata column %s changed type from %s to %s", ErrTransformOutput, f.Name, f.Type, g.Type)
		}
		for _, name := range []string{sink.ColumnID, sink.ColumnSeq, sink.ColumnOp} {
			if strings.EqualFold(f.Name, name) {
				meta = append(meta, idx[0])
			}
		}
	}
	caps := lt.r.cfg.Destination.Capabilities()
	for _, f := range out.Fields() {
		if len(in.FieldIndices(f.Name)) > 0 {
			continue
		}
		if reserved(f.Name) {
			return nil, fmt.Errorf("%w: column %s: names starting with %s are the pipeline's own", ErrTransformOutput, f.Name, sink.ReservedPrefix)
		}
		if b := baseName(caps, f.Name); b != f.Name {
			return nil, fmt.Errorf("%w: new column %q is not a name the destination takes as it is: name it %q", ErrTransformOutput, f.Name, b)
		}
	}
	for _, spec := range lt.r.specs {
		if spec.Table != m.stream {
			continue
		}
		for _, k := range spec.Key {
			if len(out.FieldIndices(k)) == 0 && len(in.FieldIndices(k)) > 0 {
				return nil, fmt.Errorf("%w: key column %q dropped: the destination writes the stream by its key", ErrTransformOutput, k)
			}
		}
	}
	if prev == nil {
		return meta, nil
	}
	for _, f := range prev.Fields() {
		idx := out.FieldIndices(f.Name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("%w: column %q, in the transform's earlier batches of table %q, is missing: its output may gain columns and widen types as the engine's does, never lose a column (emit it, null)",
				ErrTransformOutput, f.Name, m.stream)
		}
		if g := out.Field(idx[0]); !widens(f.Type, g.Type) {
			return nil, fmt.Errorf("%w: column %q changed from %s to %s, which is not a widening the engine makes (int64 to float64 or decimal, a decimal to a wider one, a struct gaining fields, anything to utf8)",
				ErrTransformOutput, f.Name, f.Type, g.Type)
		}
	}
	for _, g := range out.Fields() {
		if len(prev.FieldIndices(g.Name)) == 0 && !g.Nullable {
			return nil, fmt.Errorf("%w: new column %q is not nullable: the rows written before it have none", ErrTransformOutput, g.Name)
		}
	}
	return meta, nil
}

// reserved reports whether name starts with the reserved prefix, in any
// case.
func reserved(name string) bool {
	return len(name) >= len(sink.ReservedPrefix) && strings.EqualFold(name[:len(sink.ReservedPrefix)], sink.ReservedPrefix)
}

// widens reports whether a column of type from may become type to, as
// the engine's widenings go (package engine's join table).
func widens(from, to arrow.DataType) bool {
	if arrow.TypeEqual(from, to) || from.ID() == arrow.NULL {
		return true
	}
	switch to.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		return true
	}
	switch f := from.(type) {
	case *arrow.Int64Type:
		return to.ID() == arrow.FLOAT64 || to.ID() == arrow.DECIMAL128
	case *arrow.Decimal128Type:
		t, ok := to.(*arrow.Decimal128Type)
		return ok && t.Scale >= f.Scale && t.Precision-t.Scale >= f.Precision-f.Scale
	case *arrow.StructType:
		t, ok := to.(*arrow.StructType)
		if !ok {
			return false
		}
		for _, ff := range f.Fields() {
			i, found := t.FieldIdx(ff.Name)
			if !found || !widens(ff.Type, t.Field(i).Type) {
				return false
			}
		}
		return true
	case *arrow.ListType:
		t, ok := to.(*arrow.ListType)
		return ok && widens(f.Elem(), t.Elem())
	}
	return false
}

// noteTransforms says in each transformed stream's guarantee that what it
// delivers is what its transform returns.
func noteTransforms(cfg Config, gs []delivery.Guarantee) {
	for i := range gs {
		if note := policyNote(cfg, gs[i].Stream); note != "" {
			gs[i].Reason += note
		}
		gs[i].Reason += routeNote(cfg, gs[i].Stream)
		if cfg.Transforms[gs[i].Stream] != nil {
			gs[i].Reason += "; its rows pass through a Go transform (Builder.Transform), so it delivers what the transform returns, at this level only if the transform is deterministic"
		}
	}
}

// DerivedID returns the _openetl_id of the n-th row (from 1) a transform
// makes from the row whose ID is id: the 32 lowercase hex digits of the
// big-endian XXH3-128 (seed 0) of
//
//	"openetl.derived" ‖ 0x00 ‖ u32le(len(id)) ‖ id ‖ u32le(n)
//
// Fixed forever, like the record IDs the engine gives: stable across
// replays because id is.
func DerivedID(id string, n int) string {
	b := make([]byte, 0, 16+4+len(id)+4)
	b = append(b, "openetl.derived\x00"...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(id)))
	b = append(b, id...)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	h := xxh3.Hash128(b).Bytes()
	return fmt.Sprintf("%x", h[:])
}

// policyNote says what a stream's column rules and row filter make of
// what it delivers; "" when it has none.
func policyNote(cfg Config, stream string) string {
	rules, filter := cfg.Rules[stream], cfg.Filters[stream]
	if len(rules) == 0 && filter == nil {
		return ""
	}
	var kinds []string
	for _, r := range rules {
		k := string(r.Kind)
		if r.Kind == engine.RuleHash {
			k = "hash (HMAC-SHA-256)"
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	var parts []string
	if len(kinds) > 0 {
		parts = append(parts, "column policies ("+strings.Join(kinds, ", ")+") change the delivered columns' names and values")
	}
	if filter != nil {
		f := "a row filter delivers only the rows it keeps (the rest counted as filtered)"
		if cfg.Modes[stream] == delivery.Merge {
			f = "a row filter makes an insert or update it fails a delete of the key, so the table holds the source rows it keeps"
		}
		parts = append(parts, f)
	}
	return "; in the engine, " + strings.Join(parts, "; ") + ": the level holds for the rows so made, and _openetl_id is the source row's"
}
