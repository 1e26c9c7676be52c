package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/kafka"
)

// syncChild is what a process of TestShardThroughput is told.
type syncChild struct {
	Topic, Dir    string
	Brokers       []string
	Index, Shards int
}

// TestShardSyncChild is a process of TestShardThroughput: one Sync of
// shard Index of Shards, Kafka → Parquet in a local directory; it prints
// the rows it read. Skipped unless SHARD_SYNC_CHILD is set.
func TestShardSyncChild(t *testing.T) {
	env := os.Getenv("SHARD_SYNC_CHILD")
	if env == "" {
		t.Skip("only run as a process of TestShardThroughput")
	}
	var c syncChild
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	if c.Index >= c.Shards {
		fmt.Println(`{"rows":0}`)
		return // a process without a shard
	}
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, Topics: []string{c.Topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	bucket, err := parquet.OpenDir(filepath.Join(c.Dir, "tables", fmt.Sprint(c.Index)))
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(c.Dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("bench").From(src).To(dst).Checkpoints(store).Shard(c.Index, c.Shards).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, s := range res.Streams {
		rows += s.Written
	}
	fmt.Printf("{\"rows\":%d}\n", rows)
}

// TestShardThroughput measures Kafka → Parquet (a local directory) over
// 4 processes for S = 1, 2 and 4 shards of a topic of 8 partitions: the
// wall time until every process's Sync returned, and the CPU time (user
// + system of the processes) per message. A measurement, not a check:
// it runs when OPENETL_BENCH_SHARDS is set (messages; default 400000).
func TestShardThroughput(t *testing.T) {
	v := os.Getenv("OPENETL_BENCH_SHARDS")
	if v == "" {
		t.Skip("a measurement: set OPENETL_BENCH_SHARDS (and start the broker)")
	}
	total := 400_000
	fmt.Sscan(v, &total)
	brokers := realBrokers(t)
	const parts, procs = 8, 4
	topic := fmt.Sprintf("shardbench-%d", time.Now().UnixNano())
	cl := newClient(t, brokers, kgo.ProducerBatchMaxBytes(1<<20))
	createTopic(t, cl, topic, parts)
	pad := strings.Repeat("x", 100)
	for sent := 0; sent < total; {
		var recs []*kgo.Record
		for i := 0; i < 20_000 && sent < total; i++ {
			recs = append(recs, rec(topic, int32(sent%parts), fmt.Sprint(sent),
				fmt.Sprintf(`{"id":%d,"name":"user-%d","amount":%d.25,"pad":%q}`, sent, sent%1000, sent%977, pad)))
			sent++
		}
		produce(t, cl, recs...)
	}
	for _, shards := range []int{1, 2, 4} {
		dir := t.TempDir()
		start := time.Now()
		var cmds []*exec.Cmd
		for i := range procs {
			env, _ := json.Marshal(syncChild{Topic: topic, Dir: dir, Brokers: brokers, Index: i, Shards: shards})
			cmd := exec.Command(os.Args[0], "-test.run=^TestShardSyncChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "SHARD_SYNC_CHILD="+string(env))
			cmd.Stderr = os.Stderr
			cmds = append(cmds, cmd)
		}
		outs := make([][]byte, procs)
		errs := make(chan error, procs)
		for i, cmd := range cmds {
			go func() {
				var err error
				outs[i], err = cmd.Output()
				errs <- err
			}()
		}
		for range procs {
			if err := <-errs; err != nil {
				t.Fatalf("S=%d: %v", shards, err)
			}
		}
		wall := time.Since(start)
		var cpu time.Duration
		var rows int64
		for i, cmd := range cmds {
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			for _, line := range strings.Split(string(outs[i]), "\n") {
				var r struct{ Rows *int64 }
				if json.Unmarshal([]byte(line), &r) == nil && r.Rows != nil {
					rows += *r.Rows
				}
			}
		}
		if rows != int64(total) {
			t.Fatalf("S=%d: %d rows synced, want %d", shards, rows, total)
		}
		// And pyarrow finds them all, each once.
		var read, ids int64
		for i := range shards {
			st := testutil.ReadParquetTables(t, filepath.Join(dir, "tables", fmt.Sprint(i)))[topic]
			if st == nil {
				t.Fatalf("S=%d: shard %d wrote no table", shards, i)
			}
			read, ids = read+st.Rows, ids+st.DistinctIDs
		}
		if read != int64(total) || ids != int64(total) {
			t.Fatalf("S=%d: pyarrow read %d rows, %d distinct ids; want %d", shards, read, ids, total)
		}
		t.Logf("S=%d over %d processes: %d messages in %v = %.0f msg/s; CPU %v = %.2f µs/msg",
			shards, procs, total, wall.Round(time.Millisecond), float64(total)/wall.Seconds(), cpu.Round(time.Millisecond),
			float64(cpu.Microseconds())/float64(total))
	}
}
