package clickhouse

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// clusterWriter is one lane's sink.Writer on a Cluster: it routes each
// row to its shard's writer, a writer of one server like any other, and
// commits and recovers the shards one by one under the same epoch.
//
// Write, PreCommit and Close run on the lane's goroutine and own idx,
// hashes and err; Commit and Recover run on the commit goroutine.
type clusterWriter struct {
	d        *Destination
	pipeline string
	shards   []*writer
	keys     map[string][]string // merge tables' keys, by table
	shardBy  map[string]string   // Cluster.ShardBy

	hashes []uint64
	idx    [][]int64 // per shard: the rows of the batch being routed
	err    error
	closed bool
}

var _ sink.Writer = (*clusterWriter)(nil)

// clusterCommittable is the JSON form of a cluster lane's committable:
// each shard's writer's committable, index = shard.
type clusterCommittable struct {
	Format int               `json:"format"`
	Shards []json.RawMessage `json:"shards"`
}

const clusterCommittableFormat = 1

func (d *Destination) clusterWriter(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w := &clusterWriter{d: d, pipeline: cfg.Pipeline, keys: make(map[string][]string), shardBy: d.shardBy, idx: make([][]int64, len(d.shards))}
	for _, s := range cfg.Streams {
		if s.Mode == sink.Merge {
			w.keys[s.Table] = s.Key
		}
	}
	for i, s := range d.shards {
		sw, err := s.Writer(ctx, cfg)
		if err != nil {
			_ = w.Close(ctx)
			return nil, fmt.Errorf("clickhouse: shard %d: %w", i, err)
		}
		w.shards = append(w.shards, sw.(*writer))
	}
	return w, nil
}

// Write routes rec's rows to their shards (package doc, Clusters) and
// writes each shard's share to its writer: the whole batch when all its
// rows go to one shard, else one copy per shard of the rows it gets.
func (w *clusterWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	switch {
	case w.closed:
		return errors.New("clickhouse: Write after Close")
	case w.err != nil:
		return w.err
	case rec.NumRows() == 0:
		return nil
	case isPatch(rec.Schema()):
		// A mutation runs on each replica by itself, reading the
		// staging table there: not verifiable across replicas, so a
		// cluster declares no Patches (package doc, Held values).
		return fmt.Errorf("clickhouse: a patch batch of %q: a cluster applies no patches (Capabilities.Patches is false)", stream)
	}
	if err := w.write(ctx, stream, rec); err != nil {
		w.err = err
		return err
	}
	return nil
}

func (w *clusterWriter) write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	if len(w.shards) == 1 && w.shardBy[stream] == "" {
		return w.shards[0].Write(ctx, stream, rec)
	}
	if err := w.route(stream, rec); err != nil {
		return err
	}
	for s, rows := range w.idx {
		switch len(rows) {
		case 0:
			continue
		case n:
			return w.shards[s].Write(ctx, stream, rec)
		}
	}
	for s, rows := range w.idx {
		if len(rows) == 0 {
			continue
		}
		part, err := take(ctx, rec, rows)
		if err != nil {
			return fmt.Errorf("clickhouse: route rows of %q to shard %d: %w", stream, s, err)
		}
		err = w.shards[s].Write(ctx, stream, part)
		part.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// take copies rows of rec into a new batch.
func take(ctx context.Context, rec arrow.RecordBatch, rows []int64) (arrow.RecordBatch, error) {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues(rows, nil)
	ix := b.NewInt64Array()
	b.Release()
	defer ix.Release()
	out, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rec), compute.NewDatumWithoutOwning(ix))
	if err != nil {
		return nil, err
	}
	defer out.Release()
	r := out.(*compute.RecordDatum).Value
	r.Retain()
	return r, nil
}

