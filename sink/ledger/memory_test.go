package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
	"github.com/openetl/etl/sink/sinktest"
)

// memStore is the storage of a test destination built on package ledger
// that keeps everything in memory: Markers, staged rows and tables. A
// transaction holds the store's lock from start to end and works on a
// copy of its state, which replaces the state when it commits: the
// serializable transactions Books asks for.
type memStore struct {
	mu    sync.Mutex
	state memState
	// fail, when set, is called at each Applier call (op "apply",
	// "intact", "discard", "finish") inside the transaction and fails it
	// with what it returns.
	fail func(op string, s ledger.Staged) error
	// calls counts the Applier's calls by op.
	calls map[string]int
	// keeps records the keep argument of each Discard.
	keeps [][]ledger.Staged
}

type memState struct {
	markers  map[string]ledger.Marker
	staged   map[string][]memRow // stage key → rows (durable, invisible)
	tables   map[string][]memRow // table → rows a reader sees
	finished []string            // "pipeline/epoch" of each Finish
}

type memRow struct {
	stream string
	row    sinktest.Row
}

func newMemStore() *memStore {
	return &memStore{
		state: memState{markers: map[string]ledger.Marker{}, staged: map[string][]memRow{}, tables: map[string][]memRow{}},
		calls: map[string]int{},
	}
}

func (s memState) clone() memState {
	c := memState{markers: maps.Clone(s.markers), staged: maps.Clone(s.staged), tables: maps.Clone(s.tables), finished: slices.Clone(s.finished)}
	for k, v := range c.tables {
		c.tables[k] = slices.Clip(v) // an append in the copy can't write into the original
	}
	return c
}

// memTx is a transaction of a memStore.
type memTx struct{ st memState }

// Tx, Marker and SetMarker make memStore a ledger.Books.
func (m *memStore) Tx(ctx context.Context, f func(tx *memTx) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	tx := &memTx{st: m.state.clone()}
	if err := f(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // cancelled: rolled back
	}
	m.state = tx.st
	return nil
}

func (m *memStore) Marker(ctx context.Context, tx *memTx, pipeline string) (ledger.Marker, error) {
	return tx.st.markers[pipeline], nil
}

func (m *memStore) SetMarker(ctx context.Context, tx *memTx, pipeline string, mk ledger.Marker) error {
	tx.st.markers[pipeline] = mk
	return nil
}

// marker returns pipeline's committed Marker.
func (m *memStore) marker(pipeline string) ledger.Marker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.markers[pipeline]
}

// visible returns table's rows.
func (m *memStore) visible(_ context.Context, table string) ([]sinktest.Row, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []sinktest.Row
	for _, r := range m.state.tables[table] {
		out = append(out, r.row)
	}
	return out, nil
}

// dropStaged drops every staged row, as an expiry would.
func (m *memStore) dropStaged(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.state.staged)
	m.state.staged = map[string][]memRow{}
	return n, nil
}

func (m *memStore) count(op string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[op]
}

// memApplier is the Applier of a memStore; memFinisher adds Finish.
type memApplier struct{ m *memStore }

type memFinisher struct{ memApplier }

// memRef is what a memStager's Stage returns.
type memRef struct {
	Key  string `json:"key"`
	Rows int    `json:"rows"`
}

func (a memApplier) call(op string, s ledger.Staged) error {
	a.m.calls[op]++ // under the store's lock: every call runs in a Tx
	if a.m.fail != nil {
		return a.m.fail(op, s)
	}
	return nil
}

func decodeRef(s ledger.Staged) (memRef, error) {
	var r memRef
	err := json.Unmarshal(s.Data, &r)
	return r, err
}

func (a memApplier) Apply(ctx context.Context, tx *memTx, s ledger.Staged) error {
	if err := a.call("apply", s); err != nil {
		return err
	}
	r, err := decodeRef(s)
	if err != nil {
		return err
	}
	rows := tx.st.staged[r.Key]
	if len(rows) != r.Rows {
		return fmt.Errorf("stage %s: %d rows of %d are left", r.Key, len(rows), r.Rows)
	}
	for _, row := range rows {
		tx.st.tables[row.stream] = append(tx.st.tables[row.stream], row)
	}
	delete(tx.st.staged, r.Key)
	return nil
}

func (a memApplier) Intact(ctx context.Context, tx *memTx, s ledger.Staged) (bool, error) {
	if err := a.call("intact", s); err != nil {
		return false, err
	}
	r, err := decodeRef(s)
	if err != nil {
		return false, err
	}
	return len(tx.st.staged[r.Key]) == r.Rows, nil
}

func (a memApplier) Discard(ctx context.Context, tx *memTx, pipeline string, keep []ledger.Staged) error {
	if err := a.call("discard", ledger.Staged{Pipeline: pipeline}); err != nil {
		return err
	}
	a.m.keeps = append(a.m.keeps, keep)
	kept := map[string]bool{}
	for _, s := range keep {
		r, err := decodeRef(s)
		if err != nil {
			return err
		}
		kept[r.Key] = true
	}
	for k := range tx.st.staged {
		if strings.HasPrefix(k, pipeline+"/") && !kept[k] {
			delete(tx.st.staged, k)
		}
	}
	return nil
}

func (f memFinisher) Finish(ctx context.Context, tx *memTx, pipeline string, epoch uint64) error {
	if err := f.call("finish", ledger.Staged{Pipeline: pipeline, Epoch: epoch}); err != nil {
		return err
	}
	tx.st.finished = append(tx.st.finished, fmt.Sprintf("%s/%d", pipeline, epoch))
	return nil
}

// memStager is a lane's data path: it keeps copies of the rows written
// and stages them under a key of its own per epoch.
type memStager struct {
	m        *memStore
	pipeline string
	id       string // unique per writer
	rows     []memRow
}

func (l *memStager) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	rows, err := sinktest.RowsFromRecord(rec) // copies
	if err != nil {
		return err
	}
	for _, r := range rows {
		delete(r.Values, sink.ColumnSyncedAt)
		l.rows = append(l.rows, memRow{stream: stream, row: r})
	}
	return nil
}

func (l *memStager) Stage(ctx context.Context, epoch uint64) ([]byte, error) {
	if len(l.rows) == 0 {
		return nil, nil
	}
	key := fmt.Sprintf("%s/%s/%d", l.pipeline, l.id, epoch)
	l.m.mu.Lock()
	l.m.state.staged[key] = l.rows
	l.m.mu.Unlock()
	ref := memRef{Key: key, Rows: len(l.rows)}
	l.rows = nil
	return json.Marshal(ref)
}

func (l *memStager) Close(context.Context) error {
	l.rows = nil
	return nil
}

// memDest is a sink.Destination on a memStore: every memDest on one
// store stands for a process of its own on the same storage.
type memDest struct {
	m      *memStore
	finish bool // the Applier is a Finisher
}

var writers atomic.Int64

func (d *memDest) Class() sink.Class               { return sink.StageAndApply }
func (d *memDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }

func (d *memDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	return d.writer(cfg.Pipeline, cfg.Lane)
}

func (d *memDest) writer(pipeline string, lane int) (*ledger.Writer[*memTx], error) {
	var a ledger.Applier[*memTx] = memApplier{d.m}
	if d.finish {
		a = memFinisher{memApplier{d.m}}
	}
	l := &memStager{m: d.m, pipeline: pipeline, id: fmt.Sprintf("w%d", writers.Add(1))}
	return ledger.NewWriter(ledger.Config[*memTx]{Pipeline: pipeline, Lane: lane, Stager: l, Books: d.m, Applier: a, Name: "mem"})
}

var errInjected = errors.New("injected")
