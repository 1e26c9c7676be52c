package kafka_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source/kafka"
)

// nullDest is a destination that drops what it is given.
type nullDest struct{}

func (nullDest) Class() sink.Class               { return sink.StageAndApply }
func (nullDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }
func (nullDest) Writer(context.Context, sink.WriterConfig) (sink.Writer, error) {
	return nullWriter{}, nil
}

type nullWriter struct{}

func (nullWriter) Write(context.Context, string, arrow.RecordBatch) error { return nil }
func (nullWriter) PreCommit(context.Context, uint64) (sink.Committable, error) {
	return sink.Committable("x"), nil
}
func (nullWriter) Commit(context.Context, uint64, []sink.Committable) error { return nil }
func (nullWriter) Recover(context.Context, checkpoint.Generation, *checkpoint.Record) (sink.Outcome, error) {
	return sink.Applied, nil
}
func (nullWriter) Close(context.Context) error          { return nil }
func (nullWriter) Finish(context.Context, uint64) error { return nil }

// benchMessages is the topic's size: 1M messages (~200 MB), so that each
// run takes a second or more. Each side has a fixed cost per run (its
// clients; the pipeline's also Discover, its first listing and its
// checkpoint commit), about 7 ms for the ceiling and 30 ms for the
// pipeline, which at 200k messages was a tenth of the pipeline's run.
const benchMessages = 1_000_000

// preload writes benchMessages JSON messages of about 200 bytes over 4
// partitions of a new topic.
func preload(b *testing.B, brokers []string) string {
	b.Helper()
	cl := newClient(b, brokers)
	topic := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	createTopic(b, cl, topic, 4)
	pad := strings.Repeat("x", 120)
	recs := make([]*kgo.Record, 0, 10_000)
	for i := range benchMessages {
		v := fmt.Appendf(nil, `{"id":%d,"name":"customer %d","amount":%d.25,"ok":true,"pad":%q}`, i, i, i%1000, pad)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 4), Key: fmt.Appendf(nil, "%d", i), Value: v})
		if len(recs) == cap(recs) {
			produce(b, cl, recs...)
			recs = recs[:0]
		}
	}
	produce(b, cl, recs...)
	return topic
}

// ceiling reads the topic to its end with a plain franz-go consumer that
// discards the records.
func ceiling(b *testing.B, brokers []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	n := 0
	for n < benchMessages {
		fs := cl.PollFetches(context.Background())
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		n += fs.NumRecords()
	}
}

// viaPipeline syncs the topic through the source, the runner and the
// engine into a null writer.
func viaPipeline(b *testing.B, brokers []string, topic string) {
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{topic}})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(context.Background())
	store, err := checkpoint.OpenDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close(context.Background())
	p, err := etl.NewPipeline("bench").From(src).To(nullDest{}).Checkpoints(store).Build()
	if err != nil {
		b.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if got := res.Streams[topic].Read; got != benchMessages {
		b.Fatalf("read %d records, want %d", got, benchMessages)
	}
}

// benchRatio measures, in one run, the pipeline's throughput against the
// fetch-and-discard ceiling on the same topic, alternating the two.
func benchRatio(b *testing.B, brokers []string) {
	topic := preload(b, brokers)
	ceiling(b, brokers, topic) // warm up both
	viaPipeline(b, brokers, topic)
	var tc, tp time.Duration
	var cc, cp float64
	b.ResetTimer()
	for range b.N {
		c0, t0 := cpuSeconds(), time.Now()
		ceiling(b, brokers, topic)
		c1, t1 := cpuSeconds(), time.Now()
		viaPipeline(b, brokers, topic)
		tc, tp = tc+t1.Sub(t0), tp+time.Since(t1)
		cc, cp = cc+c1-c0, cp+cpuSeconds()-c1
	}
	msgs := float64(benchMessages * b.N)
	b.ReportMetric(msgs/tc.Seconds(), "ceiling-msgs/s")
	b.ReportMetric(msgs/tp.Seconds(), "pipeline-msgs/s")
	b.ReportMetric(tc.Seconds()/tp.Seconds(), "ratio")
	// CPU of this process per message (with kfake, the broker's too),
	// steadier than wall time on a shared machine.
	b.ReportMetric(cc/msgs*1e6, "ceiling-cpu-us/msg")
	b.ReportMetric(cp/msgs*1e6, "pipeline-cpu-us/msg")
	b.ReportMetric(cc/cp, "cpu-ratio")
}

// cpuSeconds is the CPU time (user + system) this process used so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkVsCeilingKfake: on kfake (in memory: flatters both sides).
func BenchmarkVsCeilingKfake(b *testing.B) {
	benchRatio(b, newCluster(b, 4))
}

// BenchmarkVsCeilingRealBroker: on the broker scripts/servers.sh starts.
func BenchmarkVsCeilingRealBroker(b *testing.B) {
	v := os.Getenv("OPENETL_TEST_KAFKA_BROKERS")
	if v == "" {
		b.Skip("OPENETL_TEST_KAFKA_BROKERS is not set")
	}
	benchRatio(b, strings.Split(v, ","))
}
