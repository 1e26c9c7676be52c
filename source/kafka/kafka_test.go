package kafka_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

func state(next int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(next)) }

// TestTransactions: under read_committed (the default) records of aborted
// transactions never land, and a bounded read ends although the
// partition ends with a transaction marker; ReadUncommitted reads them.
func TestTransactions(t *testing.T) {
	brokers := newCluster(t, 1, "t")
	plain := newClient(t, brokers)
	txn := newClient(t, brokers, kgo.TransactionalID("tx"))
	want := []string{}
	all := []string{}
	for i := range 6 {
		v := fmt.Sprintf(`{"i":%d}`, i)
		produce(t, plain, rec("t", 0, "", v))
		want, all = append(want, v), append(all, v)
		commit := i%2 == 0
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			v := fmt.Sprintf(`{"i":%d,"j":%d,"commit":%v}`, i, j, commit)
			produce(t, txn, rec("t", 0, "", v))
			all = append(all, v)
			if commit {
				want = append(want, v)
			}
		}
		if err := txn.EndTransaction(t.Context(), kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		uncommitted bool
		want        []string
	}{{"read_committed", false, want}, {"read_uncommitted", true, all}} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"t"}, ReadUncommitted: tc.uncommitted})
			got, states := readAll(t, src, []string{"t"}, nil)
			var vals []string
			for _, r := range got {
				vals = append(vals, r.Payload)
			}
			if !slices.Equal(vals, tc.want) {
				t.Fatalf("read %d records:\n%q\nwant %d:\n%q", len(vals), vals, len(tc.want), tc.want)
			}
			// 6 plain + 6×3 transactional + 6 markers = 30 offsets.
			if st := states["t/0"]; !slices.Equal(st, state(30)) {
				t.Fatalf("final state %x, want next offset 30", st)
			}
		})
	}
}

// TestDebezium: change events with and without the schema wrapper become
// inserts, updates and deletes with the key's fields as key; tombstones
// are skipped; bad envelopes are emitted as arrays the engine quarantines.
func TestDebezium(t *testing.T) {
	brokers := newCluster(t, 1, "dbz")
	cl := newClient(t, brokers)
	wrappedKey := `{"schema":{"type":"struct"},"payload":{"id":1}}`
	produce(t, cl,
		rec("dbz", 0, wrappedKey, `{"schema":{"type":"struct"},"payload":{"op":"r","before":null,"after":{"id":1,"name":"a"},"source":{"lsn":10}}}`),
		rec("dbz", 0, `{"id":2}`, `{"op":"c","before":null,"after":{"id":2,"name":"b"}}`),
		rec("dbz", 0, `{"id":1}`, `{"op":"u","before":{"id":1,"name":"a"},"after":{"id":1,"name":"A"}}`),
		rec("dbz", 0, `{"id":2}`, `{"op":"d","before":{"id":2,"name":"b"},"after":null}`),
		&kgo.Record{Topic: "dbz", Partition: 0, Key: []byte(`{"id":2}`)}, // tombstone
		rec("dbz", 0, `{"id":3}`, `{"op":"d","before":null,"after":null}`),
		rec("dbz", 0, `{"id":4}`, `{"after":{"id":4}}`),
		rec("dbz", 0, `{"id":5}`, `not json`),
		rec("dbz", 0, `{"id":6}`, `{"op":"t"}`),
	)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"dbz"}, Decoder: kafka.DecodeDebezium,
		PrimaryKey: map[string][]string{"dbz": {"id"}}})
	cat, err := src.Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := cat.Stream("dbz"); !st.CDC || !slices.Equal(st.PrimaryKey, []string{"id"}) {
		t.Fatalf("stream %+v, want CDC keyed by id", st)
	}
	got, _ := readAll(t, src, []string{"dbz"}, nil)
	want := []emitted{
		{Op: source.OpInsert, Seq: 0, Key: `{"id":1}`, Payload: `{"id":1,"name":"a"}`},
		{Op: source.OpInsert, Seq: 1, Key: `{"id":2}`, Payload: `{"id":2,"name":"b"}`},
		{Op: source.OpUpdate, Seq: 2, Key: `{"id":1}`, Payload: `{"id":1,"name":"A"}`},
		{Op: source.OpDelete, Seq: 3, Key: `{"id":2}`, Payload: `{"id":2,"name":"b"}`},
		{Op: source.OpDelete, Seq: 5, Key: `{"id":3}`, Payload: `{"id":3}`},
		{Op: source.OpInsert, Seq: 6, Key: `{"id":4}`, Payload: `["kafka: bad debezium envelope: no \"op\" field","{\"after\":{\"id\":4}}"]`},
		{Op: source.OpInsert, Seq: 7, Key: `{"id":5}`},
		{Op: source.OpInsert, Seq: 8, Key: `{"id":6}`, Payload: `["kafka: bad debezium envelope: unsupported op \"t\"","{\"op\":\"t\"}"]`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Op != w.Op || g.Seq != w.Seq || g.Key != w.Key || (w.Payload != "" && g.Payload != w.Payload) {
			t.Errorf("record %d: got %v %d %s %s, want %v %d %s %s", i, g.Op, g.Seq, g.Key, g.Payload, w.Op, w.Seq, w.Key, w.Payload)
		}
	}
	var arr []any
	if err := json.Unmarshal([]byte(got[6].Payload), &arr); err != nil || len(arr) != 2 || arr[1] != "not json" {
		t.Errorf("bad JSON envelope: payload %s, want an array keeping the value", got[6].Payload)
	}
}

