package kafka_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

// newRegistry starts an in-process fake registry (srfake) and returns it
// with a client of it.
func newRegistry(t testing.TB) (*srfake.Registry, *sr.Client) {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return reg, cl
}

func register(t testing.TB, reg *srfake.Registry, subject, schema string) int {
	t.Helper()
	id, _, err := reg.RegisterSchema(subject, sr.Schema{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// framed encodes v with schema (twmb/avro, an encoder independent of the
// source's decoder) in the registry wire format under id.
func framed(t testing.TB, id int, schema string, v any) []byte {
	t.Helper()
	s, err := avro.Parse(schema)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), b...)
}

const peopleV1 = `{"type":"record","name":"Person","fields":[
 {"name":"id","type":"long"},
 {"name":"name","type":"string"},
 {"name":"n","type":"int"},
 {"name":"born","type":["null",{"type":"int","logicalType":"date"}]},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}`

// peopleV2 adds a field and promotes n from int to long.
const peopleV2 = `{"type":"record","name":"Person","fields":[
 {"name":"id","type":"long"},
 {"name":"name","type":"string"},
 {"name":"n","type":"long"},
 {"name":"born","type":["null",{"type":"int","logicalType":"date"}]},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
 {"name":"city","type":["null","string"],"default":null}]}`

func person(id int64, n int32) map[string]any {
	return map[string]any{"id": id, "name": fmt.Sprintf("p%d", id), "n": n, "born": int32(id), "price": fmt.Sprintf("%d.25", id)}
}

func columns(st source.Stream) string {
	var out []string
	for _, c := range st.Columns {
		out = append(out, c.Name+" "+c.Type)
	}
	return strings.Join(out, ", ")
}

func rowText(t testing.TB, payload string) []string {
	t.Helper()
	vals, err := source.DecodeRow(nil, []byte(payload))
	if err != nil {
		t.Fatalf("payload %q: %v", payload, err)
	}
	var out []string
	for _, v := range vals {
		if v.Null {
			out = append(out, "<null>")
		} else {
			out = append(out, string(v.Text))
		}
	}
	return out
}

// readErr opens stream and reads its splits bounded one after another,
// returning the first error.
func readErr(t testing.TB, src *kafka.Source, stream string, resume map[source.SplitID][]byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	splits, err := src.Open(ctx, []string{stream}, resume)
	if err != nil {
		return err
	}
	for _, sp := range splits {
		var recs []emitted
		if err := sp.Read(ctx, &collector{split: sp.ID(), recs: &recs}, true); err != nil {
			return err
		}
	}
	return nil
}

// TestRegistryRead: registry-framed Avro values become declared rows of
// the writer schema's columns; bad messages are records the engine
// quarantines, saying why; a schema with new columns fails the read with
// a *SchemaChangeError (source.ErrReopen) until a Discover joins it in;
// each schema ID is asked for once.
func TestRegistryRead(t *testing.T) {
	ctx := context.Background()
	brokers := newCluster(t, 1, "people")
	reg, rcl := newRegistry(t)
	id1 := register(t, reg, "people-value", peopleV1)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"people"},
		Decoder: kafka.DecodeRegistry, Registry: rcl})
	cat, err := src.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := cat.Streams[0]
	if st.Format != source.FormatRow || st.Types != source.TypesPostgres || st.CDC ||
		columns(st) != "id int8, name text, n int4, born date, price numeric(9,2)" {
		t.Fatalf("stream %+v", st)
	}
	cl := newClient(t, brokers)
	good := framed(t, id1, peopleV1, person(1, 7))
	produce(t, cl,
		&kgo.Record{Topic: "people", Key: []byte("k1"), Value: good},
		&kgo.Record{Topic: "people", Key: []byte("k2"), Value: []byte(`{"id":2}`)},
		&kgo.Record{Topic: "people", Value: framed(t, 9999, peopleV1, person(3, 0))},
		&kgo.Record{Topic: "people", Value: good[:len(good)-2]},
		&kgo.Record{Topic: "people", Key: []byte("k1")}, // a tombstone
		&kgo.Record{Topic: "people", Value: framed(t, id1, peopleV1, map[string]any{"id": int64(-5), "name": "", "n": int32(-1), "born": nil, "price": "-0.05"})},
	)
	recs, states := readAll(t, src, []string{"people"}, nil)
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5 (the tombstone skipped): %+v", len(recs), recs)
	}
	if got := strings.Join(rowText(t, recs[0].Payload), "|"); got != "1|p1|7|1970-01-02|1.25" || recs[0].Key != "k1" || recs[0].Op != source.OpInsert {
		t.Errorf("record 0: %s %+v", got, recs[0])
	}
	if got := strings.Join(rowText(t, recs[4].Payload), "|"); got != "-5||-1|<null>|-0.05" {
		t.Errorf("record 5: %s", got)
	}
	for i, want := range map[int]string{1: "not in the registry wire format", 2: "schema id 9999 is not in the registry", 3: "truncated"} {
		p := recs[i].Payload
		if len(p) == 0 || p[0] != 0x7f || len(p) > 125 || !strings.Contains(p, want) {
			t.Errorf("bad record %d: payload %q, want 0x7f and %q", i, p, want)
		}
		if _, err := source.DecodeRow(nil, []byte(p)); err == nil {
			t.Errorf("bad record %d: its payload is a row", i)
		}
	}
	// Discover compiled schema 1 from the subject's versions: 9999 is
	// the one ID asked for, once.
	if n := kafka.RegistryFetches(src); n != 1 {
		t.Errorf("%d schema fetches, want 1", n)
	}

	// Version 2 adds a column and widens n: the stream's columns must grow.
	id2 := register(t, reg, "people-value", peopleV2)
	v2 := person(10, 0)
	v2["n"], v2["city"] = int64(1)<<40, "Oslo"
	produce(t, cl, &kgo.Record{Topic: "people", Value: framed(t, id2, peopleV2, v2)})
	err = readErr(t, src, "people", states)
	var sce *kafka.SchemaChangeError
	if !errors.Is(err, source.ErrReopen) || !errors.As(err, &sce) || sce.ID != id2 || sce.Topic != "people" {
		t.Fatalf("read with a new schema: %v", err)
	}
	cat, err = src.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := columns(cat.Streams[0]); got != "id int8, name text, n int8, born date, price numeric(9,2), city text" {
		t.Fatalf("joined columns: %s", got)
	}
	recs, _ = readAll(t, src, []string{"people"}, states)
	if len(recs) != 1 || strings.Join(rowText(t, recs[0].Payload), "|") != "10|p10|1099511627776|1970-01-11|10.25|Oslo" {
		t.Fatalf("v2 records %+v", recs)
	}
	// Old values read into the new columns too.
	recs, _ = readAll(t, src, []string{"people"}, nil)
	if got := strings.Join(rowText(t, recs[0].Payload), "|"); got != "1|p1|7|1970-01-02|1.25|<null>" {
		t.Fatalf("v1 record in v2 columns: %s", got)
	}
}

