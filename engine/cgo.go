//go:build cgo && linux && amd64

package engine

/*
#cgo CFLAGS: -I${SRCDIR}/include
#cgo LDFLAGS: ${SRCDIR}/lib/linux_amd64/libopenetl_engine.a -lm -ldl -lpthread -lrt -lutil -lgcc_s -lc
#include <stdlib.h>
#include "openetl_engine.h"

// The test hook is weak (see the header): -1 when the library lacks it.
static int32_t openetl_debug_panic_if_built(char** err) {
	if (!openetl_engine_debug_panic) return -1;
	return openetl_engine_debug_panic(err);
}
*/
import "C"

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/cdata"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// statusErrors maps the Rust engine's status codes onto the package's
// sentinels: the one table the STYLE guide asks for. Status 0 is success.
var statusErrors = [...]error{
	1: ErrInvalidInput,
	2: ErrState,
	3: ErrPanic,
	4: ErrInternal,
	5: ErrClosed,
	6: errAvroFallback,
}

// statusError turns a non-zero status and its message (which it frees)
// into an error wrapping the status's sentinel.
func statusError(st C.int32_t, msg *C.char) error {
	text := "no message"
	if msg != nil {
		text = C.GoString(msg)
		C.openetl_string_free(msg)
	}
	return errorForStatus(int(st), text)
}

// errorForStatus wraps the sentinel of status st (ErrInternal for codes
// it does not know) with the engine's message.
func errorForStatus(st int, text string) error {
	sentinel := ErrInternal
	if st > 0 && st < len(statusErrors) && statusErrors[st] != nil {
		sentinel = statusErrors[st]
	}
	return fmt.Errorf("%w: %s", sentinel, text)
}

// inputType is the struct type of the batch handed to the engine; the Rust
// side assumes it (the schema is not exported per call).
var inputType = arrow.StructOf(
	arrow.Field{Name: "op", Type: arrow.PrimitiveTypes.Uint8},
	arrow.Field{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: "key", Type: arrow.BinaryTypes.Binary, Nullable: true},
	arrow.Field{Name: "payload", Type: arrow.BinaryTypes.Binary, Nullable: true},
)

// cHandle owns everything allocated in C for one engine. It holds no Go
// pointers to the engine value, so a cleanup can free it.
type cHandle struct {
	eng    unsafe.Pointer
	inArr  *C.struct_ArrowArray
	outArr *C.struct_ArrowArray
	outSch *C.struct_ArrowSchema
	qArr   *C.struct_ArrowArray
	qSch   *C.struct_ArrowSchema
}

func (h *cHandle) free() {
	C.openetl_engine_free(h.eng)
	// The out-structs are released after every push; release defensively
	// anyway (a no-op on released structs).
	cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.outArr)))
	cdata.ReleaseCArrowSchema((*cdata.CArrowSchema)(unsafe.Pointer(h.outSch)))
	cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)))
	cdata.ReleaseCArrowSchema((*cdata.CArrowSchema)(unsafe.Pointer(h.qSch)))
	for _, p := range []unsafe.Pointer{
		unsafe.Pointer(h.inArr), unsafe.Pointer(h.outArr), unsafe.Pointer(h.outSch),
		unsafe.Pointer(h.qArr), unsafe.Pointer(h.qSch),
	} {
		C.free(p)
	}
}

// cEngine is the Engine backed by the Rust library.
type cEngine struct {
	h       *cHandle // nil once closed
	lanes   int
	offs    []int64 // lane offsets scratch, lanes+1 entries
	pinner  runtime.Pinner
	cleanup runtime.Cleanup
}

// New creates an engine. Lanes defaults to 1 and MaxDocumentBytes to
// 16 MiB; a State that cannot be loaded is an error wrapping ErrState. The
// engine must be closed with Close; an engine that is garbage collected
// unclosed is freed by a cleanup, as a backstop only.
func New(cfg Config) (Engine, error) {
	if v := C.openetl_engine_abi_v1(); v != abiVersion {
		return nil, fmt.Errorf("%w: engine library has ABI %d, this package wants ABI %d: rebuild it with make engine", ErrUnavailable, uint32(v), abiVersion)
	}
	js, lanes, err := configJSON(cfg)
	if err != nil {
		return nil, err
	}
	return newFromJSON(js, lanes)
}

