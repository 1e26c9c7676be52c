package iceberg_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// The REST catalog path, against Apache Iceberg's REST catalog test server
// (scripts/servers.sh start iceberg_rest: RESTCatalogServer's catalog,
// adapter and servlet from Maven Central, a JdbcCatalog behind them, a
// file warehouse). The server outlives a test run, so every test writes
// into a namespace of its own.

// restURI returns $OPENETL_TEST_ICEBERG_REST. Without it the test fails,
// unless OPENETL_SKIP_SERVERS=1.
func restURI(t testing.TB) string {
	t.Helper()
	u := os.Getenv("OPENETL_TEST_ICEBERG_REST")
	if u == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_ICEBERG_REST is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_ICEBERG_REST is not set: start the REST catalog with scripts/servers.sh start iceberg_rest, or set OPENETL_SKIP_SERVERS=1")
	}
	return u
}

// openREST opens a REST catalog client: each one stands for another
// process's handle on the same catalog.
func openREST(t testing.TB, uri string) *rest.Catalog {
	t.Helper()
	cat, err := rest.NewCatalog(context.Background(), "openetl", uri)
	if err != nil {
		t.Fatalf("REST catalog at %s: %v", uri, err)
	}
	t.Cleanup(func() { _ = cat.Close() })
	return cat
}

// restNamespace is a namespace no earlier run against the same server
// used.
func restNamespace(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// TestRestConformance runs the sinktest suite through the REST catalog:
// every Destination the suite asks for opens its own client on the same
// server; Visible scans with iceberg-go through another client.
func TestRestConformance(t *testing.T) {
	uri := restURI(t)
	ns := restNamespace("conformance")
	reader := openREST(t, uri)
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, openREST(t, uri), iceberg.Config{Namespace: []string{ns}})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return scan(ctx, reader, ns, stream)
		},
		Skip: knownLimits,
	})
}

// TestRestZombieFenced: attempt 1 commits epoch 1 and pre-commits epoch 2;
// attempt 2 recovers (generation 2, from epoch 1's record) through another
// client and commits its own epoch 2. Attempt 1's commit of epoch 2, its
// later Recover and a replay of attempt 2's commit must change nothing:
// pyiceberg, through the REST catalog, reads epoch 1's rows and attempt 2's
// epoch 2 exactly once, and the markers of generation 2 (table properties
// by default; TestRestZombieFencedSnapshots runs it with the markers in
// snapshot summaries).
func TestRestZombieFenced(t *testing.T) {
	uri := restURI(t)
	restZombieFenced(t, uri, uri, iceberg.Config{}, false)
}

