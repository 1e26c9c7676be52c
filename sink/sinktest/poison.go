package sinktest

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Every batch the suite hands to Write is built in memory of the suite's
// own poisonAllocator. The suite releases the batch as Write returns (as
// the runner does), and once the batch's buffers are really released
// (no Retain is outstanding) Free overwrites their bytes (values,
// offsets, validity) with poison instead of handing them back. A writer
// that kept references into the batch then reads the poison: Visible
// shows it, and compare says what happened.

// poison is the byte the suite overwrites a released batch's buffers
// with: strings read back as 0xDB bytes, int64 values as
// -2604246222170760229 (0xDBDBDBDBDBDBDBDB).
const poison = 0xDB

var poisonInt = func() string {
	u := uint64(0xDBDBDBDBDBDBDBDB)
	return fmt.Sprint(int64(u))
}()

// poisonAllocator is a memory.Allocator whose Free poisons the memory.
// It counts the buffers it has out, so the suite can tell a writer that
// Retains a batch and never Releases it.
type poisonAllocator struct {
	live  atomic.Int64 // buffers allocated and not freed
	bytes atomic.Int64 // their bytes
	freed atomic.Int64 // buffers poisoned
}

// Allocate returns zeroed memory aligned to 64 bytes, as Arrow's
// allocators do.
func (a *poisonAllocator) Allocate(size int) []byte {
	const align = 64
	if size <= 0 {
		return []byte{}
	}
	buf := make([]byte, size+align)
	shift := 0
	if rem := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % align); rem != 0 {
		shift = align - rem
	}
	a.live.Add(1)
	a.bytes.Add(int64(size))
	return buf[shift : shift+size : shift+size]
}

// Reallocate moves b into new memory of size bytes and poisons b.
func (a *poisonAllocator) Reallocate(size int, b []byte) []byte {
	if size == len(b) {
		return b
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

// Free overwrites b with poison. The memory is left to the garbage
// collector, so whatever still points into it reads the poison.
func (a *poisonAllocator) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	b = b[:cap(b)]
	b[0] = poison
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
	a.live.Add(-1)
	a.bytes.Add(-int64(len(b)))
	a.freed.Add(1)
}

// checkReleased, run once the check's writers are closed, fails the check
// when a writer still holds buffers of a batch it was given.
func (s *suite) checkReleased() {
	if s.t.Failed() {
		return
	}
	if n := s.mem.live.Load(); n > 0 {
		s.t.Errorf("after every writer was closed, %d buffers (%d bytes) of the batches handed to Write were never released: a writer that calls Retain on a batch (or its arrays) must Release it (see sink.Writer.Write)",
			n, s.mem.bytes.Load())
	}
}

// poisoned reports which field of r reads the poison, if any.
func poisoned(r Row) (field, value string, ok bool) {
	if strings.IndexByte(r.ID, poison) >= 0 {
		return sink.ColumnID, short(r.ID), true
	}
	if fmt.Sprint(r.Seq) == poisonInt {
		return sink.ColumnSeq, poisonInt, true
	}
	for k, v := range r.Values {
		var str string
		switch v := v.(type) {
		case nil:
			continue
		case string:
			str = v
		case []byte:
			str = string(v)
		default:
			str = fmt.Sprint(v)
		}
		if strings.IndexByte(str, poison) >= 0 || str == poisonInt {
			return k, short(str), true
		}
	}
	return "", "", false
}

func short(s string) string {
	if len(s) > 8 {
		return fmt.Sprintf("%q...", s[:8])
	}
	return fmt.Sprintf("%q", s)
}

// keptMessage says what a poisoned read, or a panic reading a released
// batch, means.
const (
	keptMessage     = "the writer kept references into a batch after Write returned, without Retain (see sink.Writer.Write)"
	poisonedMessage = keptMessage + ": the suite overwrites a batch's buffers with 0xDB once it is released"
	panicMessage    = keptMessage + ": the suite releases each batch as Write returns, and a released arrow array panics when read"
)

// The lane's calls turn a writer's panic into an error. A panic after
// batches were released is most likely a read of one of them (arrow's
// arrays panic once released, or on poisoned offsets), and the error says
// so; it carries the writer's stack.

func (l *lane) caught(op string, err *error) {
	p := recover()
	if p == nil {
		return
	}
	hint := ""
	if l.mem != nil && l.mem.freed.Load() > 0 {
		hint = "; most likely " + panicMessage
	}
	*err = fmt.Errorf("%s panicked: %v%s\n%s", op, p, hint, debug.Stack())
}

func (l *lane) Write(ctx context.Context, stream string, rec arrow.RecordBatch) (err error) {
	defer l.caught("Write", &err)
	return l.Writer.Write(ctx, stream, rec)
}

func (l *lane) PreCommit(ctx context.Context, epoch uint64) (c sink.Committable, err error) {
	defer l.caught("PreCommit", &err)
	return l.Writer.PreCommit(ctx, epoch)
}

func (l *lane) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) (err error) {
	defer l.caught("Commit", &err)
	return l.Writer.Commit(ctx, epoch, cs)
}

func (l *lane) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (out sink.Outcome, err error) {
	defer l.caught("Recover", &err)
	return l.Writer.Recover(ctx, gen, head)
}

func (l *lane) Finish(ctx context.Context, epoch uint64) (err error) {
	defer l.caught("Finish", &err)
	return l.Writer.Finish(ctx, epoch)
}

func (l *lane) Close(ctx context.Context) (err error) {
	defer l.caught("Close", &err)
	return l.Writer.Close(ctx)
}
