package runner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

type laneMsg struct {
	barrier bool
	epoch   uint64
	stream  string // the destination table
	source  string // the source's stream
	split   int    // the split whose raw batch the rows came from
	rec     arrow.RecordBatch
}

// epochInfo is what the engine stage knows of an epoch once its barrier
// is aligned: the splits' resume states, the engine's state and counts.
type epochInfo struct {
	epoch  uint64
	states [][]byte // by split index; nil = from the beginning
	engine []byte
	counts map[string]checkpoint.Counts
	side   map[sideKey][]byte // JSON lines of quarantined records and held values
	// release is what the epoch releases of held values (the attempt's
	// first epoch only; release.go); nil when nothing.
	release *heldRelease
}

// sideKey names one side file of an epoch: its kind ("quarantine" or
// "held") and stream.
type sideKey struct{ kind, stream string }

// The kinds of side files, also checkpoint.File.Kind.
const (
	kindQuarantine = "quarantine"
	kindHeld       = "held"
)

type commitMsg struct {
	info  *epochInfo // set by the engine stage
	lane  int        // set by a writer lane, with c
	epoch uint64
	c     sink.Committable
	// extra is what a lane's transforms counted and set aside in the
	// epoch (nil: nothing), merged into info before the epoch commits.
	extra *laneExtra
}

// quarantineLine is one line of a quarantine file.
type quarantineLine struct {
	Stream     string `json:"stream"`
	Split      string `json:"split"`
	Epoch      uint64 `json:"epoch"`
	Generation uint64 `json:"generation"`
	Seq        int64  `json:"seq"`
	Op         string `json:"op"`
	Reason     string `json:"reason"`
	Detail     string `json:"detail"`
	// RejectedBy is "transform" for a row a stream's transform rejected
	// (the engine's rejects leave it out), whose Payload is the row as
	// the transform got it, as a JSON object, and ID its _openetl_id.
	RejectedBy    string `json:"rejected_by,omitempty"`
	ID            string `json:"id,omitempty"`
	Key           string `json:"key,omitempty"`
	KeyBase64     string `json:"key_base64,omitempty"`
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
}

