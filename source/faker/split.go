package faker

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/openetl/etl/source"
)

// stateLen is the length of a resume state: the next index, big-endian.
const stateLen = 8

func decodeState(st []byte, k, n int64) (int64, error) {
	if len(st) != stateLen {
		return 0, fmt.Errorf("want %d bytes, got %d", stateLen, len(st))
	}
	v := binary.BigEndian.Uint64(st)
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("index %d out of range", v)
	}
	if i := int64(v); i%n != k {
		return 0, fmt.Errorf("index %d is not in stripe %d of %d: was SplitsPerStream changed?", i, k, n)
	}
	return int64(v), nil
}

// split reads indexes next, next+stride, ... of one stream.
type split struct {
	id     source.SplitID
	stream string
	kind   kind
	g      *gen
	rows   int64
	stride int64
	rate   float64

	next  int64 // index of the next record to emit
	buf   []byte
	state [stateLen]byte
	pace  pacer
}

func (sp *split) ID() source.SplitID { return sp.id }

// Read emits the split's records in index order, from where the split
// stands (the state given to Open, or where an earlier Read stopped), and
// calls e.ResumePoint after every record with the next index to generate.
// (Resume points are cheap here: an 8-byte buffer is reused, and the runner
// copies a state only when a barrier is due.) When bounded, Read returns
// nil at Config.Rows; when not, it waits there for ctx. At the end it
// calls ResumePoint once more if it emitted no record, so the end is
// always a resume point. It returns ctx.Err() once ctx is done, or the
// first error of an Emitter method.
//
// Steady state allocates nothing: key and payload are built in a buffer
// the split reuses, which the Emitter must copy (as the contract says).
func (sp *split) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	done := ctx.Done()
	if sp.rate > 0 {
		sp.pace.start(sp.rate)
		defer sp.pace.stop()
	}
	emitted := false
	for {
		if sp.next >= sp.rows {
			if !emitted {
				if err := e.ResumePoint(sp.putState()); err != nil {
					return err
				}
			}
			if bounded {
				return nil
			}
			<-done
			return ctx.Err()
		}
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		if sp.rate > 0 {
			if err := sp.pace.take(ctx, done); err != nil {
				return err
			}
		}
		op, seq, key, payload := sp.g.generate(sp.kind, sp.next, sp.buf[:0])
		sp.buf = key[:0]
		if err := e.Record(sp.stream, op, seq, key, payload); err != nil {
			return err
		}
		sp.next += sp.stride
		emitted = true
		if err := e.ResumePoint(sp.putState()); err != nil {
			return err
		}
	}
}

func (sp *split) putState() []byte {
	binary.BigEndian.PutUint64(sp.state[:], uint64(sp.next))
	return sp.state[:]
}

// pacer is a token bucket that reads the clock once per burst of records
// rather than once per record.
type pacer struct {
	rate   float64 // tokens per second
	burst  float64 // bucket size
	tokens float64
	last   time.Time
	free   int64 // tokens taken from the bucket, not yet spent
	timer  *time.Timer
}

func (p *pacer) start(rate float64) {
	p.rate = rate
	p.burst = max(1, rate/100) // 10ms worth
	p.tokens = 1
	p.free = 0
	p.last = time.Now()
}

func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// take spends one token, waiting for it if need be.
func (p *pacer) take(ctx context.Context, done <-chan struct{}) error {
	for p.free == 0 {
		now := time.Now()
		p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
		p.last = now
		if p.tokens >= 1 {
			p.free = int64(p.tokens)
			p.tokens -= float64(p.free)
			break
		}
		d := time.Duration((1 - p.tokens) / p.rate * float64(time.Second))
		if p.timer == nil {
			p.timer = time.NewTimer(d)
		} else {
			p.timer.Reset(d)
		}
		select {
		case <-done:
			return ctx.Err()
		case <-p.timer.C:
		}
	}
	p.free--
	return nil
}
