package runner

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/zeebo/xxh3"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
)

// Releasing held values (docs/architecture.md, "Releasing held values").
// A held value's row has landed without it (a null there), so a release
// is a patch, never a row: "set column C of the row whose _openetl_id is
// I, where C is null". At an attempt's start, after recovery, planRelease
// reads the published _held/ files of committed epochs, keeps the lines
// the checkpoint record's account (checkpoint.Record.Released) doesn't
// name, and, for each column the destination now takes (its type class
// no longer in Capabilities.Unsupported, and its SchemaChecker, if any,
// accepts the column's current type), types the values with the engine's
// Release and makes patch batches (sink.PatchMetadataKey) of them. The
// engine stage sends them to lane 0 before any row, so they are staged in
// the attempt's first epoch and applied with it; that epoch's record
// carries the account with these lines added, from which every later
// record carries it on. A crash before the commit point leaves the
// account as it was, and the next attempt releases the same lines again;
// after it, never. Only destinations that declare
// sink.Capabilities.Patches get patches; for the others the values stay
// held. Streams with a transform (whose rows the transform reshaped) and
// overwrite streams (whose next full refresh writes the column whole)
// keep their values held too, and so do cells held out_of_range (no type
// change of the destination makes their column's Arrow type hold them).

// releasedState is the account of released held values: by held file,
// the lines (0-based, half-open ranges, sorted and apart) released in
// committed epochs.
type releasedState struct {
	V    int                 `json:"v"`
	Done map[string][][2]int `json:"done,omitempty"`
	// Settled names, by held file, the destination's unsupported type
	// classes (Capabilities.Unsupported, sorted, comma-separated) under
	// which each line of the file not released was found unreleasable
	// for a reason only a change of those would change (its type, a
	// value the type can't take, no row id): the next attempts pass
	// such a file by unless the destination's list changed.
	Settled map[string]string `json:"settled,omitempty"`
}

func parseReleased(b []byte) (releasedState, error) {
	st := releasedState{V: 1, Done: map[string][][2]int{}, Settled: map[string]string{}}
	if len(b) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("checkpoints: the record's account of released held values: %w", err)
	}
	if st.V != 1 {
		return st, fmt.Errorf("checkpoints: the record's account of released held values has version %d; this library knows 1", st.V)
	}
	if st.Done == nil {
		st.Done = map[string][][2]int{}
	}
	if st.Settled == nil {
		st.Settled = map[string]string{}
	}
	return st, nil
}

// heldRelease is what an attempt releases in its first epoch.
type heldRelease struct {
	patches []laneMsg                    // patch batches, for lane 0
	counts  map[string]checkpoint.Counts // Released, by stream
	state   []byte                       // the account with them (and the files settled): the first epoch's record's
	columns []releasedColumn             // reported once the epoch commits
}

// releasedColumn counts the values released of one column of a stream.
type releasedColumn struct {
	stream, table, column string
	rows                  int64
}

// heldGroup is the releasable lines of one held file for one column.
type heldGroup struct {
	table, column string
	lines         []int
	ids           []string
	seqs          []int64
	values        [][]byte
}

// keptHeld counts values kept held in this attempt for one reason.
type keptHeld struct {
	stream, column, why string
}

