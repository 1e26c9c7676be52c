package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// TestRouteKill routes two shards into one Parquet table while a writer
// changes both, kills the pipeline's process four times (once inside the
// snapshot, then each time after it committed another epoch), syncs to
// the end and checks that every version landed exactly once: each
// (_openetl_stream, id)'s versions applied in seq order give the shard's
// row, and no _openetl_id repeats.
func TestRouteKill(t *testing.T) {
	d := dsn(t)
	base, pub, slot := name("rk"), name("pub"), name("slot")
	shards := []string{base + "_a", base + "_b"}
	const initial = 20_000
	execSQL(t, d,
		fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, v text, n int4)", shards[0]),
		fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v varchar(40), n int8)", shards[1]),
		fmt.Sprintf("INSERT INTO %s SELECT g, md5(g::text), 0 FROM generate_series(1, %d) g", shards[0], initial),
		fmt.Sprintf("INSERT INTO %s SELECT g, md5(g::text), 0 FROM generate_series(1, %d) g", shards[1], initial),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", pub, shards[0], shards[1]))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	h.options = func(b *etl.Builder) *etl.Builder { return b.Route(base+"_?", base) }
	seed := uint64(time.Now().UnixNano())
	if *killSeed != 0 {
		seed = *killSeed
	}
	t.Logf("seed %d (replay: -run TestRouteKill -pg.kill-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// The writer: transactions of 1 to 10 changes across both shards.
	stopWriter := killWriter{tables: shards, rows: initial, changes: 10, next: 1_000_000}.start(t, d, seed)
	defer stopWriter()

	start := func(hold testutil.Hold) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OPENETL_PG_CHILD=1", "OPENETL_PG_DSN="+d, "OPENETL_PG_PUB="+pub, "OPENETL_PG_SLOT="+slot,
			"OPENETL_PG_TABLES="+h.tables, "OPENETL_PG_CKPTS="+h.ckpts, "OPENETL_PG_CHUNK=1000", "OPENETL_PG_ROUTE="+base+"_?="+base)
		return testutil.StartChild(t, cmd, hold)
	}
	kill := func(c *testutil.Child, i int) {
		if !c.Kill() {
			t.Fatalf("child %d ended before the kill: %v\n%s", i, c.Err(), c.Output())
		}
		testutil.Until(t, fmt.Sprintf("slot %s released by child %d", slot, i), func() bool {
			return queryOne(t, d, "SELECT COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "f"
		})
	}
	// Kill 1: inside the snapshot of a shard, held 1 to 10 chunks in.
	first := start(testutil.Hold{After: int64(1000 * (1 + rng.IntN(10))), Splits: "^snapshot:"})
	testutil.Until(t, "a checkpoint with a snapshot in progress", func() bool {
		select {
		case <-first.Exited():
			t.Fatalf("child 1 ended early: %v\n%s", first.Err(), first.Output())
		default:
		}
		r := headRecord(t, h.ckpts)
		if r == nil {
			return false
		}
		for _, s := range shards {
			var st struct {
				After []string
				Done  bool
			}
			if b, ok := r.Resume["snapshot:"+s]; ok && json.Unmarshal(b, &st) == nil && !st.Done && len(st.After) > 0 {
				t.Logf("kill 1 at epoch %d, snapshot of %s after key %v", r.Epoch, s, st.After)
				return true
			}
		}
		return false
	})
	kill(first, 1)
	// Kills 2 to 4: each once the child committed 1 to 5 more epochs.
	for i := 2; i <= 4; i++ {
		var from uint64
		if r := headRecord(t, h.ckpts); r != nil {
			from = r.Epoch
		}
		more := uint64(1 + rng.IntN(5))
		c := start(testutil.Hold{})
		testutil.Until(t, fmt.Sprintf("child %d commits %d epochs", i, more), func() bool {
			select {
			case <-c.Exited():
				t.Fatalf("child %d ended early: %v\n%s", i, c.Err(), c.Output())
			default:
			}
			r := headRecord(t, h.ckpts)
			return r != nil && r.Epoch >= from+more
		})
		kill(c, i)
		t.Logf("kill %d after epoch %d", i, headRecord(t, h.ckpts).Epoch)
	}
	txns, err := stopWriter()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer committed %d transactions", txns)
	if _, err := h.sync(); err != nil {
		t.Fatalf("final sync: %v", err)
	}

	st := testutil.ReadParquetTables(t, h.tables)[base]
	if st == nil || st.Rows != st.DistinctIDs {
		t.Fatalf("output %+v: ids repeat", st)
	}
	got := map[string]string{}
	out := readRows(t, h.tables, base)
	for _, r := range out {
		k := fmt.Sprint(r["_openetl_stream"], " ", r["id"])
		if r["_openetl_op"] == "delete" {
			delete(got, k)
			continue
		}
		got[k] = fmt.Sprint(r["v"], " ", r["n"])
	}
	want := map[string]string{}
	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, s := range shards {
		res, err := c.Exec(context.Background(), fmt.Sprintf("SELECT id, v, n FROM %s", s)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res[0].Rows {
			want[fmt.Sprint(s, " ", string(r[0]))] = string(r[1]) + " " + string(r[2])
		}
	}
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if bad++; bad <= 5 {
				t.Errorf("row %s: output %q (present %v), table %q", k, g, ok, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("row %s is in the output but not in its shard", k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d rows differ (of %d in the shards, %d in the output after applying %d records)", bad, len(want), len(got), st.Rows)
	}
	t.Logf("%d rows of 2 shards equal the output's %d records applied in seq order", len(want), st.Rows)
}
