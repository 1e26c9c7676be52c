package clickhouse_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// The child mode of the test binary: TestPipelineSurvivesSIGKILL runs it
// in a process of its own and kills it.
func TestMain(m *testing.M) {
	if os.Getenv("OPENETL_CH_CHILD") == "1" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const fakerSeed = 11

// child syncs the faker's customers (merged by id) and orders (appended)
// into the database named by OPENETL_CH_DB, checkpointing under
// OPENETL_CH_DIR.
func child() error {
	rows, err := strconv.ParseInt(os.Getenv("OPENETL_CH_ROWS"), 10, 64)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cfg := clickhouse.Config{Database: os.Getenv("OPENETL_CH_DB"), BlockRows: 5000}
	if os.Getenv("OPENETL_CH_CLUSTER") == "1" {
		cfg.Cluster = clusterConfig()
	} else {
		conn, err := openConn(os.Getenv("OPENETL_TEST_CLICKHOUSE_ADDR"))
		if err != nil {
			return err
		}
		defer conn.Close()
		cfg.Conn = conn
	}
	dst, err := clickhouse.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer dst.Close()
	src, err := faker.New(faker.Config{Seed: fakerSeed, Rows: rows})
	if err != nil {
		return err
	}
	store, err := checkpoint.OpenDir(os.Getenv("OPENETL_CH_DIR"))
	if err != nil {
		return err
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("chkill").From(testutil.HoldSource(src)).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).
		EpochEvery(100*time.Millisecond, 0).Build()
	if err != nil {
		return err
	}
	res, err := p.Sync(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("synced: epoch %d\n", res.Epoch)
	return nil
}

// wantCustomers is the customers table as the source ends: for each id
// not deleted, the seq of its latest version.
func wantCustomers(t *testing.T, rows int64) map[int64]int64 {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: fakerSeed, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	latest := map[int64]int64{}
	var buf []byte
	for i := range rows {
		op, seq, key, _ := src.Generate(faker.Customers, i, buf)
		id, err := strconv.ParseInt(string(key), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		buf = key[:0]
		if op == source.OpDelete {
			delete(latest, id)
		} else {
			latest[id] = seq
		}
	}
	return latest
}

// checkTables reads the tables back with clickhouse-client: customers
// with FINAL must equal the source's end state, orders must hold every
// record exactly once.
func checkTables(t *testing.T, db string, rows int64) {
	t.Helper()
	checkTablesVia(t, func(q string) string { return clientQuery(t, q) }, db, "", rows)
}

// checkTablesVia is checkTables with query running clickhouse-client,
// reading the tables named with suffix (a cluster's Distributed tables).
func checkTablesVia(t *testing.T, query func(string) string, db, suffix string, rows int64) {
	t.Helper()
	want := wantCustomers(t, rows)
	out := query(fmt.Sprintf("SELECT id, _openetl_seq, _openetl_op FROM %s.customers%s FINAL WHERE _openetl_deleted = 0 ORDER BY id", db, suffix))
	got := map[int64]int64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		id, _ := strconv.ParseInt(f[0], 10, 64)
		seq, _ := strconv.ParseInt(f[1], 10, 64)
		if _, dup := got[id]; dup {
			t.Errorf("customers FINAL: id %d twice", id)
		}
		got[id] = seq
		if f[2] == "delete" {
			t.Errorf("customers FINAL: id %d is a delete but _openetl_deleted = 0", id)
		}
	}
	bad := 0
	for id, seq := range want {
		if got[id] != seq {
			if bad++; bad <= 5 {
				t.Errorf("customers FINAL: id %d has seq %d, want %d (0: missing)", id, got[id], seq)
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			if bad++; bad <= 5 {
				t.Errorf("customers FINAL: id %d is visible but deleted at the source (or never existed)", id)
			}
		}
	}
	if bad > 0 || len(got) != len(want) {
		t.Fatalf("customers FINAL: %d rows, want %d; %d differences", len(got), len(want), bad)
	}
	ords := strings.Fields(query(fmt.Sprintf("SELECT count(), uniqExact(_openetl_id), uniqExact(_openetl_seq), min(_openetl_seq), max(_openetl_seq) FROM %s.orders%s", db, suffix)))
	wantOrd := []string{fmt.Sprint(rows), fmt.Sprint(rows), fmt.Sprint(rows), "1", fmt.Sprint(rows)}
	if strings.Join(ords, " ") != strings.Join(wantOrd, " ") {
		t.Fatalf("orders: count, distinct ids, distinct seqs, min and max seq = %v, want %v (every record exactly once)", ords, wantOrd)
	}
	t.Logf("customers FINAL: %d rows equal to the source; orders: %d rows, each once", len(got), rows)
}

func runChild(t *testing.T, db, dir string, rows int64) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OPENETL_CH_CHILD=1", "OPENETL_CH_DB="+db, "OPENETL_CH_DIR="+dir,
		"OPENETL_CH_ROWS="+strconv.FormatInt(rows, 10))
	return cmd
}

// TestPipelineMerge syncs customers (merge, with updates and deletes) and
// orders (append) through the whole pipeline, twice (the second adds
// nothing), and reads the tables back with clickhouse-client.
func TestPipelineMerge(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	dir := t.TempDir()
	const rows = 20_000
	for range 2 {
		if c := testutil.StartChild(t, runChild(t, db, dir, rows), testutil.Hold{}); c.Wait() != nil {
			t.Fatalf("pipeline: %v\n%s", c.Err(), c.Output())
		}
	}
	checkTables(t, db, rows)
}

// TestPipelineSurvivesSIGKILL kills the pipeline (a child process) at
// random moments several times, then lets it finish: customers read with
// FINAL equal the source, and orders hold every record once.
// OPENETL_SEED replays a failing seed.
func TestPipelineSurvivesSIGKILL(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^%s$' ./sink/clickhouse)", seed, seed, t.Name())
	rng := rand.New(rand.NewPCG(seed, 0))
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	dir := t.TempDir()
	const rows = 150_000
	killed := 0
	for range 5 {
		// Held 1 to rows/6 records into what it reads, so it can't
		// finish before the kill: killed at a random moment, or soon
		// after it holds.
		c := testutil.StartChild(t, runChild(t, db, dir, rows), testutil.Hold{After: 1 + rng.Int64N(rows/6)})
		select {
		case <-time.After(time.Duration(300+rng.IntN(1500)) * time.Millisecond):
		case <-c.Held():
			time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
		}
		if !c.Kill() {
			t.Fatalf("child ended before the kill: %v\n%s", c.Err(), c.Output())
		}
		killed++
	}
	t.Logf("%d of 5 runs killed mid-way", killed)
	if c := testutil.StartChild(t, runChild(t, db, dir, rows), testutil.Hold{}); c.Wait() != nil {
		t.Fatalf("final run: %v\n%s", c.Err(), c.Output())
	}
	checkTables(t, db, rows)
	// The epochs applied, each once.
	ep := strings.Fields(clientQuery(t, fmt.Sprintf("SELECT count(), uniqExact(epoch) FROM %s._openetl_epochs WHERE pipeline = 'chkill'", db)))
	if len(ep) != 2 || ep[0] != ep[1] {
		t.Errorf("_openetl_epochs: %v rows and distinct epochs: an epoch recorded twice", ep)
	}
}

// TestChaosTwoCopies runs two copies of the pipeline at once, again and
// again, SIGKILLing each at a random moment: the younger fences the older,
// whose Commit fails or copies nothing. A final run completes, and the
// tables must equal the source: customers with FINAL, orders each once.
// OPENETL_SEED replays.
func TestChaosTwoCopies(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^%s$' ./sink/clickhouse)", seed, seed, t.Name())
	rng := rand.New(rand.NewPCG(seed, 1))
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	dir := t.TempDir()
	const rows = 100_000
	killed, fenced := twoCopies(t, rng, 4, rows/10, func() *exec.Cmd { return runChild(t, db, dir, rows) })
	t.Logf("%d copies killed, %d fenced", killed, fenced)
	if killed == 0 {
		t.Fatal("no copy was killed mid-run")
	}
	if c := testutil.StartChild(t, runChild(t, db, dir, rows), testutil.Hold{}); c.Wait() != nil {
		t.Fatalf("final run: %v\n%s", c.Err(), c.Output())
	}
	checkTables(t, db, rows)
}

// twoCopies starts two copies of the pipeline (start makes each) at
// once, rounds times, SIGKILLing each at a random moment, and counts the
// copies killed and those that ended fenced; any other end fails t.
func twoCopies(t *testing.T, rng *rand.Rand, rounds int, holdMax int64, start func() *exec.Cmd) (killed, fenced int) {
	t.Helper()
	for range rounds {
		// Each copy holds 1 to holdMax records into what it reads, so
		// neither can finish before its kill: at a random moment, or soon
		// after it holds.
		var cs [2]*testutil.Child
		for i := range cs {
			if i == 1 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			}
			cs[i] = testutil.StartChild(t, start(), testutil.Hold{After: 1 + rng.Int64N(holdMax)})
		}
		var wg sync.WaitGroup
		ended := make([]bool, 2)
		for i, c := range cs {
			wait := time.Duration(200+rng.IntN(1500)) * time.Millisecond
			after := time.Duration(rng.IntN(200)) * time.Millisecond
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-time.After(wait):
				case <-c.Held():
					time.Sleep(after)
				case <-c.Exited():
				}
				ended[i] = !c.Kill()
			}()
		}
		wg.Wait()
		for i, c := range cs {
			switch {
			case !ended[i]:
				killed++
			case strings.Contains(c.Output(), "fenced"):
				fenced++
			default:
				t.Fatalf("copy %d ended before its kill: %v\n%s", i, c.Err(), c.Output())
			}
		}
	}
	return killed, fenced
}