// configJSON is cfg as the engine's config JSON (the header's
// openetl_engine_new), and its lane count.
func configJSON(cfg Config) ([]byte, int, error) {
	lanes := cfg.Lanes
	if lanes == 0 {
		lanes = 1
	}
	if lanes < 0 {
		return nil, 0, fmt.Errorf("%w: lanes is %d, want at least 1", ErrInvalidInput, cfg.Lanes)
	}
	maxDoc := cfg.MaxDocumentBytes
	if maxDoc == 0 {
		maxDoc = 16 << 20
	}
	if maxDoc < 0 {
		return nil, 0, fmt.Errorf("%w: MaxDocumentBytes is %d, want at least 1", ErrInvalidInput, cfg.MaxDocumentBytes)
	}
	var state any
	switch {
	case cfg.State == nil:
	case json.Valid(cfg.State):
		state = json.RawMessage(cfg.State)
	default:
		// Not JSON: pass it as a string so the engine reports it as a
		// corrupt state (ErrState), not as a malformed config.
		state = string(cfg.State)
	}
	type col struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Nullable bool   `json:"nullable"`
		Key      bool   `json:"key,omitempty"`
	}
	type spec struct {
		Name    string   `json:"name"`
		Format  string   `json:"format"`
		Types   string   `json:"types,omitempty"`
		Columns []col    `json:"columns,omitempty"`
		Policy  Policy   `json:"policy,omitempty"`
		Nested  bool     `json:"nested_text,omitempty"`
		Times   bool     `json:"timestamps,omitempty"`
		Keyed   bool     `json:"keyed,omitempty"`
		KeyCols []string `json:"key_columns,omitempty"`
		Pol     *pols    `json:"policies,omitempty"`
	}
	specs := make([]spec, 0, len(cfg.Streams))
	for _, s := range cfg.Streams {
		sp := spec{Name: s.Name, Format: "json", Types: s.Types, Policy: s.Policy, Nested: s.NestedAsText, Times: s.Timestamps, Keyed: s.Keyed}
		if s.Keyed && !s.Declared {
			sp.KeyCols = s.Key
		}
		if s.Declared {
			sp.Format = "row"
			sp.Columns = make([]col, 0, len(s.Columns))
			for _, c := range s.Columns {
				sp.Columns = append(sp.Columns, col{c.Name, c.Type, c.Nullable, slices.Contains(s.Key, c.Name)})
			}
		}
		if len(s.Rules) > 0 || s.Filter != nil {
			p, err := policiesJSON(s)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: stream %q: %v", ErrInvalidInput, s.Name, err)
			}
			sp.Pol = p
		}
		specs = append(specs, sp)
	}
	type naming struct {
		MaxLen   int      `json:"max_len"`
		Case     Case     `json:"case"`
		Simple   bool     `json:"simple"`
		Reserved []string `json:"reserved"`
	}
	var nm *naming
	if n := cfg.Naming; n != nil {
		if n.MaxLength < 0 || (n.MaxLength > 0 && n.MaxLength < 8) {
			return nil, 0, fmt.Errorf("%w: naming: MaxLength %d is under 8", ErrInvalidInput, n.MaxLength)
		}
		nm = &naming{n.MaxLength, n.Case, n.Simple, append([]string{}, n.Reserved...)}
	}
	js, err := json.Marshal(struct {
		Lanes    int      `json:"lanes"`
		MaxBytes int      `json:"max_document_bytes"`
		State    any      `json:"state"`
		Streams  []spec   `json:"streams"`
		Naming   *naming  `json:"naming,omitempty"`
		Unsupp   []string `json:"unsupported,omitempty"`
		Tables   []string `json:"tables,omitempty"`
	}{lanes, maxDoc, state, specs, nm, cfg.Unsupported, cfg.Tables})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: encoding the engine config: %v", ErrInvalidInput, err)
	}
	return js, lanes, nil
}