// planRelease finds what this attempt releases (see above) and sets
// r.release; nil when nothing.
func (r *runner) planRelease(ctx context.Context) error {
	caps := r.cfg.Destination.Capabilities()
	if !caps.Patches || r.head == nil || r.cfg.replay != nil {
		return nil
	}
	rel, ok := r.eng.(engine.Releaser)
	if !ok {
		return nil
	}
	lister, ok := r.cfg.Store.(checkpoint.FileLister)
	if !ok {
		r.log.Debug("held values are not released: the checkpoint store can't list files (checkpoint.FileLister)")
		return nil
	}
	st, err := parseReleased(r.head.Released)
	if err != nil {
		return err
	}
	rl := &heldRelease{counts: map[string]checkpoint.Counts{}}
	cols := map[[2]string]int{} // (stream, column): index in rl.columns
	kept := map[keptHeld]int64{}
	accepted := map[string]bool{} // by table, column and type: what the SchemaChecker said
	fp := strings.Join(slices.Sorted(slices.Values(caps.Unsupported)), ",")
	changed := false
	for _, stream := range slices.Sorted(maps.Keys(r.streamSet)) {
		if r.cfg.Transforms[stream] != nil || r.cfg.Modes[stream] == delivery.Overwrite {
			continue
		}
		prefix := "_held/" + stream + "/"
		names, err := lister.ListFiles(ctx, r.cfg.Name, prefix)
		if err != nil {
			return fmt.Errorf("checkpoints: list %s: %w", prefix, err)
		}
		for _, name := range names {
			epoch, ok := quarantineEpoch(name, prefix)
			if !ok || epoch > r.head.Epoch {
				continue // a file of an epoch a rewind undid
			}
			if f, ok := st.Settled[name]; ok && f == fp {
				continue
			}
			data, err := r.cfg.Store.ReadFile(ctx, r.cfg.Name, name)
			if err != nil {
				return fmt.Errorf("checkpoints: read %s: %w", name, err)
			}
			groups, err := heldGroups(stream, name, data, st.Done[name], kept)
			if err != nil {
				return err
			}
			settled := true
			for _, g := range groups {
				m, lines, gs, err := r.releaseGroup(ctx, rel, caps, accepted, stream, g, kept)
				if err != nil {
					return err
				}
				settled = settled && gs
				if m.rec == nil {
					continue
				}
				rl.patches = append(rl.patches, m)
				for _, i := range lines {
					st.Done[name] = add(st.Done[name], i)
				}
				c := rl.counts[stream]
				c.Released += int64(len(lines))
				rl.counts[stream] = c
				k := [2]string{stream, g.column}
				if j, ok := cols[k]; ok {
					rl.columns[j].rows += int64(len(lines))
				} else {
					cols[k] = len(rl.columns)
					rl.columns = append(rl.columns, releasedColumn{stream: stream, table: g.table, column: g.column, rows: int64(len(lines))})
				}
			}
			if settled {
				st.Settled[name] = fp
				changed = true
			} else if _, ok := st.Settled[name]; ok {
				delete(st.Settled, name)
				changed = true
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(kept), func(a, b keptHeld) int {
		return strings.Compare(a.stream+"\x00"+a.column+"\x00"+a.why, b.stream+"\x00"+b.column+"\x00"+b.why)
	}) {
		detail := fmt.Sprintf("%d held values stay held: %s", kept[k], k.why)
		r.log.Warn("held values can't be released", "stream", k.stream, "column", k.column, "values", kept[k], "reason", k.why)
		r.mon.emit(Event{Kind: EventSchemaBlocked, Generation: r.gen, Epoch: r.head.Epoch, Stream: k.stream, Column: k.column,
			Change: "held", Detail: detail})
	}
	if len(rl.patches) == 0 && !changed {
		return nil
	}
	rl.state, err = json.Marshal(st)
	if err != nil {
		return err
	}
	for _, c := range rl.columns {
		r.log.Info("releasing held values: the destination takes their column now", "stream", c.stream, "table", c.table,
			"column", c.column, "values", c.rows, "epoch", r.firstEpoch)
	}
	r.release = rl
	return nil
}

// heldGroups parses a held file's lines that done doesn't name and
// groups those a release may patch by table and column, in line order.
// Lines it can't patch are counted in kept.
func heldGroups(stream, name string, data []byte, done [][2]int, kept map[keptHeld]int64) ([]*heldGroup, error) {
	var groups []*heldGroup
	at := map[[2]string]*heldGroup{}
	for i := 0; len(data) > 0; i++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		if len(line) == 0 || has(done, i) {
			continue
		}
		var l heldLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("checkpoints: %s line %d: %w", name, i+1, err)
		}
		if l.Reason == string(engine.ReasonOutOfRange) {
			continue // no type of the destination makes the column's Arrow type hold it
		}
		id := l.ID
		if id == "" {
			// Held by the engine before lines had the row's id: a keyed
			// stream's is the hash of its key and seq; a keyless one's
			// would need the payload, which the line doesn't keep.
			key, err := fromTextOrBase64(l.Key, l.KeyBase64)
			if err != nil {
				return nil, fmt.Errorf("checkpoints: %s line %d: key_base64: %w", name, i+1, err)
			}
			if len(key) == 0 {
				kept[keptHeld{stream, l.Column, "held before held lines kept the row's id, of a stream without a key: the row can't be found"}]++
				continue
			}
			id = RecordID(stream, key, nil, l.Seq)
		}
		v, err := fromTextOrBase64(l.Value, l.ValueBase64)
		if err != nil {
			return nil, fmt.Errorf("checkpoints: %s line %d: value_base64: %w", name, i+1, err)
		}
		k := [2]string{l.Table, l.Column}
		g := at[k]
		if g == nil {
			g = &heldGroup{table: l.Table, column: l.Column}
			at[k] = g
			groups = append(groups, g)
		}
		g.lines = append(g.lines, i)
		g.ids = append(g.ids, id)
		g.seqs = append(g.seqs, l.Seq)
		g.values = append(g.values, v)
	}
	return groups, nil
}