// restZombieFenced runs TestRestZombieFenced's steps with cfg through the
// REST catalog at uri, reading back through readURI (the catalog itself,
// when uri is a proxy). summaries says where the markers must be: in the
// summary of each table's current snapshot, and none in its properties,
// or in its properties.
func restZombieFenced(t *testing.T, uri, readURI string, cfg iceberg.Config, summaries bool) {
	ctx := context.Background()
	ns := restNamespace("fence")
	cfg.Namespace = []string{ns}
	specs := []sink.StreamSpec{appended("a"), merged("m", "id")}
	const pipeline = "fence"
	write := func(w sink.Writer, epoch uint64, ops []op) sink.Committable {
		t.Helper()
		for _, name := range []string{"a", "m"} {
			rec := batch(ops, false)
			if err := w.Write(ctx, name, rec); err != nil {
				t.Fatalf("Write %s epoch %d: %v", name, epoch, err)
			}
			rec.Release()
		}
		c, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatalf("PreCommit(%d): %v", epoch, err)
		}
		return c
	}

	old, err := newDest(t, openREST(t, uri), cfg).Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	epoch1 := []op{{key: 1, kind: "insert", seq: 1, name: "a1"}, {key: 2, kind: "insert", seq: 2, name: "b1"}}
	c1 := write(old, 1, epoch1)
	if err := old.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatalf("Commit(1): %v", err)
	}
	zombie2 := write(old, 2, []op{{key: 1, kind: "update", seq: 30, name: "zombie"}, {key: 9, kind: "insert", seq: 31, name: "zombie"}})

	young, err := newDest(t, openREST(t, uri), cfg).Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer young.Close(ctx)
	head := &checkpoint.Record{Pipeline: pipeline, Epoch: 1, Generation: 1, Committables: [][]byte{c1}}
	out, err := young.Recover(ctx, 2, head)
	if err != nil {
		t.Fatalf("Recover(2): %v", err)
	}
	if out != sink.Applied {
		t.Errorf("Recover(2) of an applied epoch: %v, want Applied", out)
	}
	epoch2 := []op{{key: 2, kind: "update", seq: 20, name: "b2"}, {key: 3, kind: "insert", seq: 21, name: "c2"}}
	c2 := write(young, 2, epoch2)

	if err := old.Commit(ctx, 2, []sink.Committable{zombie2}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("zombie Commit(2): %v, want an error wrapping sink.ErrFenced", err)
	}
	if err := young.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
		t.Fatalf("Commit(2) of generation 2: %v", err)
	}
	if err := young.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
		t.Fatalf("repeated Commit(2): %v, want a no-op", err)
	}
	if err := old.Commit(ctx, 2, []sink.Committable{zombie2}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("zombie Commit(2) after generation 2 committed: %v, want sink.ErrFenced", err)
	}
	if _, err := old.Recover(ctx, 1, head); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("stale Recover(1): %v, want sink.ErrFenced", err)
	}

	got := readREST(t, readURI, ns)
	all := append(append([]op{}, epoch1...), epoch2...)
	checkAppend(t, got["a"], all)
	checkMerge(t, "m", got["m"], all, false)
	want := map[string]string{"openetl.fence.epoch": "2", "openetl.fence.generation": "2", "openetl.fence.fence": "2"}
	for name, tb := range got {
		if tb.FormatVersion != 2 {
			t.Errorf("%s: format version %d, want 2", name, tb.FormatVersion)
		}
		marks := tb.Properties
		if summaries {
			checkNoMarkers(t, name, tb.Properties)
			marks = currentSummary(t, readURI, ns, name)
		}
		for k, v := range want {
			if marks[k] != v {
				t.Errorf("%s: markers %v, want epoch 2, generation 2, fence 2", name, marks)
				break
			}
		}
	}
}

// restChildEnv carries "URI namespace dir" to TestRestKillChild.
const restChildEnv = "OPENETL_ICEBERG_REST_CHILD"

// restKillRows is smaller than killRows: every commit is three HTTP
// requests to a JVM, and the test must stay within minutes on 2 cores.
// restInProcessRows is smaller still: that test also runs under -race.
const (
	restKillRows      = 30_000
	restInProcessRows = 8_000
)

// TestRestKillChild is the child process of TestRestSurvivesSIGKILL and
// the body of TestRestPipelineExactlyOnce: it syncs the fake customers
// (merge, soft deletes) and orders (append) through the REST catalog named
// by $OPENETL_ICEBERG_REST_CHILD, with its checkpoints in a local
// directory, exactly once. It does nothing when run as an ordinary test.
func TestRestKillChild(t *testing.T) {
	spec := os.Getenv(restChildEnv)
	if spec == "" {
		t.Skip("child process of TestRestSurvivesSIGKILL")
	}
	f := strings.Fields(spec)
	if len(f) != 3 {
		t.Fatalf("%s=%q: want URI, namespace and directory", restChildEnv, spec)
	}
	res, err := restSync(context.Background(), t, f[0], f[1], f[2], restKillRows, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SYNC-OK epochs=%d generation=%d\n", res.Epochs, res.Generation)
}

// restSync runs the faker pipeline (rows records per stream) into
// namespace ns of the REST catalog at uri once, exactly once, with its
// checkpoint log under dir.
func restSync(ctx context.Context, t testing.TB, uri, ns, dir string, rows int64, every time.Duration) (etl.Result, error) {
	dst := newDest(t, openREST(t, uri), iceberg.Config{Namespace: []string{ns}})
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		return etl.Result{}, err
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		return etl.Result{}, err
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("kill").From(testutil.HoldSource(src)).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(every, 0).
		Require(delivery.ExactlyOnce).Build()
	if err != nil {
		return etl.Result{}, err
	}
	return p.Sync(ctx)
}

// TestRestPipelineExactlyOnce runs the pipeline in process through the
// REST catalog, cancels it twice part-way (a stop between any two steps of
// the protocol), then lets a third attempt finish; pyiceberg, through the
// REST catalog, must read every order version once and each customer's
// latest version. It runs under -race too (no child processes).
func TestRestPipelineExactlyOnce(t *testing.T) {
	uri := restURI(t)
	ns := restNamespace("pipeline")
	dir := t.TempDir()
	rng := seededRNG(t)
	interrupted := 0
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(300+rng.IntN(900))*time.Millisecond)
		_, err := restSync(ctx, t, uri, ns, dir, restInProcessRows, 50*time.Millisecond)
		cancel()
		if err != nil {
			interrupted++
		}
	}
	res, err := restSync(context.Background(), t, uri, ns, dir, restInProcessRows, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("final attempt: %v", err)
	}
	t.Logf("%d of 2 attempts interrupted; final attempt: %d epochs, generation %d", interrupted, res.Epochs, res.Generation)
	verifyFakerTables(t, readREST(t, uri, ns), restInProcessRows)
}

