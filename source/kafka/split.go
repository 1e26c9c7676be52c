package kafka

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// split reads one partition.
type split struct {
	id        source.SplitID
	topic     string
	partition int32
	r         *reader

	next  int64 // next offset to read; -1: the partition's start
	state [stateLen]byte
	dec   decoder
	cols  []avrorow.Col // the stream's declared columns (registry decoders)

	// For Lag, read from other goroutines.
	lagNext atomic.Int64 // next offset to read, once known
	lagEnd  atomic.Int64 // the partition's end at the last fetch (-1: none yet)
	// For Paused: when the partition's fetching paused (Unix ns), 0 when
	// it is not paused.
	pausedSince atomic.Int64
}

// Paused reports whether the split has stopped fetching its partition
// because it holds a full queue of fetched messages that Read has not
// emitted yet, which happens when the runner's queues are full and
// Emitter.Record blocks (backpressure), and since when; since is the zero
// Time when it is not paused. Fetching resumes once Read has drained the
// queue to half. The runner polls it (about once a second, for its
// stream.paused and stream.resumed events) from another goroutine: it is
// safe for concurrent use with Read, reads one atomic and does no I/O.
// ok is always true: the split always knows.
func (sp *split) Paused() (paused bool, since time.Time, ok bool) {
	ns := sp.pausedSince.Load()
	if ns == 0 {
		return false, time.Time{}, true
	}
	return true, time.Unix(0, ns), true
}

// Lag reports how many messages the partition holds past the split's
// position, as of the last fetch (see source.LagReporter); the age of
// the oldest unread message is not tracked.
func (sp *split) Lag() (behind int64, unit string, age time.Duration, ok bool) {
	end, next := sp.lagEnd.Load(), sp.lagNext.Load()
	if end < 0 || next < 0 {
		return 0, "message", -1, false
	}
	return max(0, end-next), "message", -1, true
}

func (sp *split) ID() source.SplitID { return sp.id }

// Read emits the partition's messages from where the split stands (the
// state given to Open, or where an earlier Read stopped), decoded by
// Config.Decoder, with seq = Seq(partition, offset), and calls e.ResumePoint
// with the next offset after each run of messages one fetch returned. Transaction markers, and
// tombstones where the decoder skips them, only move the resume point.
// When bounded, Read first asks for the partition's end (last stable
// offset under read_committed, else high watermark) and returns nil once
// it has read up to there; when not, it waits for new messages until ctx
// ends.
//
// Messages are fetched by the client the splits of one Open share; while
// Read is blocked in e.Record, its partition's fetching pauses once its
// queue is full (see Config.Budget) and resumes when Read catches up.
func (sp *split) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := sp.r.s
	end := int64(-1)
	if bounded {
		var start int64
		var ok bool
		start, end, ok = sp.r.bounds(ctx, tp{sp.topic, sp.partition})
		if !ok {
			var err error
			if end, err = s.listOffset(ctx, sp.topic, sp.partition, -1); err != nil {
				return err
			}
			if start, err = s.listOffset(ctx, sp.topic, sp.partition, -2); err != nil {
				return err
			}
		}
		switch {
		case sp.next < 0 && start >= end:
			sp.next = end // nothing to read: resume from the end
		case sp.next >= 0 && (sp.next < start || sp.next > end):
			return fmt.Errorf("%w: %s/%d: resume offset %d, the partition holds [%d, %d): deleted by retention, or the topic recreated?",
				ErrPositionLost, sp.topic, sp.partition, sp.next, start, end)
		}
		if sp.next >= end {
			return e.ResumePoint(encodeState(&sp.state, sp.next))
		}
	}
	t := tp{sp.topic, sp.partition}
	q, err := sp.r.attach(t, sp.next, &sp.lagEnd, &sp.pausedSince)
	if err != nil {
		return err
	}
	defer sp.r.detach(t)
	sp.dec.init(&s.cfg, sp.topic, sp.partition)
	if s.sch != nil {
		sp.dec.reg = newRegDecoder(s.sch, sp.topic, sp.partition, sp.cols, s.cfg.Columns)
	}
	for {
		c, err := sp.r.take(ctx, t, q)
		if err != nil {
			return err
		}
		// One resume point per chunk (a fetch's records of the partition)
		// rather than per record: barriers wait at most a chunk, and the
		// runner's per-call cost is paid once.
		for _, rec := range c.recs {
			if rec.Offset < sp.next {
				continue // already emitted (a refetch after a pause)
			}
			sp.next = rec.Offset + 1
			sp.lagNext.Store(sp.next)
			if rec.Offset > MaxOffset {
				return fmt.Errorf("kafka: %s/%d: offset %d is past MaxOffset (%d): seqs could no longer tell partitions apart", sp.topic, sp.partition, rec.Offset, MaxOffset)
			}
			if !rec.Attrs.IsControl() {
				var op source.Op
				var key, payload []byte
				var ok bool
				if sp.dec.reg != nil {
					if op, key, payload, ok, err = sp.dec.reg.decode(ctx, rec); err != nil {
						return err
					}
				} else {
					op, key, payload, ok = sp.dec.decode(rec)
				}
				if ok {
					if err := e.Record(sp.topic, op, Seq(sp.partition, rec.Offset), key, payload); err != nil {
						return err
					}
				}
			}
			if bounded && sp.next >= end {
				break
			}
		}
		if err := e.ResumePoint(encodeState(&sp.state, sp.next)); err != nil {
			return err
		}
		if bounded && sp.next >= end {
			return nil
		}
	}
}