// TestRegistryKeys: a framed Avro key becomes its JSON text.
func TestRegistryKeys(t *testing.T) {
	brokers := newCluster(t, 1, "keyed")
	reg, rcl := newRegistry(t)
	vid := register(t, reg, "keyed-value", peopleV1)
	const keySchema = `{"type":"record","name":"Key","fields":[{"name":"id","type":"long"}]}`
	kid := register(t, reg, "keyed-key", keySchema)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"keyed"},
		Decoder: kafka.DecodeRegistry, Registry: rcl, PrimaryKey: map[string][]string{"keyed": {"id"}}})
	produce(t, newClient(t, brokers), &kgo.Record{Topic: "keyed", Key: framed(t, kid, keySchema, map[string]any{"id": int64(42)}),
		Value: framed(t, vid, peopleV1, person(42, 1))})
	recs, _ := readAll(t, src, []string{"keyed"}, nil)
	if len(recs) != 1 || recs[0].Key != `{"id":42}` {
		t.Fatalf("records %+v", recs)
	}
}

// flaky is a Registry that fails every call while down is set.
type flaky struct {
	kafka.Registry
	down  atomic.Bool
	calls atomic.Int64
}

func (f *flaky) SchemaByID(ctx context.Context, id int) (sr.Schema, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return sr.Schema{}, &sr.ResponseError{StatusCode: http.StatusServiceUnavailable, Message: "down"}
	}
	return f.Registry.SchemaByID(ctx, id)
}

func (f *flaky) Schemas(ctx context.Context, subject string) ([]sr.SubjectSchema, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return f.Registry.Schemas(ctx, subject)
}