// TestRestSurvivesSIGKILL is TestSurvivesSIGKILL through the REST
// catalog: child processes SIGKILLed at random moments, some rounds two
// copies at once (the younger fences the older), then one run to
// completion, checked with pyiceberg through the REST catalog, and read
// with Spark (Iceberg's Spark runtime) too: the same rows.
// OPENETL_SEED replays a failing seed.
func TestRestSurvivesSIGKILL(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: the kill test runs child processes for minutes (the plain run covers it)")
	}
	uri := restURI(t)
	ns := restNamespace("kill")
	dir := t.TempDir()
	rng := seededRNG(t)
	child := func(dir string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRestKillChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), restChildEnv+"="+uri+" "+ns+" "+dir)
		return cmd
	}
	// As TestSurvivesSIGKILL, with a longer random moment.
	killed, fenced := killRounds(t, rng, dir, restKillRows, 600, child)
	t.Logf("%d children killed, %d stopped fenced", killed, fenced)
	if killed == 0 {
		t.Fatal("no child was killed before it finished")
	}
	if c := testutil.StartChild(t, child(dir), testutil.Hold{}); c.Wait() != nil || !strings.Contains(c.Output(), "SYNC-OK") {
		t.Fatalf("final run: %v\n%s", c.Err(), c.Output())
	}
	got := readREST(t, uri, ns)
	verifyFakerTables(t, got, restKillRows)
	// Spark, through the same catalog, reads what pyiceberg read: the
	// merge table's position deletes applied by Spark's Iceberg runtime.
	spark := testutil.ReadIcebergWithSpark(t, uri, ns, slices.Sorted(maps.Keys(got))...)
	for name, tb := range got {
		sameRows(t, name+" (Spark)", spark[name], tb.Data)
	}
}

// restReader runs internal/testutil/py/iceberg_read.py with pyiceberg's
// RestCatalog in place of its SqlCatalog: the same independent reader
// (pyiceberg's metadata and scans, pyarrow, the spec's equality-delete
// rule), through the REST catalog.
const restReader = `import sys
sys.path.insert(0, sys.argv[1])
import iceberg_read
from pyiceberg.catalog.rest import RestCatalog
uri = sys.argv[2]
iceberg_read.SqlCatalog = lambda name, uri_=None, warehouse=None, **kw: RestCatalog(name, uri=uri)
sys.argv = ["iceberg_read.py", "openetl", "", "", sys.argv[3], sys.argv[4]]
iceberg_read.main()
`

// readREST reads every table of namespace ns through the REST catalog at
// uri with pyiceberg, like testutil.ReadIcebergTables does over SQLite.
func readREST(t *testing.T, uri, ns string) map[string]*testutil.IcebergTable {
	t.Helper()
	py := testutil.Python(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "rest_read.py")
	if err := os.WriteFile(script, []byte(restReader), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, filepath.Join(testutil.Root(t), "internal", "testutil", "py"), uri, ns, out)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg reader (REST): %v", err)
	}
	var res map[string]*testutil.IcebergTable
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatalf("pyiceberg reader output %q: %v", stdout, err)
	}
	for name, tbl := range res {
		b, err := os.ReadFile(filepath.Join(out, name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var row map[string]any
			d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			d.UseNumber()
			if err := d.Decode(&row); err != nil {
				t.Fatalf("pyiceberg row of %s: %v", name, err)
			}
			tbl.Data = append(tbl.Data, row)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(res) == 0 {
		t.Fatalf("pyiceberg found no tables in namespace %s", ns)
	}
	return res
}
