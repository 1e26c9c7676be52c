package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordOverhead is what a buffered record costs besides its key, value
// and headers (the kgo.Record struct and its slice entry), for the
// budget's accounting.
const recordOverhead = 160

// partFetchMax caps the bytes one fetch asks for a partition (Kafka's
// default max.partition.fetch.bytes): franz-go drops the records it has
// fetched for a partition when that partition is paused, and fetches them
// again on resume, so a smaller fetch wastes less (BenchmarkVsCeiling's
// sync, 4 partitions on kfake, decoded 1.00-1.17 messages a message read
// with fetches of Budget/8 a partition, 8 MiB by default, and 1.02-1.06
// with 1 MiB).
const partFetchMax = 1 << 20

// tp names a partition.
type tp struct {
	topic     string
	partition int32
}

// chunk is a run of one partition's records from one fetch.
type chunk struct {
	recs  []*kgo.Record
	bytes int64
}

// queue holds one partition's fetched records until its split takes them.
type queue struct {
	end    *atomic.Int64 // the partition's end as of the last fetch, for Lag
	since  *atomic.Int64 // when fetching paused (Unix ns), 0 when not; for Paused
	chunks []chunk
	bytes  int64
	paused bool
	err    error         // a fetch error for the partition; Read returns it
	signal chan struct{} // capacity 1: something was added
}

// reader is the consumer shared by the splits of one Open. A dispatcher
// goroutine polls the client and hands each partition's records to its
// queue; a full queue pauses its partition's fetching
// (PauseFetchPartitions) until its split drains it to half, so a split
// blocked in Emitter.Record holds back only its own partition. The queue
// limits add up to the budget's share for queues (split over all the
// Open's partitions, attached or not); each queue may go over
// its limit by the records of the one poll that filled it (Kafka returns
// at least one record batch, however large, and a compressed batch
// expands), since a paused partition's buffered fetches are dropped and
// fetched again on resume. The client exists while at least one split is
// reading.
type reader struct {
	s *Source

	mu     sync.Mutex
	cl     *kgo.Client
	parts  map[tp]*queue
	queued int64 // bytes in all queues
	peak   int64 // highest queued, for tests
	pauses int   // partitions paused so far, for tests
	stop   context.CancelFunc
	done   chan struct{} // closed when the dispatcher returned

	// The partitions of the Open's splits, and their bounds for a bounded
	// read: listed for all of them at the first split's Read (two
	// requests rather than two per split), each taken once.
	all    []tp
	listMu sync.Mutex
	listed bool
	bound  map[tp][2]int64 // start, end
}

// bounds returns t's earliest offset and the end a bounded read stops at
// (see Source.listOffset), listed with every other partition of the Open
// at the first call; ok is false when t has none (the listing failed for
// it, or t's were taken already): the split then lists its own.
func (r *reader) bounds(ctx context.Context, t tp) (start, end int64, ok bool) {
	r.listMu.Lock()
	defer r.listMu.Unlock()
	if !r.listed {
		r.listed = true
		var starts, ends map[tp]int64
		var wg sync.WaitGroup
		wg.Go(func() { starts = r.s.listOffsets(ctx, r.all, -2) })
		ends = r.s.listOffsets(ctx, r.all, -1)
		wg.Wait()
		r.bound = make(map[tp][2]int64, len(r.all))
		for _, p := range r.all {
			s, ok1 := starts[p]
			e, ok2 := ends[p]
			if ok1 && ok2 {
				r.bound[p] = [2]int64{s, e}
			}
		}
	}
	b, ok := r.bound[t]
	delete(r.bound, t)
	return b[0], b[1], ok
}

func newReader(s *Source) *reader {
	return &reader{s: s, parts: map[tp]*queue{}}
}

// budgets derived from Config.Budget.
func (r *reader) fetchBytes() int32  { return int32(min(r.s.cfg.Budget/8, 1<<30)) }
func (r *reader) queueBudget() int64 { return r.s.cfg.Budget * 3 / 4 }

// partCap is each partition's queue limit, with the lock held: the
// queues' share over the Open's partitions, whether or not their splits
// are reading yet. Dividing it among the partitions attached at the
// time let the first to attach fill a larger share and keep it when the
// others came: the queues then held more than the share plus a batch
// each (TestBackpressure saw 5.91 MB against its 5.87 MB bound).
func (r *reader) partCapLocked() int64 {
	n := max(int64(len(r.all)), 1)
	return max(r.queueBudget()/n, 64<<10)
}

// attach starts consuming t at offset next (-1: the start) and returns
// its queue; detach undoes it.
func (r *reader) attach(t tp, next int64, end, since *atomic.Int64) (*queue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.parts[t]; ok {
		return nil, fmt.Errorf("kafka: split %s/%d is already being read", t.topic, t.partition)
	}
	if r.cl == nil {
		if err := r.startLocked(); err != nil {
			return nil, err
		}
	}
	q := &queue{signal: make(chan struct{}, 1), end: end, since: since}
	r.parts[t] = q
	off := kgo.NewOffset().AtStart()
	if next >= 0 {
		off = kgo.NewOffset().At(next)
	}
	r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: {t.partition: off}})
	return q, nil
}

