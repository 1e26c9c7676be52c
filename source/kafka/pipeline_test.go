package kafka_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/kafka"
)

const pipelineName = "kafka-e2e"

// syncOnce runs one Sync of a Kafka → Parquet pipeline whose tables and
// checkpoints live under dir, exactly once required.
func syncOnce(ctx context.Context, brokers []string, topic, dir string, cfg kafka.Config) (etl.Result, error) {
	cfg.Opts = []kgo.Opt{kgo.SeedBrokers(brokers...)}
	cfg.Topics = []string{topic}
	src, err := kafka.New(cfg)
	if err != nil {
		return etl.Result{}, err
	}
	defer src.Close(context.Background())
	tables := filepath.Join(dir, "tables")
	if err := os.MkdirAll(tables, 0o755); err != nil {
		return etl.Result{}, err
	}
	bucket, err := fileblob.OpenBucket(tables, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		return etl.Result{}, err
	}
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		return etl.Result{}, err
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		return etl.Result{}, err
	}
	defer store.Close(context.Background())
	p, err := etl.NewPipeline(pipelineName).From(testutil.HoldSource(src)).To(dst).Checkpoints(store).
		Require(delivery.ExactlyOnce).EpochEvery(100*time.Millisecond, 0).BatchSize(512, 0).Build()
	if err != nil {
		return etl.Result{}, err
	}
	return p.Sync(ctx)
}

// doc is a produced message: msg identifies the message, id the row.
func doc(msg string, id, version int) string {
	return fmt.Sprintf(`{"msg":%q,"id":%d,"version":%d,"pad":%q}`, msg, id, version, strings.Repeat("x", 120))
}

// TestPipelineKfake: Kafka (kfake) → runner → engine → sink/parquet over
// two syncs, with malformed messages and an aborted transaction between:
// pyarrow finds every good message exactly once and no aborted one; the
// malformed ones are quarantined with topic/partition (split) and seq
// (kafka.Seq of partition and offset); the consumer group trails the checkpoints.
func TestPipelineKfake(t *testing.T) {
	pipelineE2E(t, newCluster(t, 4, "orders"), "orders")
}

// TestPipelineRealBroker is TestPipelineKfake against the broker
// scripts/servers.sh starts.
func TestPipelineRealBroker(t *testing.T) {
	brokers := realBrokers(t)
	topic := fmt.Sprintf("orders-%d", time.Now().UnixNano())
	createTopic(t, newClient(t, brokers), topic, 4)
	pipelineE2E(t, brokers, topic)
}

