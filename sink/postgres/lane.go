package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl/sink"
)

// quarantineTable keeps the rows set aside, with the reason.
const quarantineTable = "_openetl_quarantine"

// lane is a writer lane's data path (a ledger.Stager): Write COPYs each
// batch into a staging table of its own for the table and the lane's
// batch number (the epoch's rows of this lane), which Stage closes.
type lane struct {
	d      *Destination
	cfg    sink.WriterConfig
	stage  string
	batch  int64 // rows written now are in this batch's tables; Stage moves on
	tables map[string]*table
	buf    []byte
	arrays []arrow.Array
	keys   []int // field offsets of a row's key values in buf
	hash   maphash.Hash
	err    error
}

// maxSeen caps the key hashes a lane keeps per merged table and batch:
// past it the batch counts as having repeated keys.
const maxSeen = 1 << 22

// keySet is a set of key hashes: open addressing, linear probing, 0 for
// an empty slot. It keeps its slots across batches (reset clears them),
// so a lane's steady state allocates nothing; a map cost about twice the
// lane's CPU per row here.
type keySet struct {
	slots []uint64
	n     int
}

// add adds h and reports whether it was there.
func (s *keySet) add(h uint64) bool {
	if h == 0 {
		h = 1
	}
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			s.slots[i] = h
			s.n++
			return false
		}
	}
}

func (s *keySet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(1024, 2*len(old)))
	s.n = 0
	for _, h := range old {
		if h != 0 {
			s.add(h)
		}
	}
}

func (s *keySet) reset() {
	clear(s.slots)
	s.n = 0
}

// table is what a lane knows of one table.
type table struct {
	name   string
	spec   sink.StreamSpec
	schema *arrow.Schema // of the last batch
	cols   []column      // of the last batch, in its order
	isKey  []bool        // cols' key columns, for a merged table
	names  string        // the quoted column list of the last batch
	// of the current batch number:
	staging string            // its staging table, "" until the first COPY
	staged  map[string]string // the staging table's columns and types
	rows    int
	epoch   []column // every column written, in the order first seen
	// seen holds a hash of each key written in the batch (merged tables);
	// dups: a key may repeat, so Apply must keep each key's newest row.
	seen keySet
	dups bool
	// patch: the table's patch batches (sink.PatchMetadataKey), staged
	// apart from its rows and applied as UPDATEs.
	patch bool
}

// tableRef is one table of a staged reference.
type tableRef struct {
	Table   string   `json:"table"`
	Staging string   `json:"staging"` // the staging table of the lane's batch
	Rows    int      `json:"rows"`
	Cols    []column `json:"cols"`
	Mode    string   `json:"mode,omitempty"`
	Key     []string `json:"key,omitempty"`
	Hard    bool     `json:"hard,omitempty"`
	// Unique: no key repeats in the staged rows (merge).
	Unique bool `json:"unique,omitempty"`
	// Patch: the staged rows are patches (sink.PatchMetadataKey): each
	// sets its columns of the table's row with its _openetl_id, where
	// that row holds a null.
	Patch bool `json:"patch,omitempty"`
}

// ref is what Stage returns: where the lane's rows of an epoch are.
type ref struct {
	Stage  string     `json:"stage"`
	Batch  int64      `json:"batch"`
	Tables []tableRef `json:"tables"`
}

func (l *lane) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if l.err != nil {
		return l.err
	}
	if rec.NumRows() == 0 {
		return nil
	}
	if err := l.write(ctx, stream, rec); err != nil {
		l.err = err // rows of the epoch would be missing
		return err
	}
	return nil
}

