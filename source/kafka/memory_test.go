package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

// memoryConstant is the fixed part of what TestMemoryBound allows the
// reading to add to the reading process's RSS: Config.Budget +
// memoryConstant over what the test binary holds before the source
// starts, when the process sets a soft memory limit (GOMEMLIMIT) of
// Budget + gcHeadroom. The constant covers franz-go's client and the
// per-partition overshoot of one decoded batch; the test binary's own
// footprint (80 MiB, since it links the pipeline, Parquet and S3 stack
// for the shard host tests) is measured, not assumed. Without a memory
// limit Go's GC (GOGC=100) lets the heap reach about twice what is live,
// and the bound is about 2×Budget + 48 MiB in all (measured on kfake, 4
// partitions, 1 MB batches: budget 8 MiB → 61 MiB, 16 → 72-76, 32 → 95,
// with a smaller test binary): hosts that need the tighter bound set
// GOMEMLIMIT as this test does.
const (
	memoryConstant = 32 << 20 // measured: reading adds Budget + 5-13 MiB
	gcHeadroom     = 32 << 20
)

// slowEmitter discards records, sleeping now and then so that the
// partitions' queues fill and fetching pauses.
type slowEmitter struct{ n int }

func (e *slowEmitter) Record(string, source.Op, int64, []byte, []byte) error {
	if e.n++; e.n%500 == 0 {
		time.Sleep(time.Millisecond)
	}
	return nil
}
func (e *slowEmitter) ResumePoint([]byte) error { return nil }

// TestMemoryBound: a child process drains a backlog of 10× the budget
// (4 partitions, on kfake in this process) through slow Emitters, and
// its peak RSS stays within Budget + memoryConstant above its RSS before
// the source started (under GOMEMLIMIT).
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if raceEnabled {
		t.Skip("the race detector multiplies memory use")
	}
	const budget = 16 << 20
	const parts = 4
	brokers := newCluster(t, parts, "mem")
	cl := newClient(t, brokers, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20))
	pad := strings.Repeat("x", 1000)
	total := int64(0)
	per := 10 * budget / parts / 1024
	for p := range int32(parts) {
		recs := make([]*kgo.Record, 0, per)
		for i := range per {
			v := fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, pad)
			total += int64(len(v))
			recs = append(recs, &kgo.Record{Topic: "mem", Partition: p, Value: v})
		}
		produce(t, cl, recs...)
	}
	env, _ := json.Marshal(map[string]any{"Brokers": brokers, "Budget": budget, "Want": per})
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildMemory$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "KAFKA_TEST_MEMORY_CHILD="+string(env),
		fmt.Sprintf("GOMEMLIMIT=%d", budget+gcHeadroom))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var base, peak int64
	for _, line := range strings.Split(string(out), "\n") {
		if _, v, ok := strings.Cut(line, "BASE_RSS="); ok {
			base, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if _, v, ok := strings.Cut(line, "PEAK_RSS="); ok {
			peak, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	t.Logf("backlog %d MiB, budget %d MiB: peak RSS %d MiB, %d MiB above the test binary's %d MiB (limit %d MiB)",
		total>>20, budget>>20, peak>>20, (peak-base)>>20, base>>20, (budget+memoryConstant)>>20)
	if base == 0 || peak <= base || peak-base > budget+memoryConstant {
		t.Fatalf("peak RSS %d bytes over a base of %d, want at most %d more\n%s", peak, base, budget+memoryConstant, out)
	}
}

// TestChildMemory is TestMemoryBound's child.
func TestChildMemory(t *testing.T) {
	env := os.Getenv("KAFKA_TEST_MEMORY_CHILD")
	if env == "" {
		t.Skip("only run as the child of TestMemoryBound")
	}
	var c struct {
		Brokers []string
		Budget  int64
		Want    int
	}
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	// What the test binary holds before the source starts: the bound is
	// on what reading adds to it.
	fmt.Printf("BASE_RSS=%d\n", procStatus(t, "VmRSS:"))
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, Topics: []string{"mem"}, Budget: c.Budget})
	splits, err := src.Open(t.Context(), []string{"mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, sp := range splits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := &slowEmitter{}
			if err := sp.Read(context.Background(), e, true); err != nil {
				t.Error(err)
			}
			if e.n != c.Want {
				t.Errorf("split %s read %d records, want %d", sp.ID(), e.n, c.Want)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("PEAK_RSS=%d\n", procStatus(t, "VmHWM:"))
}

// procStatus returns the value in bytes of a kB line of
// /proc/self/status ("VmRSS:", "VmHWM:"); it skips t without one.
func procStatus(t *testing.T, key string) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Skipf("no %s in /proc/self/status", key)
	return 0
}