// TestColumnsAndRaw: the _kafka_* fields are merged into documents;
// DecodeRaw wraps any bytes in base64.
func TestColumnsAndRaw(t *testing.T) {
	brokers := newCluster(t, 2, "c")
	cl := newClient(t, brokers)
	ts := time.UnixMilli(1_700_000_000_123)
	produce(t, cl,
		&kgo.Record{Topic: "c", Partition: 1, Key: []byte("k1"), Value: []byte(`{"a":1}`), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}},
		&kgo.Record{Topic: "c", Partition: 1, Value: []byte(` {} `), Timestamp: ts},
		&kgo.Record{Topic: "c", Partition: 1, Key: []byte{0xff}, Value: []byte(`[1]`), Timestamp: ts},
	)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"c"}, Columns: kafka.AllColumns})
	got, _ := readAll(t, src, []string{"c"}, nil)
	want := []string{
		`{"_kafka_topic":"c","_kafka_partition":1,"_kafka_offset":0,"_kafka_timestamp":1700000000123,"_kafka_key":"k1","_kafka_headers":{"h":"v"},"a":1}`,
		`{"_kafka_topic":"c","_kafka_partition":1,"_kafka_offset":1,"_kafka_timestamp":1700000000123,"_kafka_key":null,"_kafka_headers":{}}`,
		`[1]`, // not an object: unchanged, for the engine to quarantine
	}
	if len(got) != 3 {
		t.Fatalf("got %d records: %+v", len(got), got)
	}
	for i, w := range want {
		if got[i].Payload != w {
			t.Errorf("record %d: payload\n%s\nwant\n%s", i, got[i].Payload, w)
		}
	}
	if got[0].Key != "k1" || got[0].Split != "c/1" {
		t.Errorf("record 0: key %q split %q", got[0].Key, got[0].Split)
	}

	raw := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"c"}, Decoder: kafka.DecodeRaw})
	got, _ = readAll(t, raw, []string{"c"}, nil)
	if len(got) != 3 || got[2].Payload != `{"value":"WzFd"}` || got[0].Payload != `{"value":"eyJhIjoxfQ=="}` {
		t.Fatalf("raw payloads: %+v", got)
	}
}

// TestResumeFromStateNotGroup: a split reopened from a saved state
// continues right after it, whatever the consumer group says; Ack commits
// the states to the group (so lag shows in Kafka's tooling).
func TestResumeFromStateNotGroup(t *testing.T) {
	brokers := newCluster(t, 2, "r")
	cl := newClient(t, brokers)
	for i := range 100 {
		produce(t, cl, rec("r", int32(i%2), "", fmt.Sprintf(`{"i":%d}`, i)))
	}
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"r"}, Group: "g"})
	full, _ := readAll(t, src, []string{"r"}, nil)
	if len(full) != 100 {
		t.Fatalf("full read: %d records, want 100", len(full))
	}
	// The group says 0 and 50; the checkpoint says 20 and 7.
	if err := src.Ack(t.Context(), map[source.SplitID][]byte{"r/0": state(0), "r/1": state(50)}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, "g", "r"); got[0] != 0 || got[1] != 50 {
		t.Fatalf("group offsets after Ack: %v", got)
	}
	got, states := readAll(t, src, []string{"r"}, map[source.SplitID][]byte{"r/0": state(20), "r/1": state(7)})
	if len(got) != 30+43 {
		t.Fatalf("resumed read: %d records, want 73", len(got))
	}
	for _, r := range got {
		p, off := kafka.Position(r.Seq)
		if fmt.Sprintf("r/%d", p) != string(r.Split) {
			t.Fatalf("split %s emitted seq %#x, of partition %d", r.Split, r.Seq, p)
		}
		if (p == 0 && off < 20) || (p == 1 && off < 7) {
			t.Fatalf("resumed read emitted %s offset %d, before its state", r.Split, off)
		}
	}
	if !slices.Equal(states["r/0"], state(50)) || !slices.Equal(states["r/1"], state(50)) {
		t.Fatalf("final states %x", states)
	}
	if err := src.Ack(t.Context(), states); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, "g", "r"); got[0] != 50 || got[1] != 50 {
		t.Fatalf("group offsets after the second Ack: %v", got)
	}
}