// releaseGroup types g's values as their column's current type and
// returns their patch batch (for table g.table) with the lines it
// releases; a zero laneMsg when the destination doesn't take the column
// yet or no value could be typed (counted in kept). settled reports
// whether the lines it leaves held stay so until the destination's
// unsupported types change (see releasedState.Settled): false when its
// SchemaChecker refused the column.
func (r *runner) releaseGroup(ctx context.Context, rel engine.Releaser, caps sink.Capabilities, accepted map[string]bool,
	stream string, g *heldGroup, kept map[keptHeld]int64) (m laneMsg, lines []int, settled bool, err error) {
	// takes says whether the destination takes the column as dt now.
	takes := func(dt arrow.DataType) (yes, settled bool, err error) {
		if heldType(dt, caps.Unsupported) {
			return false, true, nil // still a type the destination can't take
		}
		chk, ok := r.cfg.Destination.(sink.SchemaChecker)
		if !ok {
			return true, true, nil
		}
		k := g.table + "\x00" + g.column + "\x00" + dt.String()
		yes, asked := accepted[k]
		if !asked {
			sc := arrow.NewSchema([]arrow.Field{{Name: g.column, Type: dt, Nullable: true}}, nil)
			rej, err := chk.CheckSchema(ctx, g.table, sc)
			if err != nil {
				return false, false, fmt.Errorf("destination: check the schema of table %q: %w", g.table, err)
			}
			yes = len(rej) == 0
			accepted[k] = yes
		}
		return yes, yes, nil // the table's column may be changed by its host
	}
	const cantType = "the column's current type can't take them (the engine's Release)"
	// The first value tells the column's type: a column the destination
	// doesn't take yet costs one value's Release, not all.
	probe, err := rel.Release(stream, g.column, g.values[:1])
	if err != nil && !errors.Is(err, engine.ErrInvalidInput) {
		return laneMsg{}, nil, false, fmt.Errorf("engine: release held values of %s.%s: %w", stream, g.column, err)
	}
	if err == nil {
		dt := probe.DataType()
		probe.Release()
		if yes, settled, err := takes(dt); err != nil || !yes {
			return laneMsg{}, nil, settled, err
		}
	}
	arr, ok, err := releaseValues(rel, stream, g.column, g.values)
	if err != nil {
		return laneMsg{}, nil, false, fmt.Errorf("engine: release held values of %s.%s: %w", stream, g.column, err)
	}
	if arr == nil {
		kept[keptHeld{stream, g.column, cantType}] += int64(len(g.values))
		return laneMsg{}, nil, true, nil
	}
	defer arr.Release()
	if probe == nil { // the first value failed: the others tell the type
		if yes, settled, err := takes(arr.DataType()); err != nil || !yes {
			return laneMsg{}, nil, settled, err
		}
	}
	lines = g.lines
	ids, seqs := g.ids, g.seqs
	if ok != nil {
		lines, ids, seqs = nil, nil, nil
		bad := 0
		for i, fine := range ok {
			if !fine {
				bad++
				continue
			}
			lines, ids, seqs = append(lines, g.lines[i]), append(ids, g.ids[i]), append(seqs, g.seqs[i])
		}
		kept[keptHeld{stream, g.column, cantType}] += int64(bad)
	}
	idb := array.NewStringBuilder(memory.DefaultAllocator)
	defer idb.Release()
	idb.AppendValues(ids, nil)
	seqb := array.NewInt64Builder(memory.DefaultAllocator)
	defer seqb.Release()
	seqb.AppendValues(seqs, nil)
	idArr, seqArr := idb.NewArray(), seqb.NewArray()
	defer idArr.Release()
	defer seqArr.Release()
	md := arrow.NewMetadata([]string{sink.PatchMetadataKey}, []string{sink.PatchMetadataValue})
	sc := arrow.NewSchema([]arrow.Field{
		{Name: g.column, Type: arr.DataType(), Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	}, &md)
	rec := array.NewRecordBatch(sc, []arrow.Array{arr, idArr, seqArr}, int64(len(ids)))
	return laneMsg{stream: g.table, source: stream, rec: rec}, lines, true, nil
}

// releaseValues types values with the engine's Release; when some
// can't be typed, it tries each on its own and returns the array of
// those that could (nil: none), with ok saying which (nil: all).
func releaseValues(rel engine.Releaser, stream, column string, values [][]byte) (arr arrow.Array, ok []bool, err error) {
	arr, err = rel.Release(stream, column, values)
	if err == nil {
		return arr, nil, nil
	}
	if !errors.Is(err, engine.ErrInvalidInput) {
		return nil, nil, err
	}
	ok = make([]bool, len(values))
	var parts []arrow.Array
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	for i, v := range values {
		a, err := rel.Release(stream, column, [][]byte{v})
		if errors.Is(err, engine.ErrInvalidInput) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		ok[i] = true
		parts = append(parts, a)
	}
	if len(parts) == 0 {
		return nil, ok, nil
	}
	arr, err = array.Concatenate(parts, memory.DefaultAllocator)
	return arr, ok, err
}

// heldType reports whether the engine holds a column of type dt back
// for a destination that can't take the type classes unsupported (as the
// engine decides: engine.Config.Unsupported).
func heldType(dt arrow.DataType, unsupported []string) bool {
	if len(unsupported) == 0 {
		return false
	}
	if slices.Contains(unsupported, typeClass(dt)) {
		return true
	}
	switch t := dt.(type) {
	case arrow.ListLikeType:
		return heldType(t.Elem(), unsupported)
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if heldType(f.Type, unsupported) {
				return true
			}
		}
	}
	return false
}