func (l *lane) write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	key, patch := stream, isPatch(rec.Schema())
	if patch {
		key += "\x00patch"
	}
	t := l.tables[key]
	if t == nil {
		spec, ok := l.cfg.Spec(stream)
		if !ok {
			spec = sink.StreamSpec{Stream: stream, Table: stream}
		}
		if len(stream) > MaxIdentifier {
			return fmt.Errorf("postgres: table name %q is longer than %d bytes", stream, MaxIdentifier)
		}
		t = &table{name: stream, spec: spec, patch: patch}
		l.tables[key] = t
	}
	if t.schema == nil || !t.schema.Equal(rec.Schema()) {
		if err := l.layout(t, rec.Schema()); err != nil {
			return err
		}
	}
	n := int(rec.NumRows())
	conn, err := l.acquirePrepared(ctx, t)
	if err != nil {
		return fmt.Errorf("postgres: staging table of %s: %w", stream, err)
	}
	// The rows are encoded as the COPY reads them (pgconn's sender
	// goroutine calls Read), so encoding overlaps the server's work on
	// what was sent. A row with a value Postgres can't take is left out
	// and set aside with its reason after the COPY.
	arrays := l.arrays[:0]
	for j := range t.cols {
		arrays = append(arrays, rec.Column(j))
	}
	r := &copyReader{l: l, t: t, arrays: arrays, n: n, buf: append(l.buf[:0], copyHeader...)}
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, r, `COPY `+l.d.staging(t.staging)+` (`+t.names+`) FROM STDIN (FORMAT binary)`)
	// On a broken connection CopyFrom may return while its sender is in
	// Read: close waits for it, and no Read touches the batch after.
	r.close()
	conn.Release()
	clear(arrays)
	l.arrays = arrays
	if err != nil {
		return fmt.Errorf("postgres: stage rows of %s: %w", stream, err)
	}
	l.buf = r.buf
	bad := r.bad
	if got := int(tag.RowsAffected()); got != n-len(bad) {
		return fmt.Errorf("postgres: stage rows of %s: COPY took %d rows of %d", stream, got, n-len(bad))
	}
	if len(bad) > 0 {
		if stream == quarantineTable {
			return fmt.Errorf("postgres: a quarantined row can't be written either (%s: %s)", bad[0].column, bad[0].reason)
		}
		if err := l.quarantine(ctx, stream, rec, bad); err != nil {
			return err
		}
	}
	t.rows += n - len(bad)
	for _, c := range t.cols {
		if !hasCol(t.epoch, c.Name) {
			t.epoch = append(t.epoch, c)
		}
	}
	return nil
}

// copyReader encodes a batch's rows as binary COPY data as the COPY
// reads it, a few hundred rows at a time, noting the rows it leaves out.
type copyReader struct {
	l       *lane
	t       *table
	arrays  []arrow.Array
	next, n int
	bad     []badRow
	buf     []byte // encoded, from off
	off     int
	done    bool
	mu      sync.Mutex // held by Read; close takes it
	closed  bool
}

// readRows is how many rows Read encodes at a time.
const readRows = 256

func (r *copyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errors.New("postgres: COPY ended")
	}
	for len(r.buf)-r.off < len(p) && !r.done {
		if r.off > 0 {
			r.buf = r.buf[:copy(r.buf, r.buf[r.off:])]
			r.off = 0
		}
		end := min(r.n, r.next+readRows)
		r.buf = r.l.encode(r.buf, r.t, r.arrays, r.next, end, &r.bad)
		r.next = end
		if r.next == r.n {
			r.buf = binary.BigEndian.AppendUint16(r.buf, 0xFFFF)
			r.done = true
		}
	}
	k := copy(p, r.buf[r.off:])
	r.off += k
	if r.done && r.off == len(r.buf) {
		return k, io.EOF
	}
	return k, nil
}

// close waits for a Read in progress; Read touches nothing after it.
func (r *copyReader) close() {
	r.mu.Lock()
	r.closed = true
	r.buf = r.buf[:0]
	r.off = 0
	r.mu.Unlock()
}