// newFromJSON creates an engine of lanes lanes from its config JSON.
func newFromJSON(js []byte, lanes int) (Engine, error) {
	var eng unsafe.Pointer
	var cerr *C.char
	st := C.openetl_engine_new((*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(js))), C.size_t(len(js)), &eng, &cerr)
	if st != 0 {
		return nil, statusError(st, cerr)
	}
	// The C Data Interface structs must be zeroed C memory: Go memory may
	// not hold the C pointers the engine writes into them.
	h := &cHandle{
		eng:    eng,
		inArr:  (*C.struct_ArrowArray)(C.calloc(1, C.sizeof_struct_ArrowArray)),
		outArr: (*C.struct_ArrowArray)(C.calloc(1, C.sizeof_struct_ArrowArray)),
		outSch: (*C.struct_ArrowSchema)(C.calloc(1, C.sizeof_struct_ArrowSchema)),
		qArr:   (*C.struct_ArrowArray)(C.calloc(1, C.sizeof_struct_ArrowArray)),
		qSch:   (*C.struct_ArrowSchema)(C.calloc(1, C.sizeof_struct_ArrowSchema)),
	}
	e := &cEngine{h: h, lanes: lanes, offs: make([]int64, lanes+1)}
	e.cleanup = runtime.AddCleanup(e, func(h *cHandle) { h.free() }, h)
	return e, nil
}

// pols is a stream's policies as the engine's config takes them.
type pols struct {
	Rules  []rule   `json:"rules,omitempty"`
	Filter *cond    `json:"filter,omitempty"`
	Merge  bool     `json:"merge,omitempty"`
	Key    []string `json:"key,omitempty"`
}

type rule struct {
	Kind    RuleKind `json:"kind"`
	Column  string   `json:"column,omitempty"`
	Columns []string `json:"columns,omitempty"`
	To      string   `json:"to,omitempty"`
	N       *int     `json:"n,omitempty"`
	Key     string   `json:"key,omitempty"`
}

type cond struct {
	Op     CondOp           `json:"op"`
	Column string           `json:"column,omitempty"`
	Value  map[string]any   `json:"value,omitempty"`
	Values []map[string]any `json:"values,omitempty"`
	Args   []cond           `json:"args,omitempty"`
}

func policiesJSON(s StreamSpec) (*pols, error) {
	p := &pols{Merge: s.Merge, Key: s.Key}
	for _, r := range s.Rules {
		jr := rule{Kind: r.Kind, Column: r.Column, Columns: r.Columns, To: r.To}
		switch r.Kind {
		case RuleMask, RuleTruncateChars, RuleTruncateBytes:
			if r.N < 0 {
				return nil, fmt.Errorf("%s of column %q: N is %d, want at least 0", r.Kind, r.Column, r.N)
			}
			n := r.N
			jr.N = &n
		case RuleHash:
			jr.Key = hex.EncodeToString(r.Key)
		}
		p.Rules = append(p.Rules, jr)
	}
	if s.Filter != nil {
		c, err := condJSON(*s.Filter)
		if err != nil {
			return nil, err
		}
		p.Filter = &c
	}
	return p, nil
}

func condJSON(c Cond) (cond, error) {
	out := cond{Op: c.Op, Column: c.Column}
	switch c.Op {
	case OpEq, OpNe, OpLt, OpLe, OpGt, OpGe:
		v, err := literal(c.Value)
		if err != nil {
			return out, fmt.Errorf("filter: %s on %q: %v", c.Op, c.Column, err)
		}
		out.Value = v
	case OpIn:
		for _, x := range c.Values {
			v, err := literal(x)
			if err != nil {
				return out, fmt.Errorf("filter: in on %q: %v", c.Column, err)
			}
			out.Values = append(out.Values, v)
		}
		if out.Values == nil {
			out.Values = []map[string]any{}
		}
	case OpAnd, OpOr, OpNot:
		for _, a := range c.Args {
			ja, err := condJSON(a)
			if err != nil {
				return out, err
			}
			out.Args = append(out.Args, ja)
		}
		if out.Args == nil {
			out.Args = []cond{}
		}
	}
	return out, nil
}