func pipelineE2E(t *testing.T, brokers []string, topic string) {
	cl := newClient(t, brokers)
	dir := t.TempDir()
	var want []string
	type bad struct {
		split  string
		offset int64
		value  string
	}
	var bads []bad
	next := map[int32]int64{}
	// Offsets come from the produce results: on a real broker the
	// markers of a transaction land asynchronously, among later records.
	send := func(n int, round int) {
		var recs []*kgo.Record
		var badIdx []int
		for i := range n {
			p := int32(i % 4)
			id := (i/4)%50*4 + int(p)
			msg := fmt.Sprintf("r%d-%d", round, i)
			v := doc(msg, id, i)
			if i%97 == 13 {
				v = fmt.Sprintf(`{"msg":"%s", broken`, msg)
				badIdx = append(badIdx, i)
			} else {
				want = append(want, msg)
			}
			recs = append(recs, rec(topic, p, strconv.Itoa(id), v))
		}
		produce(t, cl, recs...)
		for _, i := range badIdx {
			r := recs[i]
			bads = append(bads, bad{fmt.Sprintf("%s/%d", topic, r.Partition), r.Offset, string(r.Value)})
		}
		for _, r := range recs {
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		}
	}
	send(2000, 1)
	res, err := syncOnce(t.Context(), brokers, topic, dir, kafka.Config{Group: "e2e-" + topic, Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Epochs == 0 {
		t.Fatalf("first sync committed no epoch: %+v", res)
	}
	// An aborted transaction, then more messages.
	var aborted []*kgo.Record
	for p := range int32(4) {
		aborted = append(aborted, rec(topic, p, "1", doc("aborted", 1, 0)))
	}
	produceTxn(t, brokers, "e2e-"+topic, false, aborted...)
	send(1000, 2)
	if _, err := syncOnce(t.Context(), brokers, topic, dir, kafka.Config{Group: "e2e-" + topic, Budget: 1 << 20}); err != nil {
		t.Fatal(err)
	}

	msgs, ops := parquetColumn(t, filepath.Join(dir, "tables"), topic, "msg")
	checkExactlyOnce(t, msgs, want)
	for _, op := range ops {
		if op != "insert" {
			t.Fatalf("op %q in a JSON stream", op)
		}
	}

	lines := quarantineLines(t, filepath.Join(dir, "checkpoints"), pipelineName, topic)
	if len(lines) != len(bads) {
		t.Fatalf("%d quarantine lines, want %d", len(lines), len(bads))
	}
	got := map[string]string{}
	for _, l := range lines {
		got[fmt.Sprintf("%v@%v", l["split"], l["seq"])] = fmt.Sprint(l["payload"])
		if l["reason"] != "parse_error" {
			t.Errorf("quarantine reason %v, want parse_error", l["reason"])
		}
	}
	for _, b := range bads {
		var p int32
		fmt.Sscanf(b.split, topic+"/%d", &p)
		if v := got[fmt.Sprintf("%s@%d", b.split, kafka.Seq(p, b.offset))]; v != b.value {
			t.Errorf("quarantined %s offset %d: payload %q, want %q (have %v)", b.split, b.offset, v, b.value, slices.Sorted(maps.Keys(got)))
		}
	}

	// Ack runs one checkpoint behind: the group trails or equals the end.
	offs := groupOffsets(t, brokers, "e2e-"+topic, topic)
	for p := range int32(4) {
		if offs[p] <= 0 || offs[p] > next[p]+1 { // +1: a trailing marker
			t.Errorf("group offset of partition %d is %d, want in (0, %d]", p, offs[p], next[p]+1)
		}
	}
}

func checkExactlyOnce(t *testing.T, got, want []string) {
	t.Helper()
	count := map[string]int{}
	for _, m := range got {
		count[m]++
	}
	var missing, dup, extra []string
	for _, m := range want {
		switch count[m] {
		case 0:
			missing = append(missing, m)
		case 1:
		default:
			dup = append(dup, fmt.Sprintf("%s×%d", m, count[m]))
		}
		delete(count, m)
	}
	for m := range count {
		extra = append(extra, m)
	}
	if len(missing)+len(dup)+len(extra) > 0 {
		slices.Sort(extra)
		t.Fatalf("%d rows for %d messages: missing %d %.20q, duplicated %d %.20q, unexpected %d %.20q",
			len(got), len(want), len(missing), missing, len(dup), dup, len(extra), extra)
	}
}

// TestChildSync is the child process of the kill tests: it runs one sync
// as its environment says, and is skipped otherwise.
func TestChildSync(t *testing.T) {
	env := os.Getenv("KAFKA_TEST_CHILD")
	if env == "" {
		t.Skip("only run as the child of a kill test")
	}
	var c struct {
		Brokers  []string
		Topic    string
		Dir      string
		Registry string
	}
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	cfg := kafka.Config{Group: "kill", Budget: 1 << 20}
	if c.Registry != "" {
		rcl, err := sr.NewClient(sr.URLs(c.Registry))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Decoder, cfg.Registry = kafka.DecodeRegistry, rcl
	}
	if _, err := syncOnce(context.Background(), c.Brokers, c.Topic, c.Dir, cfg); err != nil {
		t.Fatal(err)
	}
}

// docSchema is doc's message as an Avro record.
const docSchema = `{"type":"record","name":"Doc","fields":[{"name":"msg","type":"string"},{"name":"id","type":"long"},
 {"name":"version","type":"long"},{"name":"pad","type":"string"}]}`

// killTest produces n keyed JSON messages with updates (more while the
// children run), runs the pipeline in child processes SIGKILLed kills
// times at random moments, then once to completion, and checks with
// pyarrow that the Parquet output holds each message exactly once. With
// a registry (its URL, the children's too), the messages are Avro in its
// wire format instead, read with DecodeRegistry.
func killTest(t *testing.T, brokers []string, topic string, n, kills int, registry ...string) {
	if raceEnabled {
		n /= 4 // the children are slower too
	}
	cl := newClient(t, brokers)
	createTopic(t, cl, topic, 3)
	dir := t.TempDir()
	var want []string
	round := 0
	reg := ""
	var encode func(msg string, id, version int) []byte
	if len(registry) > 0 {
		reg = registry[0]
		rcl, err := sr.NewClient(sr.URLs(reg))
		if err != nil {
			t.Fatal(err)
		}
		ss, err := rcl.CreateSchema(context.Background(), topic+"-value", sr.Schema{Schema: docSchema})
		if err != nil {
			t.Fatal(err)
		}
		sch, err := avro.Parse(docSchema)
		if err != nil {
			t.Fatal(err)
		}
		pad := strings.Repeat("x", 120)
		encode = func(msg string, id, version int) []byte {
			b := binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID))
			b, err := sch.AppendEncode(b, map[string]any{"msg": msg, "id": int64(id), "version": int64(version), "pad": pad})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	send := func(n int) {
		round++
		recs := make([]*kgo.Record, 0, n)
		for i := range n {
			id := rand.IntN(n/4 + 1) // several versions of most rows
			msg := fmt.Sprintf("r%d-%d", round, i)
			want = append(want, msg)
			r := rec(topic, int32(id%3), strconv.Itoa(id), doc(msg, id, i))
			if encode != nil {
				r.Value = encode(msg, id, i)
			}
			recs = append(recs, r)
		}
		produce(t, cl, recs...)
	}
	send(n)
	childEnv, _ := json.Marshal(map[string]any{"Brokers": brokers, "Topic": topic, "Dir": dir, "Registry": reg})
	// Each child holds its partitions 1 to n/12 records into what it
	// reads (each round adds about n/6 per partition), so it can't finish
	// before the kill however fast the machine.
	start := func(h testutil.Hold) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildSync$", "-test.count=1")
		cmd.Env = append(os.Environ(), "KAFKA_TEST_CHILD="+string(childEnv))
		return testutil.StartChild(t, cmd, h)
	}
	// Each child is killed at a random moment after it committed an epoch
	// (HEAD changed), so the kills land between and inside epochs rather
	// than before the first one.
	head := filepath.Join(dir, "checkpoints", pipelineName, "_checkpoints", "HEAD")
	headStamp := func() string {
		b, _ := os.ReadFile(head)
		return string(b)
	}
	killed := 0
	for i := range kills {
		before := headStamp()
		c := start(testutil.Hold{After: 1 + rand.Int64N(int64(n/12))})
		done := false
	wait:
		for {
			select {
			case <-c.Exited():
				done = true
				break wait
			case <-time.After(5 * time.Millisecond):
				if headStamp() != before {
					break wait
				}
			}
		}
		if !done {
			time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		}
		if c.Kill() {
			killed++
		} else {
			t.Logf("child %d ended before the kill: %v", i, c.Err())
			if c.Err() != nil {
				t.Fatalf("child %d failed:\n%s", i, c.Output())
			}
		}
		send(n / 2)
	}
	if killed < kills/2 {
		t.Errorf("only %d of %d children were killed before they finished: make the backlog larger", killed, kills)
	}
	c := start(testutil.Hold{})
	t0 := time.Now()
	if err := c.Wait(); err != nil {
		t.Fatalf("final child: %v\n%s", err, c.Output())
	}
	t.Logf("%d children SIGKILLed, %d messages; the last child took %v", killed, len(want), time.Since(t0))
	msgs, _ := parquetColumn(t, filepath.Join(dir, "tables"), topic, "msg")
	checkExactlyOnce(t, msgs, want)
}

// TestKillKfake runs the kill test against kfake (the children connect to
// this process's in-process cluster over loopback).
func TestKillKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	brokers := newCluster(t, 3)
	killTest(t, brokers, "kill-kfake", 200000, 5)
}