// typeClass names dt's type class as engine.Config.Unsupported does.
func typeClass(dt arrow.DataType) string {
	switch dt.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		return "int"
	case arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return "uint"
	case arrow.FLOAT16, arrow.FLOAT32:
		return "float32"
	case arrow.FLOAT64:
		return "float64"
	case arrow.DECIMAL32, arrow.DECIMAL64, arrow.DECIMAL128, arrow.DECIMAL256:
		return "decimal"
	case arrow.BOOL:
		return "bool"
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return "utf8"
	case arrow.BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
		return "binary"
	case arrow.FIXED_SIZE_BINARY:
		return "fixed_size_binary"
	case arrow.DATE32, arrow.DATE64:
		return "date"
	case arrow.TIME32, arrow.TIME64:
		return "time"
	case arrow.DURATION:
		return "duration"
	case arrow.TIMESTAMP:
		if dt.(*arrow.TimestampType).TimeZone != "" {
			return "timestamptz"
		}
		return "timestamp"
	case arrow.INTERVAL_MONTHS, arrow.INTERVAL_DAY_TIME, arrow.INTERVAL_MONTH_DAY_NANO:
		return "interval"
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		return "list"
	case arrow.STRUCT:
		return "struct"
	case arrow.NULL:
		return "null"
	}
	return "other"
}

// RecordID is the _openetl_id the engine gives a record version (package
// engine, "Metadata columns").
func RecordID(stream string, key, payload []byte, seq int64) string {
	b := make([]byte, 0, 4+len(stream)+1+4+max(len(key), len(payload))+8)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(stream)))
	b = append(b, stream...)
	if len(key) > 0 {
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(key)))
		b = append(b, key...)
	} else {
		b = append(b, 2)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
		b = append(b, payload...)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(seq))
	h := xxh3.Hash128(b).Bytes()
	return hex.EncodeToString(h[:])
}

// heldReleased reports the values an epoch released once it committed:
// an Info line and an EventHeldReleased per column.
func (r *runner) heldReleased(epoch uint64, rl *heldRelease) {
	for _, c := range rl.columns {
		r.log.Info("held values released", "stream", c.stream, "table", c.table, "column", c.column, "values", c.rows, "epoch", epoch)
		r.mon.emit(Event{Kind: EventHeldReleased, Generation: r.gen, Epoch: epoch, Stream: c.stream, Column: c.column, Rows: c.rows})
	}
}