func groupOffsets(t *testing.T, brokers []string, group, topic string) map[int32]int64 {
	t.Helper()
	cl := newClient(t, brokers)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = group
	req.Groups = append(req.Groups, rg)
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, g := range resp.Groups {
		for _, tt := range g.Topics {
			for _, p := range tt.Partitions {
				out[p.Partition] = p.Offset
			}
		}
	}
	for _, tt := range resp.Topics {
		for _, p := range tt.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// TestNewPartitionsAndTopics: partitions added to a topic become splits
// at the next Open; topics matching TopicRegex, streams at the next
// Discover.
func TestNewPartitionsAndTopics(t *testing.T) {
	brokers := newCluster(t, 1, "events-a", "other")
	cl := newClient(t, brokers)
	produce(t, cl, rec("events-a", 0, "", `{"x":1}`))
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, TopicRegex: regexp.MustCompile(`^events-`)})
	cat, err := src.Discover(t.Context())
	if err != nil || len(cat.Streams) != 1 || cat.Streams[0].Name != "events-a" {
		t.Fatalf("Discover: %+v %v", cat, err)
	}
	_, states := readAll(t, src, []string{"events-a"}, nil)

	createPartitions(t, cl, "events-a", 3)
	createTopic(t, cl, "events-b", 2)
	cl = newClient(t, brokers) // fresh metadata
	produce(t, cl, rec("events-a", 0, "", `{"x":2}`), rec("events-a", 2, "", `{"x":3}`), rec("events-b", 1, "", `{"y":1}`))
	cat, err = src.Discover(t.Context())
	if err != nil || len(cat.Streams) != 2 || cat.Streams[1].Name != "events-b" {
		t.Fatalf("Discover after new topic: %+v %v", cat, err)
	}
	got, states := readAll(t, src, []string{"events-a", "events-b"}, states)
	if len(states) != 5 {
		t.Fatalf("splits %v, want 3 of events-a and 2 of events-b", states)
	}
	var ps []string
	for _, r := range got {
		ps = append(ps, string(r.Split)+" "+r.Payload)
	}
	want := []string{`events-a/0 {"x":2}`, `events-a/2 {"x":3}`, `events-b/1 {"y":1}`}
	if !slices.Equal(ps, want) {
		t.Fatalf("read %q, want %q", ps, want)
	}
}

func createPartitions(t *testing.T, cl *kgo.Client, topic string, count int32) {
	t.Helper()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatal(err)
	}
	waitPartitions(t, cl, topic, count)
}

func createTopic(t testing.TB, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatal(err)
	}
	waitPartitions(t, cl, topic, partitions)
}

// waitPartitions waits until metadata shows topic with n partitions, each
// with a leader.
func waitPartitions(t testing.TB, cl *kgo.Client, topic string, n int32) {
	t.Helper()
	testutil.Until(t, fmt.Sprintf("topic %s to have %d partitions with leaders", topic, n), func() bool {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		if resp, err := req.RequestWith(context.Background(), cl); err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 &&
			len(resp.Topics[0].Partitions) == int(n) {
			ok := true
			for _, p := range resp.Topics[0].Partitions {
				ok = ok && p.Leader >= 0 && p.ErrorCode == 0
			}
			if ok {
				cl.ForceMetadataRefresh()
				return true
			}
		}
		return false
	})
}

// TestBadState: Open rejects a state of the wrong length.
func TestBadState(t *testing.T) {
	brokers := newCluster(t, 1, "s")
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"s"}})
	_, err := src.Open(t.Context(), []string{"s"}, map[source.SplitID][]byte{"s/0": {1, 2}})
	if !errors.Is(err, kafka.ErrState) {
		t.Fatalf("Open with a 2-byte state: %v, want ErrState", err)
	}
	if _, err := src.Open(t.Context(), []string{"nope"}, nil); !errors.Is(err, kafka.ErrUnknownTopic) {
		t.Fatalf("Open of an unknown stream: %v, want ErrUnknownTopic", err)
	}
}