// TestKillAvroKfake is the kill test with Avro messages in the wire
// format of a registry (srfake, in this process; the children ask it
// over loopback).
func TestKillAvroKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	brokers := newCluster(t, 3)
	reg, _ := newRegistry(t)
	killTest(t, brokers, "kill-avro", 100000, 4, reg.URL())
}

// TestKillRealBroker is the kill test against the Apache Kafka broker
// scripts/servers.sh starts (OPENETL_TEST_KAFKA_BROKERS). Without it the
// test fails, unless OPENETL_SKIP_SERVERS=1.
func TestKillRealBroker(t *testing.T) {
	brokers := realBrokers(t)
	killTest(t, brokers, fmt.Sprintf("kill-%d", time.Now().UnixNano()), 100000, 4)
}

// TestKillAvroRealServers is the kill test with Avro messages through
// the real servers: the Apache Kafka broker and scripts/servers.sh's
// registry (Apicurio's Confluent-compatible API), which the children ask
// for the writer schema. Smaller than the JSON one: each child's hold
// still lands inside its backlog, and it adds a few seconds.
func TestKillAvroRealServers(t *testing.T) {
	brokers := realBrokers(t)
	url := realRegistry(t)
	killTest(t, brokers, fmt.Sprintf("kill-avro-%d", time.Now().UnixNano()), 24000, 3, url)
}

func realBrokers(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("OPENETL_TEST_KAFKA_BROKERS")
	if v == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_KAFKA_BROKERS is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_KAFKA_BROKERS is not set: start a broker with scripts/servers.sh start kafka, or set OPENETL_SKIP_SERVERS=1")
	}
	return strings.Split(v, ",")
}

