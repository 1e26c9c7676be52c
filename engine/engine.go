// Package engine turns raw batches of source records into Arrow record
// batches. The work is done by a Rust crate (engine/rust) reached through
// cgo; this file is the Go-facing contract, and the cgo layer lives in
// cgo.go (linux/amd64 with cgo) with a stub for other builds.
package engine

import (
	"errors"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/source"
)

// Config configures an Engine.
type Config struct {
	// Lanes is the number of writer lanes rows are routed to by key group
	// (a hash of the primary key, or of the payload for unkeyed streams).
	// Default 1.
	Lanes int
	// MaxDocumentBytes is the largest payload accepted; larger ones are
	// quarantined with ReasonTooLarge. Default 16 MiB.
	MaxDocumentBytes int
	// State is an engine state exported by State, from the checkpoint the
	// attempt resumes from; nil for a new pipeline.
	State []byte
}

// Reason is why a record was quarantined. The set is fixed and documented;
// its string values are written in quarantine files.
type Reason string

// The reasons a record is quarantined.
const (
	ReasonParse        Reason = "parse_error"   // not a JSON object
	ReasonTypeConflict Reason = "type_conflict" // a value the frozen schema can't take
	ReasonOutOfRange   Reason = "out_of_range"  // a number or time the type can't hold
	ReasonMissingKey   Reason = "missing_key"   // a keyed stream's record without a key
	ReasonTooLarge     Reason = "too_large"     // payload over MaxDocumentBytes
	ReasonTooDeep      Reason = "too_deep"      // nesting over the limit
)

// Quarantined describes one record the engine set aside.
type Quarantined struct {
	Row    int    // index of the record in the RawBatch
	Reason Reason // why
	Detail string // a human-readable explanation, without row data
}

// Output is the result of one Push.
type Output struct {
	// Record holds the rows taken, with the stream's columns followed by
	// the metadata columns, ordered by lane; nil when every row was
	// quarantined. The caller owns it and must Release it.
	Record arrow.RecordBatch
	// LaneOffsets has Lanes+1 entries: the rows of lane i are
	// Record rows [LaneOffsets[i], LaneOffsets[i+1]).
	LaneOffsets []int
	// Quarantined lists the rows set aside, in row order.
	Quarantined []Quarantined
}

// Engine normalizes raw batches. An Engine is not safe for concurrent use:
// the runner keeps one per engine lane. Close must be called.
type Engine interface {
	// Push turns one raw batch into Arrow, widening the stream's schema as
	// needed. Every row of b is either in Output.Record or in
	// Output.Quarantined, never both. b is not retained.
	Push(b *RawBatch, syncedAt time.Time) (Output, error)
	// State exports what must survive an attempt (each stream's schema),
	// for the checkpoint record.
	State() ([]byte, error)
	// Close frees the engine. Further calls fail with ErrClosed.
	Close() error
}

// RawBatch is a columnar buffer of one stream's records, reused across
// batches with Reset so that appending a record does not allocate in
// steady state.
type RawBatch struct {
	Stream  string
	ops     []uint8
	seqs    []int64
	keyOffs []int32 // len = rows+1
	keys    []byte
	payOffs []int32 // len = rows+1
	payload []byte
}

// Append adds one record, copying key and payload.
func (b *RawBatch) Append(op source.Op, seq int64, key, payload []byte) {
	if len(b.keyOffs) == 0 {
		b.keyOffs = append(b.keyOffs, 0)
		b.payOffs = append(b.payOffs, 0)
	}
	b.ops = append(b.ops, uint8(op))
	b.seqs = append(b.seqs, seq)
	b.keys = append(b.keys, key...)
	b.keyOffs = append(b.keyOffs, int32(len(b.keys)))
	b.payload = append(b.payload, payload...)
	b.payOffs = append(b.payOffs, int32(len(b.payload)))
}

// Len returns the number of records.
func (b *RawBatch) Len() int { return len(b.ops) }

// Bytes returns the bytes of keys and payloads held.
func (b *RawBatch) Bytes() int { return len(b.keys) + len(b.payload) }

// Row returns record i's fields. The slices alias the batch's memory.
func (b *RawBatch) Row(i int) (op source.Op, seq int64, key, payload []byte) {
	return source.Op(b.ops[i]), b.seqs[i], b.keys[b.keyOffs[i]:b.keyOffs[i+1]], b.payload[b.payOffs[i]:b.payOffs[i+1]]
}

// Reset empties the batch, keeping its memory.
func (b *RawBatch) Reset() {
	b.ops, b.seqs, b.keys, b.payload = b.ops[:0], b.seqs[:0], b.keys[:0], b.payload[:0]
	b.keyOffs, b.payOffs = b.keyOffs[:0], b.payOffs[:0]
}

// Errors returned by engines. Rust status codes map onto these in one
// table (cgo.go).
var (
	// ErrUnavailable is returned by New when the binary was built without
	// cgo or for a platform without a prebuilt engine library.
	ErrUnavailable = errors.New("engine: not available in this build: the Rust engine needs CGO_ENABLED=1 on linux/amd64 (or a library built with make engine)")
	// ErrClosed is returned by calls on a closed engine.
	ErrClosed = errors.New("engine: closed")
	// ErrInvalidInput is wrapped when a batch or config is malformed.
	ErrInvalidInput = errors.New("engine: invalid input")
	// ErrState is wrapped when a saved state cannot be loaded.
	ErrState = errors.New("engine: invalid saved state")
	// ErrPanic is wrapped when the Rust side panicked; the engine is
	// unusable afterwards and must be closed.
	ErrPanic = errors.New("engine: internal panic")
	// ErrInternal is wrapped for any other engine failure.
	ErrInternal = errors.New("engine: internal error")
)
