//go:build cgo && linux && amd64

package engine

/*
#include <stdlib.h>
#include "openetl_engine.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/cdata"
)

// pqHandle owns the C side of a ParquetWriter: the writer and the C Data
// Interface structs each call exports into. It holds no Go pointers, so
// a cleanup can free it.
type pqHandle struct {
	w   unsafe.Pointer
	arr *C.struct_ArrowArray
	sch *C.struct_ArrowSchema
}

func (h *pqHandle) free() {
	C.openetl_parquet_free(h.w)
	// Rust takes both structs on every call; release defensively anyway.
	cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.arr)))
	cdata.ReleaseCArrowSchema((*cdata.CArrowSchema)(unsafe.Pointer(h.sch)))
	C.free(unsafe.Pointer(h.arr))
	C.free(unsafe.Pointer(h.sch))
}

// ParquetAvailable reports whether this build has the engine's Parquet
// writer: true with cgo on linux/amd64 when the library's ABI matches.
func ParquetAvailable() bool { return C.openetl_engine_abi_v1() == abiVersion }

// NewParquetWriter starts a file of schema. A schema Parquet can't hold,
// or bad options, is an error wrapping ErrInvalidInput.
func NewParquetWriter(schema *arrow.Schema, opts ParquetOptions) (*ParquetWriter, error) {
	if !ParquetAvailable() {
		return nil, fmt.Errorf("%w: engine library has another ABI: rebuild it with make engine", ErrUnavailable)
	}
	js, err := json.Marshal(opts.json())
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the parquet options: %v", ErrInvalidInput, err)
	}
	return newParquetWriterJSON(schema, js)
}

// newParquetWriterJSON starts a file of schema with the options JSON of
// openetl_parquet_new.
func newParquetWriterJSON(schema *arrow.Schema, js []byte) (*ParquetWriter, error) {
	h := &pqHandle{
		arr: (*C.struct_ArrowArray)(C.calloc(1, C.sizeof_struct_ArrowArray)),
		sch: (*C.struct_ArrowSchema)(C.calloc(1, C.sizeof_struct_ArrowSchema)),
	}
	// A schema holds no Go pointers: it is copied into C memory.
	cdata.ExportArrowSchema(schema, (*cdata.CArrowSchema)(unsafe.Pointer(h.sch)))
	var cerr *C.char
	st := C.openetl_parquet_new(h.sch, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(js))), C.size_t(len(js)), &h.w, &cerr)
	if st != 0 {
		h.free()
		return nil, statusError(st, cerr)
	}
	w := &ParquetWriter{h: h}
	w.cleanup = runtime.AddCleanup(w, func(h *pqHandle) { h.free() }, h)
	return w, nil
}

// Write encodes rec, whose schema must be the file's, in one call. It
// returns the bytes the call completed (whole row groups; often none),
// which alias the writer's memory: write them out before the next call
// and don't keep them. rec's memory (Go or C) crosses to Rust without
// copying, for the duration of the call. After an error the writer
// fails every call.
func (w *ParquetWriter) Write(rec arrow.RecordBatch) ([]byte, error) {
	if w.h == nil {
		return nil, ErrClosed
	}
	h := w.h
	// The export writes pointers to rec's buffers into C memory, which
	// the cgo rules allow only for pinned Go memory (Pin ignores C
	// memory, such as the engine's own output); Rust releases its view
	// before the call returns.
	var pin runtime.Pinner
	for _, c := range rec.Columns() {
		pinData(&pin, c.Data())
	}
	defer pin.Unpin()
	cdata.ExportArrowRecordBatch(rec, (*cdata.CArrowArray)(unsafe.Pointer(h.arr)), (*cdata.CArrowSchema)(unsafe.Pointer(h.sch)))
	var out *C.uint8_t
	var n C.size_t
	var cerr *C.char
	st := C.openetl_parquet_write(h.w, h.arr, h.sch, &out, &n, &cerr)
	runtime.KeepAlive(rec)
	if st != 0 {
		cdata.ReleaseCArrowArray((*cdata.CArrowArray)(unsafe.Pointer(h.arr)))
		cdata.ReleaseCArrowSchema((*cdata.CArrowSchema)(unsafe.Pointer(h.sch)))
		return nil, statusError(st, cerr)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n)), nil
}

// pinData pins the buffers of d and its children and dictionary.
func pinData(p *runtime.Pinner, d arrow.ArrayData) {
	for _, b := range d.Buffers() {
		if b != nil && b.Len() > 0 {
			p.Pin(unsafe.SliceData(b.Bytes()))
		}
	}
	for _, c := range d.Children() {
		pinData(p, c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		pinData(p, d.Dictionary())
	}
}

// Finish writes the last row group and the footer and returns the
// file's last bytes, which alias the writer's memory until Close.
func (w *ParquetWriter) Finish() ([]byte, error) {
	if w.h == nil {
		return nil, ErrClosed
	}
	var out *C.uint8_t
	var n C.size_t
	var cerr *C.char
	if st := C.openetl_parquet_finish(w.h.w, &out, &n, &cerr); st != 0 {
		return nil, statusError(st, cerr)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n)), nil
}

// Close frees the writer, finished or not; the slices it returned are
// invalid afterwards. A second Close does nothing.
func (w *ParquetWriter) Close() {
	if w.h == nil {
		return
	}
	w.cleanup.Stop()
	w.h.free()
	w.h = nil
}