// encode appends rows [from, to) of t's batch (arrays) to b as binary
// COPY tuples, leaving out the rows with a value Postgres can't take
// (appended to bad, with the first column and reason found), and notes
// the keys of a merged table.
func (l *lane) encode(b []byte, t *table, arrays []arrow.Array, from, to int, bad *[]badRow) []byte {
	keyed := t.isKey != nil
	for i := from; i < to; i++ {
		start := len(b)
		b = binary.BigEndian.AppendUint16(b, uint16(len(t.cols)))
		reason, col := "", ""
		keys := l.keys[:0]
		for j, a := range arrays {
			if a.IsNull(i) {
				if keyed && t.isKey[j] {
					reason, col = ReasonNullKey, t.cols[j].Name
					break
				}
				b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
				continue
			}
			at := len(b)
			b = append(b, 0, 0, 0, 0)
			b, reason = t.cols[j].enc(b, a, i)
			if reason != "" {
				col = t.cols[j].Name
				break
			}
			binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
			if keyed && t.isKey[j] {
				keys = append(keys, at, len(b))
			}
		}
		l.keys = keys
		if reason != "" {
			b = b[:start]
			*bad = append(*bad, badRow{row: i, column: col, reason: reason})
			continue
		}
		if keyed && !t.dups {
			// The key's fields, lengths included, hashed: a repeat (or a
			// collision) makes Apply keep each key's newest row.
			l.hash.Reset()
			for k := 0; k < len(keys); k += 2 {
				l.hash.Write(b[keys[k]:keys[k+1]])
			}
			if t.seen.n >= maxSeen || t.seen.add(l.hash.Sum64()) {
				t.dups = true
			}
		}
	}
	return b
}

// acquirePrepared acquires a connection and prepares t's staging table
// on it. A connection found lost there (ended while it sat idle in the
// pool, most likely: prepare is the first statement on it) leaves the
// pool, and prepare, which repeats harmlessly, runs again on another,
// up to once per connection the pool may hold.
func (l *lane) acquirePrepared(ctx context.Context, t *table) (*pgxpool.Conn, error) {
	for tries := int32(0); ; tries++ {
		conn, err := l.d.cfg.Pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		err = l.prepare(ctx, conn, t)
		if err == nil {
			return conn, nil
		}
		lost := conn.Conn().IsClosed()
		conn.Release() // a closed connection leaves the pool
		if !lost || ctx.Err() != nil || tries >= l.d.cfg.Pool.Config().MaxConns {
			return nil, err
		}
	}
}

// prepare makes the staging table of t's current batch take t's
// columns: it creates and registers the table on the batch's first COPY,
// and adds or widens columns when the schema changed within the batch.
// The table is the lane's alone, so none of this waits for a lock.
func (l *lane) prepare(ctx context.Context, conn *pgxpool.Conn, t *table) error {
	if t.staging == "" {
		stage := l.stage
		if t.patch {
			stage += "/patch" // a staging table of its own
		}
		name := stagingName(l.cfg.Pipeline, stage, l.batch, t.name)
		defs := make([]string, len(t.cols))
		t.staged = make(map[string]string, len(t.cols))
		for i, c := range t.cols {
			defs[i] = ident(c.Name) + ` ` + c.wire
			t.staged[c.Name] = c.wire
		}
		create := `CREATE TABLE IF NOT EXISTS `
		if l.d.cfg.UnloggedStaging {
			create = `CREATE UNLOGGED TABLE IF NOT EXISTS `
		}
		// One transaction: a staging table is always registered, so
		// Recover finds what a lane that died left. The name is this
		// lane's batch's alone, so a repeat (its connection lost, the
		// first may have committed) changes nothing.
		if _, err := conn.Exec(ctx, `BEGIN; `+create+l.d.staging(name)+` (`+strings.Join(defs, ", ")+`); `+
			`INSERT INTO `+l.d.registry()+` (pipeline, stage, batch, table_name, staging) VALUES (`+
			literal(l.cfg.Pipeline)+`, `+literal(l.stage)+`, `+strconv.FormatInt(l.batch, 10)+`, `+literal(t.name)+`, `+literal(name)+
			`) ON CONFLICT (staging) DO NOTHING; COMMIT`); err != nil {
			return err
		}
		t.staging = name
		return nil
	}
	var stmts []string
	for _, c := range t.cols {
		switch have, ok := t.staged[c.Name]; {
		case !ok:
			stmts = append(stmts, `ALTER TABLE `+l.d.staging(t.staging)+` ADD COLUMN IF NOT EXISTS `+ident(c.Name)+` `+c.wire)
		case have == c.wire:
		case widens(have, c.wire):
			// The engine widened the column within the epoch: the rows
			// staged before are converted (Apply casts them to the
			// table's type).
			stmts = append(stmts, `ALTER TABLE `+l.d.staging(t.staging)+` ALTER COLUMN `+ident(c.Name)+` TYPE `+c.wire+
				` USING `+ident(c.Name)+`::`+c.wire)
		default:
			return fmt.Errorf("%s.%s: staged as %s, the batch has %s: type changes are not supported", t.name, c.Name, have, c.wire)
		}
	}
	if len(stmts) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, strings.Join(stmts, "; ")); err != nil {
		return err
	}
	for _, c := range t.cols {
		t.staged[c.Name] = c.wire
	}
	return nil
}

