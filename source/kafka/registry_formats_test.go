package kafka_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

func registerTyped(t testing.TB, reg *srfake.Registry, subject, schema string, typ sr.SchemaType) int {
	t.Helper()
	id, _, err := reg.RegisterSchema(subject, sr.Schema{Schema: schema, Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// wireFramed frames body under schema id, after the message index
// bytes idx (Protobuf's; nil for JSON Schema).
func wireFramed(id int, idx []byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
	return append(append(b, idx...), body...)
}

const pbV1 = `syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Person { int64 id = 1; string name = 2; google.protobuf.Timestamp born = 3; }
message Pet { int64 id = 1; string species = 2; }`

// pbV2 adds a field to Person.
const pbV2 = `syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Person { int64 id = 1; string name = 2; google.protobuf.Timestamp born = 3; optional string city = 4; }
message Pet { int64 id = 1; string species = 2; }`

// person encodes a Person with protowire (not the decoder's code).
func pbPerson(id int64, name string, bornSecs int64, city string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(id))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, name)
	var ts []byte
	ts = protowire.AppendTag(ts, 1, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(bornSecs))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, ts)
	if city != "" {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, city)
	}
	return b
}

// TestRegistryProtobuf: registry-framed Protobuf values (message index
// [0] as its short form, and [1]) become rows of the message type's
// fields; a framed key is its JSON; a message type or version with new
// fields reopens; bad messages (unknown schema, a message index the
// file lacks, bytes that don't parse) are quarantined saying why.
func TestRegistryProtobuf(t *testing.T) {
	ctx := context.Background()
	brokers := newCluster(t, 1, "pb")
	reg, rcl := newRegistry(t)
	id1 := registerTyped(t, reg, "pb-value", pbV1, sr.TypeProtobuf)
	kid := registerTyped(t, reg, "pb-key", `syntax = "proto3"; message K { int64 id = 1; }`, sr.TypeProtobuf)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"pb"},
		Decoder: kafka.DecodeRegistry, Registry: rcl})
	// The file has two message types, and no value says yet which one
	// the topic's are: no columns; the first value reopens the read,
	// and a Discover then declares its type's.
	cat, err := src.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := cat.Streams[0]; st.Format != source.FormatJSON || len(st.Columns) != 0 {
		t.Fatalf("stream before any value %+v", st)
	}
	key := wireFramed(kid, []byte{0}, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 42))
	cl := newClient(t, brokers)
	produce(t, cl,
		&kgo.Record{Topic: "pb", Key: key, Value: wireFramed(id1, []byte{0}, pbPerson(1, "ann", 86400, ""))},
		&kgo.Record{Topic: "pb", Value: wireFramed(id1, []byte{2, 0}, pbPerson(2, "", -1, ""))},  // [0], long form
		&kgo.Record{Topic: "pb", Value: wireFramed(id1, []byte{2, 18}, pbPerson(3, "x", 0, ""))}, // [9]: no such message
		&kgo.Record{Topic: "pb", Value: wireFramed(id1, []byte{0}, []byte{0x0a, 0x09, 'x'})},
		&kgo.Record{Topic: "pb", Value: wireFramed(4242, []byte{0}, pbPerson(5, "x", 0, ""))},
		&kgo.Record{Topic: "pb", Value: append([]byte{1}, wireFramed(id1, []byte{0}, pbPerson(6, "x", 0, ""))[1:]...)},
	)
	var sce *kafka.SchemaChangeError
	if err := readErr(t, src, "pb", nil); !errors.As(err, &sce) || sce.ID != id1 {
		t.Fatalf("the first Person: %v", err)
	}
	if cat, err = src.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if st := cat.Streams[0]; st.Format != source.FormatRow || columns(st) != "id int8, name text, born timestamptz" {
		t.Fatalf("stream %+v", st)
	}
	recs, states := readAll(t, src, []string{"pb"}, nil)
	if len(recs) != 6 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	if got := strings.Join(rowText(t, recs[0].Payload), "|"); got != "1|ann|1970-01-02 00:00:00.000000" || recs[0].Key != `{"id":42}` {
		t.Errorf("record 0: %s key %s", got, recs[0].Key)
	}
	if got := strings.Join(rowText(t, recs[1].Payload), "|"); got != "2||1969-12-31 23:59:59.000000" {
		t.Errorf("record 1: %s", got)
	}
	for i, want := range map[int]string{2: "message index [9]", 3: "length past the end", 4: "schema id 4242 is not in the registry",
		5: "not in the registry wire format"} {
		if p := recs[i].Payload; len(p) == 0 || p[0] != 0x7f || !strings.Contains(p, want) {
			t.Errorf("bad record %d: payload %q, want %q", i, p, want)
		}
	}
	// Message [1] (Pet) has columns Person's lack: the read reopens, and
	// a Discover joins them in.
	produce(t, cl, &kgo.Record{Topic: "pb", Value: wireFramed(id1, []byte{2, 2}, pbPerson(7, "cat", 0, ""))})
	if err := readErr(t, src, "pb", states); !errors.As(err, &sce) || sce.ID != id1 {
		t.Fatalf("a Pet: %v", err)
	}
	// And so does version 2 of the subject (its Person and Pet: the
	// types the values were seen with), before a value of it is read.
	id2 := registerTyped(t, reg, "pb-value", pbV2, sr.TypeProtobuf)
	produce(t, cl, &kgo.Record{Topic: "pb", Value: wireFramed(id2, []byte{0}, pbPerson(8, "bo", 0, "Oslo"))})
	if cat, err = src.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := columns(cat.Streams[0]); got != "id int8, name text, born timestamptz, city text, species text" {
		t.Fatalf("joined columns %s", got)
	}
	recs, _ = readAll(t, src, []string{"pb"}, states)
	if len(recs) != 2 || strings.Join(rowText(t, recs[0].Payload), "|") != "7|<null>|<null>|<null>|cat" ||
		strings.Join(rowText(t, recs[1].Payload), "|") != "8|bo|1970-01-01 00:00:00.000000|Oslo|<null>" {
		t.Fatalf("records after the join %+v", recs)
	}
}