// literal is a filter literal in the engine's typed form.
func literal(v any) (map[string]any, error) {
	switch x := v.(type) {
	case int:
		return map[string]any{"int": int64(x)}, nil
	case int32:
		return map[string]any{"int": int64(x)}, nil
	case int64:
		return map[string]any{"int": x}, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("literal %v is not a finite number", x)
		}
		return map[string]any{"float": x}, nil
	case string:
		return map[string]any{"str": x}, nil
	case bool:
		return map[string]any{"bool": x}, nil
	}
	return nil, fmt.Errorf("literal of type %T: want int64, float64, string or bool", v)
}

// inputArray views b as the engine's input struct array without copying:
// the buffers are b's slices. b must not change until the array is
// released.
func inputArray(b *RawBatch) *array.Struct {
	n := b.Len()
	op := array.NewData(arrow.PrimitiveTypes.Uint8, n,
		[]*memory.Buffer{nil, memory.NewBufferBytes(b.ops)}, nil, 0, 0)
	seq := array.NewData(arrow.PrimitiveTypes.Int64, n,
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(b.seqs))}, nil, 0, 0)
	key := array.NewData(arrow.BinaryTypes.Binary, n,
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(b.keyOffs)), memory.NewBufferBytes(b.keys)}, nil, 0, 0)
	pay := array.NewData(arrow.BinaryTypes.Binary, n,
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(b.payOffs)), memory.NewBufferBytes(b.payload)}, nil, 0, 0)
	st := array.NewData(inputType, n, []*memory.Buffer{nil}, []arrow.ArrayData{op, seq, key, pay}, 0, 0)
	for _, d := range []arrow.ArrayData{op, seq, key, pay} {
		d.Release()
	}
	defer st.Release()
	return array.NewStructData(st)
}

// Push hands b to the engine in one call. b's memory crosses to Rust
// without copying, only for the duration of the call: the engine releases
// its view before returning.
func (e *cEngine) Push(b *RawBatch, syncedAt time.Time) (Output, error) {
	out, err := e.push(b, syncedAt)
	if errors.Is(err, errAvroFallback) {
		// Avro rows the fast path leaves to Go (avro.go): nothing
		// changed; push the Go decoder's rows instead.
		if err = avroGoRows(b); err != nil {
			return Output{}, err
		}
		out, err = e.push(b, syncedAt)
	}
	return out, err
}