// heldLine is one line of a held-values file: a value the destination
// can't take yet, with what is needed to apply it later.
type heldLine struct {
	Stream      string `json:"stream"`
	Table       string `json:"table"`
	Split       string `json:"split"`
	Epoch       uint64 `json:"epoch"`
	Generation  uint64 `json:"generation"`
	Seq         int64  `json:"seq"`
	Op          string `json:"op"`
	Key         string `json:"key,omitempty"`
	KeyBase64   string `json:"key_base64,omitempty"`
	Column      string `json:"column"`
	Value       string `json:"value,omitempty"`
	ValueBase64 string `json:"value_base64,omitempty"`
	// ID is the row's _openetl_id, which a release patches the row by:
	// on every line this version writes (lines of older versions have it
	// only for values a destination's SchemaChecker rejected, which have
	// no Key). Reason is set on those, with the destination's reason;
	// Reason and Detail are set on a cell the engine held on its own
	// (out_of_range: the row landed with a null there).
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// runEngine runs one engine worker (workers.go): it pushes its streams'
// raw batches through its engine, routes the Arrow rows to the writer
// lanes and aligns barriers.
func (r *runner) runEngine(ctx context.Context, w *engineWorker) error {
	n := len(r.pumps)
	states := make([][]byte, n)
	arrived := make([]bool, n)
	var cur uint64
	open := r.firstEpoch // the epoch records are now read into
	got := 0
	counts := map[string]checkpoint.Counts{}
	side := map[sideKey][]byte{}
	if rl := r.release; rl != nil && w.idx == 0 {
		// Released held values are patches in the first epoch, staged
		// before any row of it.
		for _, m := range rl.patches {
			if err := r.sendLane(ctx, 0, m); err != nil || ctx.Err() != nil {
				return err
			}
		}
		for s, c := range rl.counts {
			counts[s] = c
		}
	}
	for {
		var m pumpMsg
		select {
		case m = <-w.in:
		case <-ctx.Done():
			return nil
		}
		switch m.kind {
		case msgBatch:
			if err := r.push(ctx, w, m, counts, side, open); err != nil {
				return err
			}
		case msgBarrier:
			if got == 0 {
				cur = m.epoch
			}
			if m.epoch != cur || arrived[m.split] {
				return fmt.Errorf("pipeline: internal error: barrier %d from split %q while aligning %d", m.epoch, r.pumps[m.split].id, cur)
			}
			arrived[m.split] = true
			states[m.split] = m.state
			got++
			if got < n {
				continue
			}
			st, err := w.eng.State()
			if err != nil {
				return fmt.Errorf("engine state at epoch %d: %w", cur, err)
			}
			// Every lane gets this worker's barrier; it pre-commits once
			// it has every worker's.
			for i := range r.toLanes {
				select {
				case r.toLanes[i] <- laneMsg{barrier: true, epoch: cur}:
				case <-ctx.Done():
					return nil
				}
			}
			info, err := r.alignPart(w.idx, &epochInfo{epoch: cur, states: states, engine: st, counts: counts, side: side})
			if err != nil {
				return err
			}
			states, arrived, got = make([][]byte, n), make([]bool, n), 0
			counts, side = map[string]checkpoint.Counts{}, map[sideKey][]byte{}
			open = cur + 1
			if info == nil {
				continue // other workers are still aligning it
			}
			if cur == r.firstEpoch {
				info.release = r.release
			}
			if !r.sendCommit(ctx, commitMsg{info: info, epoch: cur}) {
				return nil
			}
			r.barriers.markAligned(cur)
			select {
			case r.alignedCh <- cur:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

func (r *runner) push(ctx context.Context, w *engineWorker, m pumpMsg, counts map[string]checkpoint.Counts, side map[sideKey][]byte,
	epoch uint64) error {
	b := m.batch
	defer r.putBatch(b)
	t0 := time.Now()
	out, err := w.eng.Push(b, r.cfg.Now())
	if err != nil {
		return fmt.Errorf("engine: stream %q: %w", b.Stream, err)
	}
	r.measureBatch(ctx, m.split, b, out, time.Since(t0), epoch)
	c := counts[b.Stream]
	if r.cfg.replay != nil {
		c.Replayed += int64(b.Len()) // read from _quarantine/, not the source
	} else {
		c.Read += int64(b.Len())
	}
	c.Quarantined += int64(len(out.Quarantined))
	c.Filtered += int64(out.Filtered) // a row filter's (engine.StreamSpec.Filter)
	c.Held += int64(len(out.Held))
	if out.Record != nil {
		c.Written += out.Record.NumRows()
	}
	counts[b.Stream] = c
	if c.Read+c.Replayed != c.Written+c.Quarantined+c.Filtered {
		if out.Record != nil {
			out.Record.Release()
		}
		return fmt.Errorf("engine: stream %q: %d rows in, %d written + %d quarantined + %d filtered out", b.Stream, b.Len(), c.Written, c.Quarantined, c.Filtered)
	}
	if len(out.Quarantined) > 0 {
		k := sideKey{kindQuarantine, b.Stream}
		buf := side[k]
		for _, q := range out.Quarantined {
			buf = r.appendQuarantine(buf, m, q, epoch)
		}
		side[k] = buf
		r.mon.rec.Load().quarantined(epoch, b.Stream, len(out.Quarantined), func(i int) string { return string(out.Quarantined[i].Reason) })
	}
	if len(out.Held) > 0 {
		k := sideKey{kindHeld, b.Stream}
		buf := side[k]
		table := out.Table
		if rt := r.router.table(b.Stream); rt != nil {
			table = rt.table // filed under the stream, naming the table its rows go to
		}
		for i, h := range out.Held {
			buf = r.appendHeld(buf, m, h, table, epoch)
			if i == 0 || h.Column != out.Held[i-1].Column || h.Reason != out.Held[i-1].Reason {
				r.reportHeld(w.heldSeen, b.Stream, h, epoch)
			}
		}
		side[k] = buf
	}
	if out.Record == nil {
		return nil
	}
	// Writers get the destination's table name, which the engine gives
	// under the destination's naming rules (the stream name without any).
	table := out.Table
	if table == "" {
		table = b.Stream
	}
	if rt := r.router.table(b.Stream); rt != nil {
		// A routed stream's rows go to its route's table, under the
		// table's schema (route_schema.go).
		rec, changed, err := rt.conform(b.Stream, out.Record)
		if err != nil {
			return &PermanentError{By: CauseEngine, Err: fmt.Errorf("stream %q: %w", b.Stream, err)}
		}
		if changed {
			r.log.Info("routed table's schema widened", "stream", b.Stream, "table", rt.table)
		}
		out.Record, table = rec, rt.table
	}
	// A transformed stream's schema checks come after its transform, on
	// the lanes (transform.go).
	if r.cfg.Transforms[b.Stream] == nil {
		held := c.Held
		if out.Record, err = r.holdBack(ctx, w.checked, b.Stream, m.split, table, out.Record, &c, side, epoch); err != nil {
			out.Record.Release()
			return err
		}
		if c.Held != held {
			counts[b.Stream] = c
		}
	}
	if len(r.toLanes) == 1 {
		return r.sendLane(ctx, 0, laneMsg{stream: table, source: b.Stream, split: m.split, rec: out.Record})
	}
	defer out.Record.Release()
	for lane := range r.toLanes {
		lo, hi := out.LaneOffsets[lane], out.LaneOffsets[lane+1]
		if hi <= lo {
			continue
		}
		lm := laneMsg{stream: table, source: b.Stream, split: m.split, rec: out.Record.NewSlice(int64(lo), int64(hi))}
		if err := r.sendLane(ctx, lane, lm); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) sendLane(ctx context.Context, lane int, m laneMsg) error {
	select {
	case r.toLanes[lane] <- m:
		return nil
	case <-ctx.Done():
		m.rec.Release()
		return nil
	}
}

func (r *runner) sendCommit(ctx context.Context, m commitMsg) bool {
	select {
	case r.toCommit <- m:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *runner) appendQuarantine(buf []byte, m pumpMsg, q engine.Quarantined, epoch uint64) []byte {
	op, seq, key, payload := m.batch.Row(q.Row)
	l := quarantineLine{
		Stream: m.batch.Stream, Split: string(r.pumps[m.split].id),
		Epoch: epoch, Generation: uint64(r.gen),
		Seq: seq, Op: source.Op(op).String(), Reason: string(q.Reason), Detail: q.Detail,
	}
	l.Key, l.KeyBase64 = textOrBase64(key)
	if utf8.Valid(payload) {
		l.Payload = string(payload)
	} else {
		l.PayloadBase64 = base64.StdEncoding.EncodeToString(payload)
	}
	line, _ := json.Marshal(l) // only strings and numbers: cannot fail
	buf = append(buf, line...)
	return append(buf, '\n')
}

func (r *runner) appendHeld(buf []byte, m pumpMsg, h engine.Held, table string, epoch uint64) []byte {
	op, seq, key, payload := m.batch.Row(h.Row)
	l := heldLine{
		Stream: m.batch.Stream, Table: table, Split: string(r.pumps[m.split].id),
		Epoch: epoch, Generation: uint64(r.gen), Seq: seq, Op: source.Op(op).String(), Column: h.Column,
		ID: RecordID(m.batch.Stream, key, payload, seq),
	}
	l.Key, l.KeyBase64 = textOrBase64(key)
	l.Value, l.ValueBase64 = textOrBase64(h.Value)
	l.Reason, l.Detail = string(h.Reason), h.Detail
	line, _ := json.Marshal(l) // only strings and numbers: cannot fail
	buf = append(buf, line...)
	return append(buf, '\n')
}

// heldKey is one kind of hold of a stream's column: its values (Reason
// empty) or cells of it (a Reason).
type heldKey struct {
	stream, column string
	reason         engine.Reason
}

// reportHeld reports, once per attempt for each stream, column and
// reason, that the engine holds values back: a Warn line and a
// schema.blocked event (change "held"), as for the columns a
// destination's SchemaChecker rejects.
func (r *runner) reportHeld(seen map[heldKey]bool, stream string, h engine.Held, epoch uint64) {
	k := heldKey{stream, h.Column, h.Reason}
	if seen[k] {
		return
	}
	seen[k] = true
	detail := h.Detail
	if h.Reason == "" {
		detail = "the destination can't take the column's type (sink.Capabilities.Unsupported)"
		r.log.Warn("the destination can't take a column: its values are held", "stream", stream, "column", h.Column)
	} else {
		r.log.Warn("values the column's type can't hold are held; their rows land with a null there", "stream", stream,
			"column", h.Column, "reason", string(h.Reason), "detail", h.Detail)
	}
	r.mon.emit(Event{Kind: EventSchemaBlocked, Generation: r.gen, Epoch: epoch, Stream: stream, Column: h.Column,
		Change: "held", Detail: detail})
}

// textOrBase64 returns b as text when it is UTF-8, else as base64.
func textOrBase64(b []byte) (text, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

// runLane feeds one writer lane.
func (r *runner) runLane(ctx context.Context, lane int) error {
	w := r.writers[lane]
	lt := r.newLaneTransforms(lane) // nil without transforms
	barriers := 0                   // of the epoch, from engine workers
	for {
		var m laneMsg
		select {
		case m = <-r.toLanes[lane]:
		case <-ctx.Done():
			return nil
		}
		if !m.barrier {
			if fn := r.cfg.Transforms[m.source]; fn != nil {
				if err := lt.run(ctx, w, fn, m); err != nil {
					return err
				}
				continue
			}
			err := w.Write(ctx, m.stream, m.rec)
			m.rec.Release()
			if err != nil {
				return fmt.Errorf("destination: lane %d: write stream %q: %w", lane, m.stream, err)
			}
			continue
		}
		// The engine workers' barriers of an epoch come before any row of
		// the next (workers.go): the last one ends the epoch.
		if barriers++; barriers < len(r.workers) {
			continue
		}
		barriers = 0
		c, err := r.preCommit(ctx, w, lane, m.epoch)
		if err != nil {
			return fmt.Errorf("destination: lane %d: precommit epoch %d: %w", lane, m.epoch, err)
		}
		if !r.sendCommit(ctx, commitMsg{lane: lane, epoch: m.epoch, c: c, extra: lt.take(m.epoch)}) {
			return nil
		}
	}
}

// measureBatch counts a pushed batch in the metrics and the status, logs
// it at Debug and reports its schema changes: once per batch.
func (r *runner) measureBatch(ctx context.Context, split int, b *engine.RawBatch, out engine.Output, took time.Duration, epoch uint64) {
	in, o := r.mon.inst, r.optsFor(b.Stream)
	in.rowsRead.Add(ctx, int64(b.Len()), o.add...)
	in.bytesRead.Add(ctx, int64(b.Bytes()), o.add...)
	in.engineDur.Record(ctx, took.Seconds(), o.rec...)
	if out.Record != nil {
		in.bytesWritten.Add(ctx, recordBytes(out.Record), o.addDest...)
	}
	r.state.addRead(split, b.Stream, int64(b.Len()))
	if r.log.Enabled(ctx, slog.LevelDebug) {
		var rows int64
		if out.Record != nil {
			rows = out.Record.NumRows()
		}
		r.log.Debug("batch", "stream", b.Stream, "epoch", epoch, "rows", b.Len(), "bytes", b.Bytes(),
			"written", rows, "quarantined", len(out.Quarantined), "held", len(out.Held), "took", took)
	}
	for _, ch := range out.SchemaChanges {
		r.log.Info("schema change", "stream", ch.Stream, "column", ch.Column, "kind", ch.Kind, "from", ch.From, "to", ch.To)
		kind := EventSchemaChanged
		if ch.Kind == engine.ChangeBlocked || ch.Kind == engine.ChangeDiscarded {
			kind = EventSchemaBlocked
		}
		r.mon.emit(Event{Kind: kind, Generation: r.gen, Epoch: epoch, Stream: ch.Stream, Column: ch.Column,
			Change: string(ch.Kind), From: ch.From, To: ch.To})
	}
}

// preCommit runs a lane's PreCommit in a span under the epoch's.
func (r *runner) preCommit(ctx context.Context, w sink.Writer, lane int, epoch uint64) (c sink.Committable, err error) {
	ctx, span := r.mon.tracer.Start(r.epochContext(ctx, epoch), "openetl.precommit", trace.WithAttributes(
		AttrEpoch.Int64(int64(epoch)), AttrLane.Int(lane), AttrDestination.String(r.mon.dest)))
	t0 := time.Now()
	c, err = w.PreCommit(ctx, epoch)
	r.mon.inst.precommitDur.Record(ctx, time.Since(t0).Seconds(), r.laneOpts[lane])
	endSpan(span, err)
	return c, err
}