// TestRegistryProtobufValueType: a file of a Key and a Value message
// type under "<topic>-value", whose values are all Value ([1]): Discover
// declares none of the types before a value is seen (not Key's id text),
// then Value's alone, with its types (id int8), and a later version's
// Value before a value of it is read.
func TestRegistryProtobufValueType(t *testing.T) {
	ctx := context.Background()
	brokers := newCluster(t, 1, "kv")
	reg, rcl := newRegistry(t)
	const kvV1 = `syntax = "proto3"; package kv;
message Key { string id = 1; }
message Value { int64 id = 1; string name = 2; }`
	id1 := registerTyped(t, reg, "kv-value", kvV1, sr.TypeProtobuf)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"kv"},
		Decoder: kafka.DecodeRegistry, Registry: rcl})
	cat, err := src.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := cat.Streams[0]; st.Format != source.FormatJSON || len(st.Columns) != 0 {
		t.Fatalf("before any value: %+v", st)
	}
	value := func(id int64, name string) []byte {
		v := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(id))
		return protowire.AppendString(protowire.AppendTag(v, 2, protowire.BytesType), name)
	}
	cl := newClient(t, brokers)
	produce(t, cl, &kgo.Record{Topic: "kv", Value: wireFramed(id1, []byte{2, 2}, value(42, "ann"))},
		&kgo.Record{Topic: "kv", Value: wireFramed(id1, []byte{0x82, 0, 0x82, 0}, value(43, "bo"))}) // [1], long form
	var sce *kafka.SchemaChangeError
	if err := readErr(t, src, "kv", nil); !errors.As(err, &sce) || sce.ID != id1 {
		t.Fatalf("the first value: %v", err)
	}
	if cat, err = src.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := columns(cat.Streams[0]); got != "id int8, name text" {
		t.Fatalf("columns %s, want Value's: id int8, name text", got)
	}
	recs, states := readAll(t, src, []string{"kv"}, nil)
	if len(recs) != 2 || strings.Join(rowText(t, recs[0].Payload), "|") != "42|ann" ||
		strings.Join(rowText(t, recs[1].Payload), "|") != "43|bo" {
		t.Fatalf("records %+v", recs)
	}
	// Version 2 moves Value first and adds a field: its Value joins in,
	// by name, before any value of it is read; Key stays out.
	id2 := registerTyped(t, reg, "kv-value", `syntax = "proto3"; package kv;
message Value { int64 id = 1; string name = 2; optional string city = 3; }
message Key { string id = 1; int32 shard = 2; }`, sr.TypeProtobuf)
	if cat, err = src.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := columns(cat.Streams[0]); got != "id int8, name text, city text" {
		t.Fatalf("columns with version 2: %s", got)
	}
	v := append(value(44, "cy"), protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), "Oslo")...)
	produce(t, cl, &kgo.Record{Topic: "kv", Value: wireFramed(id2, []byte{0}, v)})
	if recs, _ = readAll(t, src, []string{"kv"}, states); len(recs) != 1 || strings.Join(rowText(t, recs[0].Payload), "|") != "44|cy|Oslo" {
		t.Fatalf("version 2 records %+v", recs)
	}
}