func (r *reader) detach(t tp) {
	r.mu.Lock()
	q, ok := r.parts[t]
	if !ok {
		r.mu.Unlock()
		return
	}
	delete(r.parts, t)
	r.queued -= q.bytes
	cl := r.cl
	cl.RemoveConsumePartitions(map[string][]int32{t.topic: {t.partition}})
	if q.paused {
		cl.ResumeFetchPartitions(map[string][]int32{t.topic: {t.partition}})
		q.since.Store(0)
	}
	var stop context.CancelFunc
	var done chan struct{}
	if len(r.parts) == 0 {
		stop, done = r.stop, r.done
		r.cl, r.stop, r.done = nil, nil, nil
		r.queued = 0
	}
	r.mu.Unlock()
	if stop != nil {
		// Closing a client takes a few milliseconds (its connections and
		// goroutines end); the split need not wait, Source.Close does.
		// The dispatcher delivers nothing once r.cl is no longer cl.
		stop()
		r.s.closeClient(cl, done)
	}
}

func (r *reader) startLocked() error {
	cfg := r.s.cfg
	fb := r.fetchBytes()
	opts := append(append([]kgo.Opt(nil), cfg.Opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{}),
		kgo.KeepControlRecords(), // to step over transaction markers at the end
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.MaxConcurrentFetches(2),
		kgo.FetchMaxBytes(fb),
		kgo.FetchMaxPartitionBytes(min(fb, partFetchMax)),
		kgo.BrokerMaxReadBytes(fb+(1<<20)),
	)
	if cfg.ReadUncommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	} else {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: new client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cl, r.stop, r.done = cl, cancel, make(chan struct{})
	go r.dispatch(ctx, cl, r.done)
	return nil
}

// dispatch polls cl and fills the queues until ctx ends.
func (r *reader) dispatch(ctx context.Context, cl *kgo.Client, done chan struct{}) {
	defer close(done)
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		r.mu.Lock()
		if r.cl != cl {
			r.mu.Unlock()
			return // detached, perhaps attached again with a new client
		}
		fs.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			q := r.parts[tp{topic, partition}]
			if q == nil || q.err != nil {
				return
			}
			if errors.Is(err, kerr.OffsetOutOfRange) {
				err = fmt.Errorf("%w: %s/%d: %w", ErrPositionLost, topic, partition, err)
			} else {
				err = fmt.Errorf("kafka: fetch %s/%d: %w", topic, partition, err)
			}
			q.err = err
			notify(q.signal)
		})
		var pause map[string][]int32
		partCap := r.partCapLocked()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			q := r.parts[tp{p.Topic, p.Partition}]
			if q == nil {
				return // detached meanwhile
			}
			// The end a consumer can reach: the last stable offset under
			// read_committed (when the broker reports it), else the high
			// watermark.
			if end := p.HighWatermark; end >= 0 {
				if r.s.cfg.ReadUncommitted || p.LastStableOffset < 0 {
					q.end.Store(end)
				} else {
					q.end.Store(p.LastStableOffset)
				}
			}
			if len(p.Records) == 0 {
				return
			}
			var n int64
			for _, rec := range p.Records {
				n += recordBytes(rec)
			}
			q.chunks = append(q.chunks, chunk{recs: p.Records, bytes: n})
			q.bytes += n
			r.queued += n
			r.peak = max(r.peak, r.queued)
			notify(q.signal)
			if !q.paused && q.bytes >= partCap {
				q.paused = true
				q.since.Store(time.Now().UnixNano())
				r.pauses++
				if pause == nil {
					pause = map[string][]int32{}
				}
				pause[p.Topic] = append(pause[p.Topic], p.Partition)
			}
		})
		if pause != nil {
			cl.PauseFetchPartitions(pause)
			r.s.log.Debug("kafka: fetching paused", "partitions", pause)
		}
		r.mu.Unlock()
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func recordBytes(rec *kgo.Record) int64 {
	n := int64(len(rec.Key)+len(rec.Value)) + recordOverhead
	for _, h := range rec.Headers {
		n += int64(len(h.Key)+len(h.Value)) + 32
	}
	return n
}

// take returns the next chunk of t's queue, or waits for one until ctx
// ends. It returns the fetch error of the partition, if any, once the
// queue is empty.
func (r *reader) take(ctx context.Context, t tp, q *queue) (chunk, error) {
	for {
		r.mu.Lock()
		if len(q.chunks) > 0 {
			c := q.chunks[0]
			q.chunks[0] = chunk{}
			q.chunks = q.chunks[1:]
			q.bytes -= c.bytes
			r.queued -= c.bytes
			if q.paused && q.bytes <= r.partCapLocked()/2 {
				q.paused = false
				q.since.Store(0)
				r.cl.ResumeFetchPartitions(map[string][]int32{t.topic: {t.partition}})
				r.s.log.Debug("kafka: fetching resumed", "topic", t.topic, "partition", t.partition)
			}
			r.mu.Unlock()
			return c, nil
		}
		err := q.err
		r.mu.Unlock()
		if err != nil {
			return chunk{}, err
		}
		select {
		case <-q.signal:
		case <-ctx.Done():
			return chunk{}, ctx.Err()
		}
	}
}