func (e *cEngine) push(b *RawBatch, syncedAt time.Time) (Output, error) {
	if e.h == nil {
		return Output{}, ErrClosed
	}
	out := Output{LaneOffsets: make([]int, e.lanes+1), Table: b.Stream}
	if b.Len() == 0 {
		return out, nil
	}
	h := e.h
	// The export writes pointers to b's buffers into C memory, which the
	// cgo rules allow only for pinned Go memory; Rust releases the input
	// before the call returns, so they are unpinned right after it.
	for _, buf := range [][]byte{b.ops, b.keys, b.payload} {
		if len(buf) > 0 {
			e.pinner.Pin(unsafe.SliceData(buf))
		}
	}
	e.pinner.Pin(unsafe.SliceData(b.seqs))
	e.pinner.Pin(unsafe.SliceData(b.keyOffs))
	e.pinner.Pin(unsafe.SliceData(b.payOffs))
	defer e.pinner.Unpin()
	in := inputArray(b)
	cdata.ExportArrowArray(in, (*cdata.CArrowArray)(unsafe.Pointer(h.inArr)), nil)
	in.Release() // the export holds its own reference until Rust releases it

	var outRows, qRows C.int64_t
	var cerr *C.char
	st := C.openetl_engine_push(h.eng,
		(*C.uint8_t)(unsafe.Pointer(unsafe.StringData(b.Stream))), C.size_t(len(b.Stream)),
		h.inArr, nil, C.int64_t(syncedAt.UnixMicro()),
		h.outArr, h.outSch, h.qArr, h.qSch,
		(*C.int64_t)(unsafe.Pointer(unsafe.SliceData(e.offs))), C.size_t(len(e.offs)),
		&outRows, &qRows, &cerr)
	runtime.KeepAlive(b)
	if st != 0 {
		// The engine took the input on every path; release defensively in
		// case a future library does not.
		cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.inArr)))
		return Output{}, statusError(st, cerr)
	}
	for i, v := range e.offs {
		out.LaneOffsets[i] = int(v)
	}
	out.Filtered = b.Len() - int(outRows) - int(qRows)
	var err error
	if outRows > 0 {
		out.Record, err = cdata.ImportCRecordBatch((*cdata.CArrowArray)(unsafe.Pointer(h.outArr)), (*cdata.CArrowSchema)(unsafe.Pointer(h.outSch)))
		if err != nil {
			cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.outArr)))
			err = fmt.Errorf("%w: importing the engine's rows: %v", ErrInternal, err)
		}
	}
	if qRows > 0 {
		q, qerr := cdata.ImportCRecordBatch((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)), (*cdata.CArrowSchema)(unsafe.Pointer(h.qSch)))
		if qerr != nil {
			cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)))
			if err == nil {
				err = fmt.Errorf("%w: importing the engine's quarantine: %v", ErrInternal, qerr)
			}
		} else {
			out.Quarantined, qerr = quarantined(q)
			q.Release()
			if err == nil {
				err = qerr
			}
		}
	}
	if err == nil {
		out.SchemaChanges, err = e.changes()
	}
	if err == nil {
		out.Held, err = e.held()
	}
	if out.Record != nil {
		if t, ok := out.Record.Schema().Metadata().GetValue(TableMetadataKey); ok {
			out.Table = t
		}
	}
	if err != nil {
		if out.Record != nil {
			out.Record.Release()
		}
		return Output{}, err
	}
	return out, nil
}

// held reads the values the last push held back.
func (e *cEngine) held() ([]Held, error) {
	h := e.h
	var n C.int64_t
	var cerr *C.char
	if st := C.openetl_engine_held(h.eng, h.qArr, h.qSch, &n, &cerr); st != 0 {
		return nil, statusError(st, cerr)
	}
	if n == 0 {
		return nil, nil
	}
	r, err := cdata.ImportCRecordBatch((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)), (*cdata.CArrowSchema)(unsafe.Pointer(h.qSch)))
	if err != nil {
		cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)))
		return nil, fmt.Errorf("%w: importing held values: %v", ErrInternal, err)
	}
	defer r.Release()
	if r.NumCols() != 5 {
		return nil, fmt.Errorf("%w: unexpected held schema %s", ErrInternal, r.Schema())
	}
	rows, ok1 := r.Column(0).(*array.Uint32)
	cols, ok2 := r.Column(1).(*array.String)
	vals, ok3 := r.Column(2).(*array.Binary)
	reasons, ok4 := r.Column(3).(*array.String)
	details, ok5 := r.Column(4).(*array.String)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, fmt.Errorf("%w: unexpected held schema %s", ErrInternal, r.Schema())
	}
	out := make([]Held, r.NumRows())
	for i := range out {
		// The values alias Rust memory freed with r: copy.
		out[i] = Held{Row: int(rows.Value(i)), Column: strings.Clone(cols.Value(i)), Value: bytes.Clone(vals.Value(i))}
		if reason := reasons.Value(i); reason != "" {
			out[i].Reason, out[i].Detail = Reason(strings.Clone(reason)), strings.Clone(details.Value(i))
		}
	}
	return out, nil
}