// TestRegistryJSONSchemaIntegers: through the engine, an "integer"
// written as 1e3 or -2.0 lands (as its digits: the engine's int8 takes no
// other form); one beyond int64 in plain digits costs only its cell
// (held, out_of_range); one beyond int64 in float notation and a
// fraction are quarantined.
func TestRegistryJSONSchemaIntegers(t *testing.T) {
	brokers := newCluster(t, 1, "ints")
	reg, rcl := newRegistry(t)
	id := registerTyped(t, reg, "ints-value", `{"type":"object","properties":{"k":{"type":"integer"},"n":{"type":"integer"}}}`, sr.TypeJSON)
	var recs []*kgo.Record
	for _, v := range []string{`{"k":1,"n":1e3}`, `{"k":2,"n":-2.0}`, `{"k":3,"n":100000000000000000000}`, `{"k":4,"n":1e20}`, `{"k":5,"n":1.5}`} {
		recs = append(recs, &kgo.Record{Topic: "ints", Value: wireFramed(id, nil, []byte(v))})
	}
	produce(t, newClient(t, brokers), recs...)
	dir := t.TempDir()
	res, err := syncOnce(context.Background(), brokers, "ints", dir, kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams["ints"]; c.Written != 3 || c.Held != 1 || c.Quarantined != 2 {
		t.Fatalf("counts %+v, want 3 written (1 cell held), 2 quarantined", c) // 1e3 as it is: a type_conflict
	}
}

const jsV1 = `{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":["string","null"]},
 "at":{"type":"string","format":"date-time"}}}`

// jsV2 adds a property.
const jsV2 = `{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":["string","null"]},
 "at":{"type":"string","format":"date-time"},"tags":{"type":"array","items":{"type":"string"}}}}`

// TestRegistryJSONSchema: registry-framed JSON values become rows of the
// schema's properties; a framed JSON key is its compact JSON; a version
// with a new property reopens; values that don't match are quarantined.
func TestRegistryJSONSchema(t *testing.T) {
	ctx := context.Background()
	brokers := newCluster(t, 1, "js")
	reg, rcl := newRegistry(t)
	id1 := registerTyped(t, reg, "js-value", jsV1, sr.TypeJSON)
	kid := registerTyped(t, reg, "js-key", `{"type":"object","properties":{"id":{"type":"integer"}}}`, sr.TypeJSON)
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"js"},
		Decoder: kafka.DecodeRegistry, Registry: rcl})
	cat, err := src.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := columns(cat.Streams[0]); got != "id int8, name text, at timestamptz" {
		t.Fatalf("columns %s", got)
	}
	cl := newClient(t, brokers)
	produce(t, cl,
		&kgo.Record{Topic: "js", Key: wireFramed(kid, nil, []byte(`{ "id": 1 }`)),
			Value: wireFramed(id1, nil, []byte(`{"id": 1, "name": "a\tb", "at": "2024-01-01T00:00:00Z", "x": 1}`))},
		&kgo.Record{Topic: "js", Value: wireFramed(id1, nil, []byte(`{"id": "2"}`))},
		&kgo.Record{Topic: "js", Value: wireFramed(id1, nil, []byte(`{"id": 3`))},
	)
	recs, states := readAll(t, src, []string{"js"}, nil)
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	if got := strings.Join(rowText(t, recs[0].Payload), "|"); got != "1|a\tb|2024-01-01T00:00:00Z" || recs[0].Key != `{"id":1}` {
		t.Errorf("record 0: %q key %s", got, recs[0].Key)
	}
	for i, want := range map[int]string{1: `property "id" is a JSON string`, 2: "',' or '}' expected"} {
		if p := recs[i].Payload; len(p) == 0 || p[0] != 0x7f || !strings.Contains(p, want) {
			t.Errorf("bad record %d: payload %q, want %q", i, p, want)
		}
	}
	id2 := registerTyped(t, reg, "js-value", jsV2, sr.TypeJSON)
	produce(t, cl, &kgo.Record{Topic: "js", Value: wireFramed(id2, nil, []byte(`{"id": 4, "tags": ["a", "b c"]}`))})
	var sce *kafka.SchemaChangeError
	if err := readErr(t, src, "js", states); !errors.As(err, &sce) || sce.ID != id2 {
		t.Fatalf("version 2: %v", err)
	}
	if cat, err = src.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := columns(cat.Streams[0]); got != "id int8, name text, at timestamptz, tags _text" {
		t.Fatalf("joined columns %s", got)
	}
	recs, _ = readAll(t, src, []string{"js"}, states)
	if len(recs) != 1 || strings.Join(rowText(t, recs[0].Payload), "|") != "4|<null>|<null>|{a,b c}" {
		t.Fatalf("records after the join %+v", recs)
	}
}

