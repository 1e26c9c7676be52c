package postgres

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/openetl/etl/source"
)

// txnBuffer holds the changes of a large transaction that the server
// streams while it is still in progress (pgoutput protocol 2), until its
// stream commit (then they are emitted, in order) or abort (then they
// are dropped; a subtransaction's abort drops only its changes). Changes
// are encoded into memory up to limit bytes, then everything goes to a
// temporary file, so a huge transaction costs disk, not memory.
type txnBuffer struct {
	limit   int
	mem     []byte
	file    *os.File
	w       *bufio.Writer
	aborted map[uint32]bool      // aborted subtransactions
	rels    map[uint32]*relation // relation messages sent within the transaction
	sub     uint32               // the subtransaction of the changes being added
	count   int
}

func newTxnBuffer(limit int) *txnBuffer {
	return &txnBuffer{limit: limit, aborted: map[uint32]bool{}, rels: map[uint32]*relation{}}
}

// Record adds one change of the current subtransaction (an Emitter, so
// the decoding code writes to a buffer or the runner alike). Layout:
// subxid u32, op u8, seq i64, then stream, key and payload, each with a
// u32 length.
func (b *txnBuffer) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	var hdr [13]byte
	binary.LittleEndian.PutUint32(hdr[0:4], b.sub)
	hdr[4] = byte(op)
	binary.LittleEndian.PutUint64(hdr[5:13], uint64(seq))
	b.mem = append(b.mem, hdr[:]...)
	for _, part := range [][]byte{[]byte(stream), key, payload} {
		b.mem = binary.LittleEndian.AppendUint32(b.mem, uint32(len(part)))
		b.mem = append(b.mem, part...)
	}
	b.count++
	if len(b.mem) >= b.limit {
		return b.spill()
	}
	return nil
}

// ResumePoint is never called on a buffer.
func (b *txnBuffer) ResumePoint([]byte) error {
	return errors.New("postgres: resume point inside a streamed transaction")
}

func (b *txnBuffer) spill() error {
	if b.file == nil {
		f, err := os.CreateTemp("", "openetl-pg-txn-*")
		if err != nil {
			return fmt.Errorf("postgres: spill a streamed transaction: %w", err)
		}
		b.file, b.w = f, bufio.NewWriterSize(f, 1<<20)
	}
	if _, err := b.w.Write(b.mem); err != nil {
		return fmt.Errorf("postgres: spill a streamed transaction: %w", err)
	}
	b.mem = b.mem[:0]
	return nil
}

// replay emits the buffered changes, in order, skipping those of aborted
// subtransactions, with the seq seq returns for each (given its stream
// and buffered seq), and returns how many it emitted.
func (b *txnBuffer) replay(e source.Emitter, seq func(stream string, seq int64) int64) (int, error) {
	n := 0
	emit := func(r io.Reader) error {
		br := bufio.NewReaderSize(r, 1<<20)
		var hdr [13]byte
		var parts [3][]byte
		for {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			for i := range parts {
				var l [4]byte
				if _, err := io.ReadFull(br, l[:]); err != nil {
					return err
				}
				size := int(binary.LittleEndian.Uint32(l[:]))
				if cap(parts[i]) < size {
					parts[i] = make([]byte, size)
				}
				parts[i] = parts[i][:size]
				if _, err := io.ReadFull(br, parts[i]); err != nil {
					return err
				}
			}
			if b.aborted[binary.LittleEndian.Uint32(hdr[0:4])] {
				continue
			}
			stream := string(parts[0])
			s := seq(stream, int64(binary.LittleEndian.Uint64(hdr[5:13])))
			if err := e.Record(stream, source.Op(hdr[4]), s, parts[1], parts[2]); err != nil {
				return err
			}
			n++
		}
	}
	if b.file != nil {
		if err := b.w.Flush(); err != nil {
			return n, fmt.Errorf("postgres: read a spilled transaction back: %w", err)
		}
		if _, err := b.file.Seek(0, io.SeekStart); err != nil {
			return n, err
		}
		if err := emit(b.file); err != nil {
			return n, fmt.Errorf("postgres: read a spilled transaction back: %w", err)
		}
	}
	if err := emit(bytes.NewReader(b.mem)); err != nil {
		return n, err
	}
	return n, nil
}

// close removes the spill file, if any.
func (b *txnBuffer) close() {
	if b.file != nil {
		name := b.file.Name()
		b.file.Close()
		os.Remove(name)
		b.file = nil
	}
	b.mem = nil
}