// route fills w.idx with each shard's rows of rec: by the value of the
// table's Cluster.ShardBy column when it has one; else a merge table's
// rows by a hash of their key columns, so that every version of a key
// lands on the same shard; other tables' by a hash of _openetl_id (the
// same for a record however often it is read, so a replay routes it as
// before), or of every column when the batch has no _openetl_id.
func (w *clusterWriter) route(stream string, rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	if cap(w.hashes) < n {
		w.hashes = make([]uint64, n)
	}
	h := w.hashes[:n]
	sc := rec.Schema()
	if col := w.shardBy[stream]; col != "" {
		ix := sc.FieldIndices(col)
		if len(ix) == 0 {
			return fmt.Errorf("clickhouse: table %q: Config.Cluster.ShardBy column %q is not in the batch", stream, col)
		}
		f := sc.Field(ix[0])
		if f.Nullable && len(w.keys[stream]) == 0 {
			return fmt.Errorf("clickhouse: table %q: Config.Cluster.ShardBy column %q is nullable, and a sharding key can't be: make the source's column NOT NULL, or shard by another", stream, col)
		}
		if !shardValues(rec.Column(ix[0]), h) {
			return fmt.Errorf("clickhouse: table %q: Config.Cluster.ShardBy column %q is %s, not an integer column", stream, col, f.Type)
		}
		w.assign(h)
		return nil
	}
	for i := range h {
		h[i] = fnvOffset
	}
	var cols []int
	if key := w.keys[stream]; len(key) > 0 {
		for _, k := range key {
			ix := sc.FieldIndices(k)
			if len(ix) == 0 {
				return fmt.Errorf("clickhouse: table %q: key column %q is not in the batch", stream, k)
			}
			cols = append(cols, ix[0])
		}
	} else if ix := sc.FieldIndices(colID); len(ix) > 0 {
		cols = ix[:1]
	} else {
		for j := range sc.NumFields() {
			cols = append(cols, j)
		}
	}
	for _, j := range cols {
		hashColumn(rec.Column(j), h)
	}
	w.assign(h)
	return nil
}

// shardValues sets h[row] to each row's value of a, an integer column
// (Cluster.ShardBy), as ClickHouse's Distributed table takes a sharding
// key's: a signed value as the unsigned integer of its width. A null
// (a merge key's, which is quarantined) is 0. It reports false for a
// column of another type.
func shardValues(a arrow.Array, h []uint64) bool {
	switch a := a.(type) {
	case *array.Int8:
		for i := range h {
			h[i] = uint64(uint8(a.Value(i)))
		}
	case *array.Int16:
		for i := range h {
			h[i] = uint64(uint16(a.Value(i)))
		}
	case *array.Int32:
		for i := range h {
			h[i] = uint64(uint32(a.Value(i)))
		}
	case *array.Int64:
		for i := range h {
			h[i] = uint64(a.Value(i))
		}
	case *array.Uint8:
		for i := range h {
			h[i] = uint64(a.Value(i))
		}
	case *array.Uint16:
		for i := range h {
			h[i] = uint64(a.Value(i))
		}
	case *array.Uint32:
		for i := range h {
			h[i] = uint64(a.Value(i))
		}
	case *array.Uint64:
		for i := range h {
			h[i] = a.Value(i)
		}
	default:
		return false
	}
	if a.NullN() > 0 {
		for i := range h {
			if a.IsNull(i) {
				h[i] = 0
			}
		}
	}
	return true
}

// assign fills w.idx from each row's routing value: shard = value mod
// shards.
func (w *clusterWriter) assign(h []uint64) {
	for s := range w.idx {
		w.idx[s] = w.idx[s][:0]
	}
	shards := uint64(len(w.shards))
	for i, v := range h {
		s := v % shards
		w.idx[s] = append(w.idx[s], int64(i))
	}
}

// FNV-1a, 64 bits: the routing hash. Fixed: changing it moves keys to
// other shards.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvUint(h, v uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return fnvBytes(h, b[:])
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// hashColumn folds each row's value of a into h[row]: the value's bytes
// (integers as 8 bytes, whatever their width, so that a key column
// widened from int32 to int64 routes as before), then a separator; a
// null is one marker byte. Every type a key column takes hashes its
// values without allocating; another type (a nested column) hashes its
// text form (ValueStr), which allocates per row.
func hashColumn(a arrow.Array, h []uint64) {
	val := func(i int) uint64 { return 0 }
	var str func(i int) string
	var bin func(i int) []byte
	switch a := a.(type) {
	case *array.String:
		str = a.Value
	case *array.LargeString:
		str = a.Value
	case *array.Binary:
		bin = a.Value
	case *array.LargeBinary:
		bin = a.Value
	case *array.FixedSizeBinary:
		bin = a.Value
	case *array.Decimal128:
		var buf [16]byte
		bin = func(i int) []byte {
			v := a.Value(i)
			binary.LittleEndian.PutUint64(buf[:8], v.LowBits())
			binary.LittleEndian.PutUint64(buf[8:], uint64(v.HighBits()))
			return buf[:]
		}
	case *array.Date32:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Date64:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Timestamp:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Time32:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Time64:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Duration:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Float32:
		val = func(i int) uint64 { return uint64(math.Float32bits(a.Value(i))) }
	case *array.Int8:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Int16:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Int32:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Int64:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Uint8:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Uint16:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Uint32:
		val = func(i int) uint64 { return uint64(a.Value(i)) }
	case *array.Uint64:
		val = a.Value
	case *array.Float64:
		val = func(i int) uint64 { return math.Float64bits(a.Value(i)) }
	case *array.Boolean:
		val = func(i int) uint64 {
			if a.Value(i) {
				return 1
			}
			return 0
		}
	default:
		str = a.ValueStr
	}
	for i := range h {
		switch {
		case a.IsNull(i):
			h[i] = fnvString(h[i], "\xff")
		case str != nil:
			h[i] = fnvString(h[i], str(i))
		case bin != nil:
			h[i] = fnvBytes(h[i], bin(i))
		default:
			h[i] = fnvUint(h[i], val(i))
		}
		h[i] = fnvString(h[i], "\x00")
	}
}