// pyServer is one registry_formats_e2e.py process serving commands, for
// a test's produce and check steps (its imports cost seconds).
type pyServer struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

func startPy(t *testing.T, script string) *pyServer {
	t.Helper()
	cmd := exec.Command(testutil.Python(t), script)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	return &pyServer{in: in, out: sc}
}

// do sends one command and returns its answer; ok is false for an
// "error" answer.
func (p *pyServer) do(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, strings.Join(args, " ")); err != nil {
		t.Fatal(err)
	}
	if !p.out.Scan() {
		t.Fatalf("registry_formats_e2e.py %s: no answer: %v", args[0], p.out.Err())
	}
	line := p.out.Text()
	return line, strings.HasPrefix(line, "ok")
}

func (p *pyServer) must(t *testing.T, args ...string) {
	t.Helper()
	line, ok := p.do(t, args...)
	if !ok {
		t.Fatalf("registry_formats_e2e.py %s: %s", strings.Join(args[:2], " "), line)
	}
	t.Logf("%s %s: %s", args[0], args[1], line)
}

// TestRegistryFormatsRealServers: Protobuf and JSON Schema messages
// written by an independent producer (confluent-kafka's
// ProtobufSerializer and JSONSerializer, registering their schemas in
// Apicurio Registry's Confluent-compatible API) to the Apache Kafka
// broker, read by pipelines into Parquet and compared value by value by
// pyarrow against the producer's data: every type the source maps, and
// a schema evolved between syncs (a field added), which lands as a
// widened table. Needs scripts/servers.sh's kafka and registry and
// scripts/test-tools.sh's python; fails without them unless
// OPENETL_SKIP_SERVERS=1.
func TestRegistryFormatsRealServers(t *testing.T) {
	brokers := realBrokers(t)
	url := realRegistry(t)
	script, err := filepath.Abs("testdata/registry_formats_e2e.py")
	if err != nil {
		t.Fatal(err)
	}
	py := startPy(t, script)
	rcl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, brokers)
	ctx := context.Background()
	stamp := time.Now().UnixNano()
	bs := strings.Join(brokers, ",")
	for _, format := range []string{"pb", "js"} {
		topic := fmt.Sprintf("%s-%d", format, stamp)
		createTopic(t, cl, topic, 2)
		dir := t.TempDir()
		tables := filepath.Join(dir, "tables")
		cfg := kafka.Config{Decoder: kafka.DecodeRegistry, Registry: rcl}
		py.must(t, "produce", format, bs, url, topic, "v1")
		res, err := syncOnce(ctx, brokers, topic, dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c := res.Streams[topic]; c.Quarantined != 0 {
			q := quarantineLines(t, filepath.Join(dir, "checkpoints"), pipelineName, topic)
			t.Fatalf("%s: counts %+v; first quarantined: %v", format, c, q[0])
		}
		py.must(t, "check", format, tables, topic, "v1")
		if line, ok := py.do(t, "check", format, tables, topic, "v1", "perturb"); ok || !strings.Contains(line, "perturbed") {
			t.Fatalf("%s: the checker passes a wrong expectation: %s", format, line)
		}
		py.must(t, "produce", format, bs, url, topic, "v2")
		if _, err := syncOnce(ctx, brokers, topic, dir, cfg); err != nil {
			t.Fatal(err)
		}
		py.must(t, "check", format, tables, topic, "v1,v2")
	}
}
