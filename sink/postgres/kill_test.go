package postgres_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/source/faker"
)

// killEnv names the directory (checkpoints) and schema a child process
// syncs into, as "dir:schema": the test binary re-executed to run
// TestKillChild as a real pipeline.
const killEnv = "OPENETL_PGSINK_CHILD"

const killRows = 20_000

// TestKillChild is the child process of TestSurvivesSIGKILL: it syncs the
// fake customers (merge, soft deletes) and orders (append) into the test
// server, two lanes, epochs every 20ms so kills land in every step of the
// protocol. It does nothing when run as an ordinary test.
func TestKillChild(t *testing.T) {
	arg := os.Getenv(killEnv)
	if arg == "" {
		t.Skip("child process of TestSurvivesSIGKILL")
	}
	dir, schema, _ := strings.Cut(arg, ":")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src, err := faker.New(faker.Config{Seed: 42, Rows: killRows})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("kill").From(testutil.HoldSource(src)).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(20*time.Millisecond, 0).
		Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SYNC-OK epochs=%d generation=%d\n", res.Epochs, res.Generation)
}

// TestSurvivesSIGKILL runs the pipeline in child processes SIGKILLed at
// random moments, every other round two copies at once (the younger
// fences the older), then one run to completion: psql must then read
// every order version exactly once and every customer's latest version
// once (deleted ones flagged). OPENETL_SEED replays a seed's choices.
func TestSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the kill test runs child processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^TestSurvivesSIGKILL$' ./sink/postgres)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	e := newEnv(t)
	dir := t.TempDir()
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), killEnv+"="+dir+":"+e.schema)
		return cmd
	}
	killed, fenced := 0, 0
	for round := range 6 {
		copies := 1 + round%2
		cs := make([]*testutil.Child, copies)
		for i := range cs {
			// Each holds its splits before it could read everything, so
			// none finishes before its kill.
			after := 1 + rng.Int64N(killRows/16)
			if i == 0 && copies > 1 {
				after += killRows / 16
			}
			cs[i] = testutil.StartChild(t, child(), testutil.Hold{After: after})
		}
		want := records(dir) + 1 + rng.IntN(8)
		deadline := time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		tick := time.NewTicker(2 * time.Millisecond)
	wait:
		for records(dir) < want {
			select {
			case <-deadline:
				break wait
			case <-cs[copies-1].Held():
				break wait
			case <-tick.C:
			}
		}
		tick.Stop()
		for _, c := range cs {
			switch {
			case c.Kill():
				killed++
			case strings.Contains(c.Output(), "fenced"):
				fenced++
			default:
				t.Fatalf("child ended before the kill: %v\n%s", c.Err(), c.Output())
			}
		}
	}
	t.Logf("%d children killed, %d stopped fenced", killed, fenced)
	if c := testutil.StartChild(t, child(), testutil.Hold{}); c.Wait() != nil || !strings.Contains(c.Output(), "SYNC-OK") {
		t.Fatalf("final run: %v\n%s", c.Err(), c.Output())
	}
	verifyFaker(t, e.schema, killRows)
}

// verifyFaker compares what psql reads with what the faker generates
// (seed 42, rows records per stream).
func verifyFaker(t *testing.T, schema string, rows int64) {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // seq -> op
	var buf []byte
	for i := range rows {
		op, seq, key, _ := src.Generate(faker.Orders, i, buf)
		buf = key[:0]
		want[fmt.Sprint(seq)] = op.String()
	}
	seen := map[string]int{}
	for _, line := range strings.Split(psql(t, `SELECT _openetl_seq || ' ' || _openetl_op FROM `+schema+`.`+faker.Orders), "\n") {
		s, op, _ := strings.Cut(line, " ")
		seen[s]++
		if w, ok := want[s]; !ok || w != op {
			t.Fatalf("orders: row %q: not generated (op %q)", line, w)
		}
	}
	for s := range want {
		if seen[s] != 1 {
			t.Fatalf("orders: seq %s visible %d times, want once", s, seen[s])
		}
	}
	type version struct {
		seq int64
		op  string
	}
	last := map[string]version{}
	for i := range rows {
		op, seq, key, _ := src.Generate(faker.Customers, i, buf)
		k := string(key)
		buf = key[:0]
		if v, ok := last[k]; !ok || seq > v.seq {
			last[k] = version{seq, op.String()}
		}
	}
	n := 0
	for _, line := range strings.Split(psql(t, `SELECT id || ' ' || _openetl_seq || ' ' || _openetl_deleted FROM `+schema+`.`+faker.Customers), "\n") {
		f := strings.Fields(line)
		v, ok := last[f[0]]
		if !ok {
			t.Fatalf("customers: key %s never generated", f[0])
		}
		del := "false"
		if v.op == "delete" {
			del = "true"
		}
		if f[1] != fmt.Sprint(v.seq) || f[2] != del {
			t.Fatalf("customers: key %s: seq %s deleted %s, want seq %d after %s", f[0], f[1], f[2], v.seq, v.op)
		}
		n++
	}
	if n != len(last) {
		t.Errorf("customers: %d rows, want %d keys", n, len(last))
	}
	t.Logf("orders %d rows, each version once; customers %d keys, each at its latest version", len(seen), n)
}

var recordFile = regexp.MustCompile(`^\d{20}-\d{20}\.json$`)

// records counts the checkpoint records under dir.
func records(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && recordFile.MatchString(e.Name()) {
			n++
		}
		return nil
	})
	return n
}