// PreCommit makes each shard's rows durable in its staging tables and
// returns one committable naming every shard's.
func (w *clusterWriter) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	if w.closed {
		return nil, errors.New("clickhouse: PreCommit after Close")
	}
	if w.err != nil {
		return nil, w.err
	}
	c := clusterCommittable{Format: clusterCommittableFormat, Shards: make([]json.RawMessage, len(w.shards))}
	for s, sw := range w.shards {
		raw, err := sw.PreCommit(ctx, epoch)
		if err != nil {
			w.err = fmt.Errorf("clickhouse: shard %d: %w", s, err)
			return nil, w.err
		}
		c.Shards[s] = json.RawMessage(raw)
	}
	out, err := json.Marshal(c)
	if err != nil {
		w.err = fmt.Errorf("clickhouse: encode committable: %w", err)
		return nil, w.err
	}
	return out, nil
}

// splitCommittables turns the lanes' cluster committables into each
// shard's lanes' committables (index = shard, then lane), and says
// which shards have blocks.
func (w *clusterWriter) splitCommittables(committables [][]byte) ([][]sink.Committable, []bool, error) {
	out := make([][]sink.Committable, len(w.shards))
	blocks := make([]bool, len(w.shards))
	for s := range out {
		out[s] = make([]sink.Committable, len(committables))
	}
	for lane, raw := range committables {
		if len(raw) == 0 {
			continue
		}
		var c clusterCommittable
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, nil, fmt.Errorf("clickhouse: lane %d: decode committable: %w", lane, err)
		}
		if c.Format != clusterCommittableFormat {
			return nil, nil, fmt.Errorf("clickhouse: lane %d: committable format %d, want a cluster's %d: written by another version, or by a destination of one server?", lane, c.Format, clusterCommittableFormat)
		}
		if len(c.Shards) != len(w.shards) {
			return nil, nil, fmt.Errorf("clickhouse: lane %d: committable of %d shards, and Config.Cluster has %d: the shards can't change while an epoch is in flight", lane, len(c.Shards), len(w.shards))
		}
		for s, sc := range c.Shards {
			out[s][lane] = sink.Committable(sc)
			one, err := decodeCommittable(sink.Committable(sc))
			if err != nil {
				return nil, nil, fmt.Errorf("clickhouse: lane %d shard %d: %w", lane, s, err)
			}
			blocks[s] = blocks[s] || len(one.Blocks) > 0
		}
	}
	return out, blocks, nil
}