// stagingName names the staging table of a lane's batch of a table: the
// table's name (cut to fit) and a hash of the pipeline, stage, batch and
// table, so that names never collide.
func stagingName(pipeline, stage string, batch int64, table string) string {
	h := sha256.Sum256([]byte(pipeline + "\x00" + stage + "\x00" + strconv.FormatInt(batch, 10) + "\x00" + table))
	const tail = 1 + 16
	if len(table) > MaxIdentifier-tail {
		table = table[:MaxIdentifier-tail]
	}
	return table + "_" + hex.EncodeToString(h[:8])
}

// isPatch reports whether a batch of schema sc is a patch batch.
func isPatch(sc *arrow.Schema) bool {
	v, ok := sc.Metadata().GetValue(sink.PatchMetadataKey)
	return ok && v == sink.PatchMetadataValue
}

func isKey(key []string, name string) bool {
	for _, k := range key {
		if k == name {
			return true
		}
	}
	return false
}

func hasCol(cols []column, name string) bool {
	for _, c := range cols {
		if c.Name == name {
			return true
		}
	}
	return false
}

// badRow is a row set aside: the first column and reason found.
type badRow struct {
	row            int
	column, reason string
}

// layout learns a new schema of t: its columns' types and encoders.
func (l *lane) layout(t *table, sc *arrow.Schema) error {
	decl := map[string]*sink.Column{}
	if t.spec.Types == "postgres" {
		for i := range t.spec.Columns {
			decl[t.spec.Columns[i].Name] = &t.spec.Columns[i]
		}
	}
	cols := make([]column, 0, sc.NumFields())
	names := make([]string, 0, sc.NumFields())
	for _, f := range sc.Fields() {
		if len(f.Name) > MaxIdentifier {
			return fmt.Errorf("postgres: %s: column name %q is longer than %d bytes", t.name, f.Name, MaxIdentifier)
		}
		if f.Name == sink.ColumnDeleted {
			return fmt.Errorf("postgres: %s: column %s is the destination's own", t.name, f.Name)
		}
		wire, target, err := mapType(f.Type)
		if err != nil {
			return fmt.Errorf("%w (%s.%s)", err, t.name, f.Name)
		}
		c := column{Name: f.Name, Target: declared(f.Type, target, decl[f.Name]), wire: wire, typ: f.Type}
		c.enc = newEncoder(f.Type, c.Target)
		if c.Target == "uuid" && wire == "bytea" {
			c.Cast = `encode(` + ident(c.Name) + `, 'hex')::uuid`
		}
		cols = append(cols, c)
		names = append(names, ident(f.Name))
	}
	var isKeyCol []bool
	if t.spec.Mode == sink.Merge && !t.patch {
		isKeyCol = make([]bool, len(cols))
		for j, c := range cols {
			isKeyCol[j] = isKey(t.spec.Key, c.Name)
			// A key column whose type changed within the batch encodes
			// equal keys differently: the hashes can't tell repeats.
			for _, old := range t.cols {
				if isKeyCol[j] && old.Name == c.Name && old.wire != c.wire && t.rows > 0 {
					t.dups = true
				}
			}
		}
	}
	t.schema, t.cols, t.isKey, t.names = sc, cols, isKeyCol, strings.Join(names, ", ")
	return nil
}