// TestConfigErrors: New names the bad field.
func TestConfigErrors(t *testing.T) {
	for _, cfg := range []kafka.Config{
		{Topics: []string{"a"}},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1")}},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1")}, Topics: []string{"_a"}},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1")}, Topics: []string{"a", "a"}},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1")}, Topics: []string{"a"}, Budget: 10},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1")}, Topics: []string{"a"}, Decoder: 9},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1"), kgo.ConsumerGroup("g")}, Topics: []string{"a"}},
		{Opts: []kgo.Opt{kgo.SeedBrokers("x:1"), kgo.ConsumeTopics("a")}, Topics: []string{"a"}},
	} {
		if _, err := kafka.New(cfg); !errors.Is(err, kafka.ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
}

// TestPositionLost: a resume offset the partition no longer holds fails
// Read with ErrPositionLost, bounded or not, rather than silently reading
// from elsewhere.
func TestPositionLost(t *testing.T) {
	brokers := newCluster(t, 1, "lost")
	cl := newClient(t, brokers)
	for i := range 10 {
		produce(t, cl, rec("lost", 0, "", fmt.Sprintf(`{"i":%d}`, i)))
	}
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"lost"}})
	for _, bounded := range []bool{true, false} {
		splits, err := src.Open(t.Context(), []string{"lost"}, map[source.SplitID][]byte{"lost/0": state(1000)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		var recs []emitted
		err = splits[0].Read(ctx, &collector{recs: &recs}, bounded)
		cancel()
		if !errors.Is(err, kafka.ErrPositionLost) || len(recs) != 0 {
			t.Errorf("bounded=%v: Read = %v after %d records, want ErrPositionLost", bounded, err, len(recs))
		}
	}
}

// lagProbe asks the split for its lag at every record.
type lagProbe struct {
	sp interface {
		Lag() (int64, string, time.Duration, bool)
	}
	lags []int64
}

func (p *lagProbe) Record(string, source.Op, int64, []byte, []byte) error {
	if behind, unit, _, ok := p.sp.Lag(); ok && unit == "message" {
		p.lags = append(p.lags, behind)
	}
	return nil
}

func (p *lagProbe) ResumePoint([]byte) error { return nil }

// TestLag: a split reports how many messages its partition holds past
// it, as of the last fetch; none once it has read them all.
func TestLag(t *testing.T) {
	brokers := newCluster(t, 1, "lag")
	cl := newClient(t, brokers)
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, rec("lag", 0, "", fmt.Sprintf(`{"i":%d}`, i)))
	}
	produce(t, cl, recs...)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"lag"}})
	splits, err := src.Open(t.Context(), []string{"lag"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lr, ok := splits[0].(interface {
		Lag() (int64, string, time.Duration, bool)
	})
	if !ok {
		t.Fatal("the split does not report its lag")
	}
	p := &lagProbe{sp: lr}
	if err := splits[0].Read(t.Context(), p, true); err != nil {
		t.Fatal(err)
	}
	if len(p.lags) != 100 || p.lags[0] != 99 || p.lags[99] != 0 {
		t.Fatalf("lags %d reports, first %v", len(p.lags), p.lags[:min(3, len(p.lags))])
	}
	if behind, _, _, ok := lr.Lag(); !ok || behind != 0 {
		t.Errorf("lag after reading everything: %d ok=%v", behind, ok)
	}
}

// TestTooManyPartitions: Open refuses a topic of more partitions than
// seqs can tell apart (MaxPartitions), naming it.
func TestTooManyPartitions(t *testing.T) {
	brokers := newCluster(t, kafka.MaxPartitions+1, "wide")
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"wide"}})
	_, err := src.Open(t.Context(), []string{"wide"}, nil)
	if err == nil || !strings.Contains(err.Error(), `"wide" has 32769 partitions`) {
		t.Fatalf("Open: %v, want an error naming the topic and its partitions", err)
	}
}

// TestSplitsImplementReporters: the runner finds a split's lag and pauses
// through its optional interfaces, so a change of their signatures must
// break this test rather than silently drop the reports.
func TestSplitsImplementReporters(t *testing.T) {
	brokers := newCluster(t, 2, "rep")
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"rep"}})
	splits, err := src.Open(t.Context(), []string{"rep"}, nil)
	if err != nil || len(splits) != 2 {
		t.Fatalf("Open: %d splits, %v", len(splits), err)
	}
	for _, sp := range splits {
		if _, ok := sp.(source.LagReporter); !ok {
			t.Errorf("split %s is not a source.LagReporter", sp.ID())
		}
		pr, ok := sp.(source.PauseReporter)
		if !ok {
			t.Fatalf("split %s is not a source.PauseReporter", sp.ID())
		}
		if p, since, ok := pr.Paused(); p || !since.IsZero() || !ok {
			t.Errorf("split %s, not read yet: Paused() = %v, %v, %v", sp.ID(), p, since, ok)
		}
	}
}