// TestRegistryDown: a registry that doesn't answer fails Discover and
// Read, after the retries, with a *RegistryError naming the topic and
// the schema ID (or subject); nothing is quarantined.
func TestRegistryDown(t *testing.T) {
	defer kafka.SetRegistryRetries(3, time.Millisecond)()
	brokers := newCluster(t, 1, "down")
	reg, rcl := newRegistry(t)
	id := register(t, reg, "down-value", peopleV1)
	f := &flaky{Registry: rcl}
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"down"},
		Decoder: kafka.DecodeRegistry, Registry: f})
	f.down.Store(true)
	_, err := src.Discover(context.Background())
	var re *kafka.RegistryError
	if !errors.As(err, &re) || re.Topic != "down" || re.Subject != "down-value" || f.calls.Load() != 3 {
		t.Fatalf("Discover: %v after %d calls", err, f.calls.Load())
	}
	f.down.Store(false)
	if _, err := src.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	produce(t, newClient(t, brokers), &kgo.Record{Topic: "down", Value: framed(t, id, peopleV1, person(1, 1))})
	// A new source: its cache is empty, so Read must ask.
	src = newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"down"},
		Decoder: kafka.DecodeRegistry, Registry: f})
	if _, err := src.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.down.Store(true)
	// Discover compiled the subject's versions without asking by ID: a
	// schema only a message names is what Read must fetch.
	id9 := register(t, reg, "other-value", `{"type":"record","name":"O","fields":[{"name":"id","type":"long"}]}`)
	produce(t, newClient(t, brokers), &kgo.Record{Topic: "down", Value: framed(t, id9, `{"type":"record","name":"O","fields":[{"name":"id","type":"long"}]}`, map[string]any{"id": int64(1)})})
	err = readErr(t, src, "down", nil)
	if !errors.As(err, &re) || re.Topic != "down" || re.ID != id9 || !strings.Contains(err.Error(), fmt.Sprintf("schema id %d", id9)) {
		t.Fatalf("Read: %v", err)
	}
}

// TestRegistryConfig: the registry decoders need a registry.
func TestRegistryConfig(t *testing.T) {
	for _, cfg := range []kafka.Config{
		{Decoder: kafka.DecodeRegistry},
		{Decoder: kafka.DecodeDebeziumRegistry},
	} {
		cfg.Opts, cfg.Topics = []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, []string{"t"}
		if _, err := kafka.New(cfg); !errors.Is(err, kafka.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// TestRegistryPipeline: registry-framed Avro through the runner, the
// engine and sink/parquet, with a schema evolved in the middle of the
// topic (a field added, an int promoted to long): the sync reopens by
// itself and pyarrow reads every value, old rows in the widened table;
// bad messages are quarantined with their partition, offset and reason.
func TestRegistryPipeline(t *testing.T) {
	brokers := newCluster(t, 2, "evolve")
	reg, rcl := newRegistry(t)
	id1 := register(t, reg, "evolve-value", peopleV1)
	cl := newClient(t, brokers)
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: "evolve", Partition: int32(i % 2), Key: fmt.Appendf(nil, "%d", i),
			Value: framed(t, id1, peopleV1, person(int64(i), int32(i)))})
	}
	recs = append(recs, &kgo.Record{Topic: "evolve", Partition: 1, Value: framed(t, 777, peopleV1, person(99, 0))})
	produce(t, cl, recs...)
	dir := t.TempDir()
	cfg := kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl, Columns: kafka.ColumnPartition | kafka.ColumnKey}
	ctx := context.Background()
	if _, err := syncOnce(ctx, brokers, "evolve", dir, cfg); err != nil {
		t.Fatal(err)
	}
	// Version 2 registered and written after the first sync, then more
	// of version 1: the second sync's Discover sees the subject's new
	// version. A third schema only a message names (another subject's)
	// makes the sync reopen in the middle.
	id2 := register(t, reg, "evolve-value", peopleV2)
	recs = recs[:0]
	for i := 20; i < 30; i++ {
		v := person(int64(i), 0)
		v["n"], v["city"] = int64(1)<<33+int64(i), fmt.Sprintf("c%d", i)
		recs = append(recs, &kgo.Record{Topic: "evolve", Partition: int32(i % 2), Value: framed(t, id2, peopleV2, v)})
	}
	const v3 = `{"type":"record","name":"Person","fields":[{"name":"id","type":"long"},{"name":"extra","type":"double"}]}`
	id3 := register(t, reg, "elsewhere-value", v3)
	produce(t, cl, recs...)
	res, err := syncOnce(ctx, brokers, "evolve", dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams["evolve"]; c.Read != 10 || c.Written != 10 {
		t.Errorf("second sync %+v", c)
	}
	produce(t, cl, &kgo.Record{Topic: "evolve", Partition: 0, Value: framed(t, id3, v3, map[string]any{"id": int64(100), "extra": 0.5})},
		&kgo.Record{Topic: "evolve", Partition: 0, Value: framed(t, id1, peopleV1, person(101, 101))})
	if _, err := syncOnce(ctx, brokers, "evolve", dir, cfg); err != nil {
		t.Fatal(err)
	}
	rows := parquetRows(t, filepath.Join(dir, "tables"), "evolve", "id", "n", "city", "extra", "_kafka_partition", "_kafka_key")
	got := map[string]string{}
	for _, r := range rows {
		got[r[0]] = strings.Join(r[1:4], "/")
		if id, _ := strconv.Atoi(r[0]); id < 20 && (r[4] != strconv.Itoa(id%2) || r[5] != fmt.Sprintf("b'%d'", id)) {
			t.Errorf("id %d: partition %s, key %s", id, r[4], r[5])
		}
	}
	want := map[string]string{"100": "<nil>/<nil>/0.5", "101": "101/<nil>/<nil>"}
	for i := range 20 {
		want[fmt.Sprint(i)] = fmt.Sprintf("%d/<nil>/<nil>", i)
	}
	for i := 20; i < 30; i++ {
		want[fmt.Sprint(i)] = fmt.Sprintf("%d/c%d/<nil>", int64(1)<<33+int64(i), i)
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d", len(rows), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("id %s: got %s, want %s", id, got[id], w)
		}
	}
	q := quarantineLines(t, filepath.Join(dir, "checkpoints"), pipelineName, "evolve")
	if len(q) != 1 || q[0]["split"] != "evolve/1" || q[0]["reason"] != "parse_error" ||
		!strings.Contains(fmt.Sprint(q[0]["payload"]), "schema id 777 is not in the registry") {
		t.Fatalf("quarantine %v", q)
	}
}