// columnTypes returns the types of the columns of table (quoted name),
// as format_type spells them; none when it does not exist.
func columnTypes(ctx context.Context, q querier, table string) (map[string]string, error) {
	rs, err := q.QueryContext(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, table)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var n, t string
		if err := rs.Scan(&n, &t); err != nil {
			return nil, err
		}
		out[n] = t
	}
	return out, rs.Err()
}

// Stage closes the lane's batch number: its rows were staged by Write,
// each table's in a staging table of the batch's own.
func (l *lane) Stage(ctx context.Context, epoch uint64) ([]byte, error) {
	if l.err != nil {
		return nil, l.err
	}
	r := ref{Stage: l.stage, Batch: l.batch}
	for _, t := range l.tables {
		if t.rows > 0 {
			tr := tableRef{Table: t.name, Staging: t.staging, Rows: t.rows, Cols: t.epoch, Patch: t.patch}
			switch mode := t.spec.Mode; {
			case t.patch:
			case mode == sink.Merge:
				tr.Mode, tr.Key, tr.Hard, tr.Unique = "merge", t.spec.Key, t.spec.Deletes == sink.HardDeletes, !t.dups
			case mode == sink.Overwrite:
				tr.Mode = "overwrite"
			}
			r.Tables = append(r.Tables, tr)
		}
		t.staging, t.staged, t.rows, t.epoch, t.dups = "", nil, 0, nil, false
		t.seen.reset()
	}
	l.batch++
	if len(r.Tables) == 0 {
		return nil, nil
	}
	return json.Marshal(r)
}

// Close forgets the rows written since the last Stage: they stay in
// their staging tables, under no reference, until the next Recover
// drops them.
func (l *lane) Close(ctx context.Context) error {
	l.tables = nil
	l.err = errors.New("postgres: Write after Close")
	return nil
}

// quarantineSchema is the quarantine table's.
var quarantineSchema = arrow.NewSchema([]arrow.Field{
	{Name: "table_name", Type: arrow.BinaryTypes.String},
	{Name: "column_name", Type: arrow.BinaryTypes.String},
	{Name: "reason", Type: arrow.BinaryTypes.String},
	{Name: "row_json", Type: arrow.BinaryTypes.String},
	{Name: sink.ColumnID, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// quarantine stages rec's bad rows to the quarantine table, with the
// reason: the table, column, reason, the row as JSON and its metadata.
func (l *lane) quarantine(ctx context.Context, table string, rec arrow.RecordBatch, bad []badRow) error {
	bld := array.NewRecordBuilder(memory.DefaultAllocator, quarantineSchema)
	defer bld.Release()
	fields := rec.Schema().Fields()
	for _, br := range bad {
		doc := make(map[string]any, len(fields))
		for c, f := range fields {
			doc[f.Name] = rec.Column(c).GetOneForMarshal(br.row)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			return fmt.Errorf("postgres: quarantine a row of %s: %w", table, err)
		}
		bld.Field(0).(*array.StringBuilder).Append(table)
		bld.Field(1).(*array.StringBuilder).Append(br.column)
		bld.Field(2).(*array.StringBuilder).Append(br.reason)
		bld.Field(3).(*array.StringBuilder).Append(string(js))
		for k, name := range []string{sink.ColumnID, sink.ColumnSeq, sink.ColumnOp} {
			fb := bld.Field(4 + k)
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 || rec.Column(idx[0]).IsNull(br.row) {
				fb.AppendNull()
				continue
			}
			switch a := rec.Column(idx[0]).(type) {
			case *array.String:
				fb.(*array.StringBuilder).Append(a.Value(br.row))
			case *array.Int64:
				fb.(*array.Int64Builder).Append(a.Value(br.row))
			default:
				fb.AppendNull()
			}
		}
	}
	q := bld.NewRecordBatch()
	defer q.Release()
	l.d.cfg.Logger.Debug("postgres: rows quarantined", "pipeline", l.cfg.Pipeline, "table", table, "rows", len(bad), "reason", bad[0].reason)
	buf := l.buf
	l.buf = nil
	err := l.write(ctx, quarantineTable, q)
	l.buf = buf
	return err
}