// TestPipelineDebezium: a Debezium topic lands as a CDC stream: the
// Parquet rows carry insert, update and delete ops in the topic's order,
// with the key's row for a delete; tombstones add no row.
func TestPipelineDebezium(t *testing.T) {
	brokers := newCluster(t, 1, "inventory")
	cl := newClient(t, brokers)
	produce(t, cl,
		rec("inventory", 0, `{"id":1}`, `{"op":"r","after":{"id":1,"name":"snap"}}`),
		rec("inventory", 0, `{"id":2}`, `{"schema":{},"payload":{"op":"c","before":null,"after":{"id":2,"name":"new"}}}`),
		rec("inventory", 0, `{"id":1}`, `{"op":"u","before":{"id":1,"name":"snap"},"after":{"id":1,"name":"changed"}}`),
		rec("inventory", 0, `{"id":2}`, `{"op":"d","before":{"id":2,"name":"new"},"after":null}`),
		&kgo.Record{Topic: "inventory", Partition: 0, Key: []byte(`{"id":2}`)},
		rec("inventory", 0, `{"id":3}`, `{"op":"d","before":null,"after":null}`),
	)
	dir := t.TempDir()
	if _, err := syncOnce(t.Context(), brokers, "inventory", dir, kafka.Config{Decoder: kafka.DecodeDebezium,
		PrimaryKey: map[string][]string{"inventory": {"id"}}}); err != nil {
		t.Fatal(err)
	}
	ids, ops := parquetColumn(t, filepath.Join(dir, "tables"), "inventory", "id")
	var got []string
	for i := range ids {
		got = append(got, ops[i]+" "+ids[i])
	}
	slices.Sort(got)
	want := []string{"delete 2", "delete 3", "insert 1", "insert 2", "update 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
}

// TestIDsUniqueAcrossPartitions: messages with the same key, or keyless
// with the same value, at the same offsets of two partitions land with
// different _openetl_id values (the seq tells the partitions apart), and
// a second pipeline reading the topic from the start gives every message
// the same ID again (exact replay).
func TestIDsUniqueAcrossPartitions(t *testing.T) {
	brokers := newCluster(t, 2, "twins")
	cl := newClient(t, brokers)
	var recs []*kgo.Record
	for i := range 20 {
		key := "" // offsets 0-9: keyless, same value
		if i >= 10 {
			key = "k" // offsets 10-19: same key, same value
		}
		for p := range int32(2) {
			recs = append(recs, rec("twins", p, key, fmt.Sprintf(`{"n":%d}`, i/10)))
		}
	}
	produce(t, cl, recs...)
	ids := func() []string {
		dir := t.TempDir()
		if _, err := syncOnce(t.Context(), brokers, "twins", dir, kafka.Config{}); err != nil {
			t.Fatal(err)
		}
		ids, _ := parquetColumn(t, filepath.Join(dir, "tables"), "twins", "_openetl_id")
		seqs, _ := parquetColumn(t, filepath.Join(dir, "tables"), "twins", "_openetl_seq")
		if len(ids) != 40 || len(seqs) != 40 {
			t.Fatalf("%d rows, %d seqs, want 40", len(ids), len(seqs))
		}
		for _, s := range seqs {
			v, _ := strconv.ParseInt(s, 10, 64)
			if p, off := kafka.Position(v); p < 0 || p > 1 || off < 0 || off > 19 {
				t.Fatalf("_openetl_seq %s is partition %d offset %d", s, p, off)
			}
		}
		slices.Sort(ids)
		if c := slices.Compact(slices.Clone(ids)); len(c) != len(ids) {
			t.Fatalf("%d distinct _openetl_id values for %d messages", len(c), len(ids))
		}
		return ids
	}
	first, again := ids(), ids()
	if !slices.Equal(first, again) {
		t.Fatalf("a second read gave other IDs:\n%q\n%q", first, again)
	}
}

// TestSeqPosition: Seq and Position are inverses over the whole range,
// and a later offset of a partition has a higher seq.
func TestSeqPosition(t *testing.T) {
	for _, p := range []int32{0, 1, 7, kafka.MaxPartitions - 1} {
		prev := int64(-1)
		for _, off := range []int64{0, 1, 1 << 32, kafka.MaxOffset} {
			s := kafka.Seq(p, off)
			if s < 0 || s <= prev {
				t.Fatalf("Seq(%d, %d) = %d, after %d", p, off, s, prev)
			}
			prev = s
			if gp, goff := kafka.Position(s); gp != p || goff != off {
				t.Fatalf("Position(Seq(%d, %d)) = %d, %d", p, off, gp, goff)
			}
		}
	}
}