// realRegistry returns the URL of scripts/servers.sh's registry; without
// one the test fails, or is skipped with OPENETL_SKIP_SERVERS=1.
func realRegistry(t testing.TB) string {
	t.Helper()
	url := os.Getenv("OPENETL_TEST_REGISTRY")
	if url == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_REGISTRY is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_REGISTRY is not set: start a registry with scripts/servers.sh start registry, or set OPENETL_SKIP_SERVERS=1")
	}
	return url
}

// parquetRows reads, with pyarrow, columns cols of every row of stream's
// sink/parquet table under dir (following its newest manifest) as
// strings ("<nil>" for a null, and for a column a file lacks).
func parquetRows(t testing.TB, dir, stream string, cols ...string) [][]string {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
tables, stream, cols = sys.argv[1], sys.argv[2], sys.argv[3:]
mdir = os.path.join(tables, stream, "_manifest")
versions = sorted(f for f in os.listdir(mdir) if f.endswith(".json"))
manifest = json.load(open(os.path.join(mdir, versions[-1])))
rows = []
for f in manifest["files"]:
    for r in pq.read_table(os.path.join(tables, f["key"])).to_pylist():
        rows.append(["<nil>" if r.get(c) is None else str(r[c]) for c in cols])
json.dump(rows, sys.stdout)
`
	cmd := exec.Command(testutil.Python(t), append([]string{"-c", script, dir, stream}, cols...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var rows [][]string
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("pyarrow output %q: %v", out, err)
	}
	return rows
}

// TestRegistryRealServers: Avro messages written by an independent
// producer (confluent-kafka's AvroSerializer, registering its schemas in
// Apicurio Registry's Confluent-compatible API) to the Apache Kafka
// broker, read by pipelines into Parquet and compared value by value by
// pyarrow against the producer's data: every Avro type and logical type
// the source maps, a schema evolved mid-topic (a field added, int
// promoted to long, an enum label added; then the old version again),
// landing as a widened table, and Debezium-shaped change
// events with Debezium's semantic types. Needs scripts/servers.sh's
// kafka and registry and scripts/test-tools.sh's python; fails without
// them unless OPENETL_SKIP_SERVERS=1.
func TestRegistryRealServers(t *testing.T) {
	brokers := realBrokers(t)
	url := realRegistry(t)
	py := testutil.Python(t)
	script, err := filepath.Abs("testdata/registry_e2e.py")
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(py, append([]string{script}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("registry_e2e.py %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("registry_e2e.py %s: %s", args[0], strings.TrimSpace(string(out)))
	}
	rcl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, brokers)
	ctx := context.Background()
	stamp := time.Now().UnixNano()

	topic := fmt.Sprintf("avro-%d", stamp)
	createTopic(t, cl, topic, 2)
	dir := t.TempDir()
	tables := filepath.Join(dir, "tables")
	cfg := kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl}
	run("produce", strings.Join(brokers, ","), url, topic, "v1")
	if _, err := syncOnce(ctx, brokers, topic, dir, cfg); err != nil {
		t.Fatal(err)
	}
	run("check", tables, topic, "v1")
	// The checker fails when one expected value is off.
	perturbed := exec.Command(py, script, "check", tables, topic, "v1")
	perturbed.Env = append(os.Environ(), "REGISTRY_E2E_PERTURB=1")
	if out, err := perturbed.CombinedOutput(); err == nil || !strings.Contains(string(out), "id 1 price") {
		t.Fatalf("the checker passes a wrong expectation: %v\n%s", err, out)
	}
	// Mid-topic evolution: version 2 (n promoted from int to long, a
	// field added), then version 1 again from a producer not yet
	// upgraded, read by one sync; the checker reads the files as one
	// widened table (n int64, exact) and wants the v1 rows after the
	// widening in int64 files.
	run("produce", strings.Join(brokers, ","), url, topic, "v2")
	run("produce", strings.Join(brokers, ","), url, topic, "v1b")
	if _, err := syncOnce(ctx, brokers, topic, dir, cfg); err != nil {
		t.Fatal(err)
	}
	run("check", tables, topic, "v1,v2,v1b")

	dbz := fmt.Sprintf("dbz-%d", stamp)
	createTopic(t, cl, dbz, 1)
	run("produce", strings.Join(brokers, ","), url, dbz, "debezium")
	ddir := t.TempDir()
	res, err := syncOnce(ctx, brokers, dbz, ddir, kafka.Config{Decoder: kafka.DecodeDebeziumRegistry, Registry: rcl,
		PrimaryKey: map[string][]string{dbz: {"id"}}})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams[dbz]; c.Quarantined != 0 {
		t.Errorf("debezium counts %+v", c)
	}
	run("check", filepath.Join(ddir, "tables"), dbz, "debezium")
}

// TestRegistryNoSubject: a topic whose schemas are under no subject of
// its name (a record-name strategy) starts with no declared columns; the
// first message reopens the sync, which then reads it all.
func TestRegistryNoSubject(t *testing.T) {
	brokers := newCluster(t, 1, "nosubject")
	reg, rcl := newRegistry(t)
	id := register(t, reg, "openetl.Person", peopleV1)
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, &kgo.Record{Topic: "nosubject", Value: framed(t, id, peopleV1, person(int64(i), int32(i)))})
	}
	produce(t, newClient(t, brokers), recs...)
	dir := t.TempDir()
	res, err := syncOnce(context.Background(), brokers, "nosubject", dir, kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams["nosubject"]; c.Written != 5 {
		t.Fatalf("counts %+v", c)
	}
	rows := parquetRows(t, filepath.Join(dir, "tables"), "nosubject", "id", "price")
	if len(rows) != 5 || rows[0][1] != "0.25" && rows[0][1] != "4.25" {
		t.Fatalf("rows %v", rows)
	}
}

// TestRegistryColumns: Config.Columns adds declared metadata columns
// after the schema's.
func TestRegistryColumns(t *testing.T) {
	brokers := newCluster(t, 2, "meta")
	reg, rcl := newRegistry(t)
	id := register(t, reg, "meta-value", peopleV1)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"meta"},
		Decoder: kafka.DecodeRegistry, Registry: rcl, Columns: kafka.AllColumns})
	cat, err := src.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "id int8, name text, n int4, born date, price numeric(9,2), _kafka_key bytea, _kafka_headers jsonb, " +
		"_kafka_partition int4, _kafka_offset int8, _kafka_timestamp int8, _kafka_topic text"
	if got := columns(cat.Streams[0]); got != want {
		t.Fatalf("columns %s\nwant %s", got, want)
	}
	ts := time.UnixMilli(1700000000123)
	produce(t, newClient(t, brokers), &kgo.Record{Topic: "meta", Partition: 1, Key: []byte{0xff, 'k'}, Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}, Value: framed(t, id, peopleV1, person(1, 1))},
		&kgo.Record{Topic: "meta", Partition: 1, Timestamp: ts, Value: framed(t, id, peopleV1, person(2, 2))})
	recs, _ := readAll(t, src, []string{"meta"}, nil)
	if len(recs) != 2 {
		t.Fatalf("records %+v", recs)
	}
	if got := strings.Join(rowText(t, recs[0].Payload), "|"); got != `1|p1|1|1970-01-02|1.25|\xff6b|{"h":"v"}|1|0|1700000000123|meta` {
		t.Errorf("row %s", got)
	}
	if got := strings.Join(rowText(t, recs[1].Payload), "|"); got != `2|p2|2|1970-01-03|2.25|<null>|{}|1|1|1700000000123|meta` {
		t.Errorf("row %s", got)
	}
}