// Release implements Releaser.
func (e *cEngine) Release(stream, column string, values [][]byte) (arrow.Array, error) {
	if e.h == nil {
		return nil, ErrClosed
	}
	h := e.h
	var data []byte
	offs := make([]int64, 0, len(values)+1)
	offs = append(offs, 0)
	for _, v := range values {
		data = append(data, v...)
		offs = append(offs, int64(len(data)))
	}
	var cerr *C.char
	st := C.openetl_engine_release(h.eng,
		(*C.uint8_t)(unsafe.Pointer(unsafe.StringData(stream))), C.size_t(len(stream)),
		(*C.uint8_t)(unsafe.Pointer(unsafe.StringData(column))), C.size_t(len(column)),
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(data))), C.size_t(len(data)),
		(*C.int64_t)(unsafe.Pointer(unsafe.SliceData(offs))), C.size_t(len(values)),
		h.qArr, h.qSch, &cerr)
	if st != 0 {
		return nil, statusError(st, cerr)
	}
	r, err := cdata.ImportCRecordBatch((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)), (*cdata.CArrowSchema)(unsafe.Pointer(h.qSch)))
	if err != nil {
		cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.qArr)))
		return nil, fmt.Errorf("%w: importing released values: %v", ErrInternal, err)
	}
	defer r.Release()
	a := r.Column(0)
	a.Retain()
	return a, nil
}

// changes reads the schema outcomes of the last push.
func (e *cEngine) changes() ([]SchemaChange, error) {
	var p *C.uint8_t
	var n C.size_t
	var cerr *C.char
	if st := C.openetl_engine_changes(e.h.eng, &p, &n, &cerr); st != 0 {
		return nil, statusError(st, cerr)
	}
	if n == 0 {
		return nil, nil
	}
	defer C.openetl_bytes_free(p, n)
	var out []SchemaChange
	if err := json.Unmarshal(unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)), &out); err != nil {
		return nil, fmt.Errorf("%w: decoding schema changes: %v", ErrInternal, err)
	}
	return out, nil
}

// quarantined converts the engine's quarantine batch
// (row uint32, reason utf8, detail utf8).
func quarantined(q arrow.RecordBatch) ([]Quarantined, error) {
	rows, ok1 := q.Column(0).(*array.Uint32)
	reasons, ok2 := q.Column(1).(*array.String)
	details, ok3 := q.Column(2).(*array.String)
	if q.NumCols() != 3 || !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("%w: unexpected quarantine schema %s", ErrInternal, q.Schema())
	}
	out := make([]Quarantined, q.NumRows())
	for i := range out {
		out[i] = Quarantined{
			Row: int(rows.Value(i)),
			// Value aliases the Rust-owned buffer, freed when q is
			// released: copy.
			Reason: Reason(strings.Clone(reasons.Value(i))),
			Detail: strings.Clone(details.Value(i)),
		}
	}
	return out, nil
}

// State exports each stream's schema as JSON bytes.
func (e *cEngine) State() ([]byte, error) {
	if e.h == nil {
		return nil, ErrClosed
	}
	var p *C.uint8_t
	var n C.size_t
	var cerr *C.char
	if st := C.openetl_engine_state(e.h.eng, &p, &n, &cerr); st != 0 {
		return nil, statusError(st, cerr)
	}
	defer C.openetl_bytes_free(p, n)
	return C.GoBytes(unsafe.Pointer(p), C.int(n)), nil
}

// Close frees the engine. A second Close returns ErrClosed.
func (e *cEngine) Close() error {
	if e.h == nil {
		return ErrClosed
	}
	e.cleanup.Stop()
	e.h.free()
	e.h = nil
	return nil
}

// errNoDebugHook is debugPanic's error when the library was built
// without the cargo feature debug-panic (the committed one is).
var errNoDebugHook = errors.New("engine library built without the debug-panic feature")

// debugPanic calls the engine's test hook, which panics inside Rust; the
// panic must come back as an error wrapping ErrPanic.
func debugPanic() error {
	var cerr *C.char
	st := C.openetl_debug_panic_if_built(&cerr)
	switch st {
	case -1:
		return errNoDebugHook
	case 0:
		return nil
	}
	return statusError(st, cerr)
}