func rawCommittables(cs []sink.Committable) [][]byte {
	out := make([][]byte, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// Commit applies the epoch on every shard, the shards at once, each
// under its own fence and with its own record of applied epochs, so an
// epoch applied on some shards before a failure is applied on the others
// by the retry (or the next attempt's Recover and Commit), and skipped
// where it was. The first shard's error is returned (ErrFenced wrapped
// when a shard's fence rose).
func (w *clusterWriter) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	per, _, err := w.splitCommittables(rawCommittables(committables))
	if err != nil {
		return err
	}
	// First every shard's blocks must be there, staged or applied, so
	// that no shard applies its share of an epoch another shard can't:
	// a share gone (staged on a replica that died before the others
	// fetched the part) makes the epoch Lost on every shard, and the
	// runner replays it, instead of half applied.
	if err := w.eachShard(func(s int, sw *writer) error { return sw.present(ctx, epoch, per[s]) }); err != nil {
		return err
	}
	return w.eachShard(func(s int, sw *writer) error { return sw.Commit(ctx, epoch, per[s]) })
}

// eachShard runs f for every shard at once and returns the first
// shard's error.
func (w *clusterWriter) eachShard(f func(s int, sw *writer) error) error {
	errs := make([]error, len(w.shards))
	var wg sync.WaitGroup
	for s, sw := range w.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(s, sw); err != nil {
				errs[s] = fmt.Errorf("clickhouse: shard %d: %w", s, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Recover raises every shard's fence (the shards at once) and reports
// head's epoch across
// the shards: Applied when every shard applied its share (or had none),
// Recoverable when some shard has yet to apply its share and every such
// share is still staged, Lost when no shard applied its share and some
// share is gone. An epoch applied on some shards and gone on others
// can't be replayed without doubling the applied shards' rows: that is
// an error naming the shards, for an operator.
func (w *clusterWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	var per [][]sink.Committable
	var has []bool
	if head != nil {
		var err error
		if per, has, err = w.splitCommittables(head.Committables); err != nil {
			return 0, err
		}
	}
	if gen == 0 {
		return 0, errors.New("clickhouse: Recover with generation 0")
	}
	// A replica that was down when the database or a table was created
	// lacks it: create them again on every replica (IF NOT EXISTS), the
	// state tables now, the others at their first Write of the attempt.
	// Then, fenced or ahead on any shard: fail before raising any
	// shard's fence.
	err := w.eachShard(func(s int, sw *writer) error {
		if err := sw.d.createState(ctx); err != nil {
			return err
		}
		sw.d.mu.Lock()
		clear(sw.d.schemas)
		sw.d.mu.Unlock()
		if err := sw.checkFence(ctx, uint64(gen)); err != nil {
			return err
		}
		return sw.checkAhead(ctx, gen, head)
	})
	if err != nil {
		return 0, err
	}
	outs := make([]sink.Outcome, len(w.shards))
	err = w.eachShard(func(s int, sw *writer) error {
		var h *checkpoint.Record
		if head != nil {
			hc := *head
			hc.Committables = rawCommittables(per[s])
			h = &hc
		}
		var err error
		outs[s], err = sw.Recover(ctx, gen, h)
		return err
	})
	if err != nil {
		return 0, err
	}
	var applied, lost []int
	recoverable := false
	for s, o := range outs {
		switch {
		case o == sink.Lost:
			lost = append(lost, s)
		case o == sink.Recoverable:
			recoverable = true
		case has != nil && has[s]:
			applied = append(applied, s)
		}
	}
	switch {
	case len(lost) > 0 && len(applied) > 0:
		return 0, fmt.Errorf("clickhouse: pipeline %q: epoch %d is applied on shards %v and its blocks are gone from shards %v: it can't be applied whole nor replayed without doubling rows; was a shard's data dropped or replaced?",
			w.pipeline, head.Epoch, applied, lost)
	case len(lost) > 0:
		return sink.Lost, nil
	case recoverable:
		return sink.Recoverable, nil
	}
	return sink.Applied, nil
}

// Finish does nothing, as on one server.
func (w *clusterWriter) Finish(context.Context, uint64) error { return nil }

// Close closes every shard's writer.
func (w *clusterWriter) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	for s, sw := range w.shards {
		if err := sw.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("clickhouse: shard %d: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// collectCluster is Collect on every shard, with each shard's share of
// req.Head.
func (d *Destination) collectCluster(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	var per [][]sink.Committable
	if req.Head != nil {
		w := &clusterWriter{shards: make([]*writer, len(d.shards))}
		var err error
		if per, _, err = w.splitCommittables(req.Head.Committables); err != nil {
			return sink.Collected{}, err
		}
	}
	var total sink.Collected
	for s, sd := range d.shards {
		r := req
		if req.Head != nil {
			hc := *req.Head
			hc.Committables = rawCommittables(per[s])
			r.Head = &hc
		}
		got, err := sd.Collect(ctx, r)
		total.Removed += got.Removed
		total.Kept += got.Kept
		total.Bytes += got.Bytes
		if err != nil {
			return total, fmt.Errorf("clickhouse: shard %d: %w", s, err)
		}
	}
	return total, nil
}
