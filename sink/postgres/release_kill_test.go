package postgres_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// releaseKillEnv is "dir:schema:stop" for TestReleaseKillChild: the
// checkpoints' directory, the schema, and what the child does: "narrow"
// syncs into a Postgres that can't take float64, "plain" into one that
// can, "precommit" and "commit" into one that can but stop, printing
// STOPPED-AT, before lane 0's PreCommit of the first epoch (the patches
// are staged: a lane stages at Write) or before its Commit (the record
// is written: after the commit point), and wait to be killed.
const releaseKillEnv = "OPENETL_PGSINK_RELEASE_CHILD"

// TestReleaseKillChild is the child process of TestReleaseSIGKILL. It
// does nothing when run as an ordinary test.
func TestReleaseKillChild(t *testing.T) {
	arg := os.Getenv(releaseKillEnv)
	if arg == "" {
		t.Skip("child process of TestReleaseSIGKILL")
	}
	f := strings.SplitN(arg, ":", 3)
	dir, schema, stop := f[0], f[1], f[2]
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pg, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	var dst sink.Destination = pg
	switch stop {
	case "narrow":
		dst = narrowed{pg}
	case "precommit", "commit":
		op := sinktest.FakePreCommit
		if stop == "commit" {
			op = sinktest.FakeCommit
		}
		dst = sinktest.WithFaults(pg, sinktest.FaultConfig{Control: func(ctx context.Context, c sinktest.FakeDestCall) error {
			if c.Op == op && c.Lane == 0 {
				fmt.Printf("STOPPED-AT %s epoch %d\n", stop, c.Epoch)
				<-ctx.Done() // the kill comes first
			}
			return nil
		}})
	}
	src, err := faker.New(faker.Config{Seed: 9, Rows: releaseRows, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("release").From(src).To(dst).Checkpoints(store).Lanes(2).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SYNC-OK released=%d\n", res.Streams[faker.Orders].Released)
}

// TestReleaseSIGKILL: held values released by processes SIGKILLed with
// the patches staged (before the epoch's record) and after the commit
// point (before the destination's Commit) land once: the first kill
// leaves the table as it was and the next attempt releases them all;
// after the second, the next attempt's recovery applies the killed
// one's epoch and it releases nothing. psql reads each held amount on
// its row, and the log's totals count each once.
func TestReleaseSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the kill test runs child processes")
	}
	e := newEnv(t)
	dir := t.TempDir()
	child := func(stop string) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReleaseKillChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), releaseKillEnv+"="+dir+":"+e.schema+":"+stop)
		return testutil.StartChild(t, cmd, testutil.Hold{})
	}
	complete := func(stop string) string {
		t.Helper()
		c := child(stop)
		if err := c.Wait(); err != nil || !strings.Contains(c.Output(), "SYNC-OK") {
			t.Fatalf("%s run: %v\n%s", stop, err, c.Output())
		}
		return c.Output()
	}
	complete("narrow")
	amounts := testutil.HeldValues(t, dir, faker.Orders, "amount")
	if len(amounts) != releaseRows {
		t.Fatalf("%d amounts held, want %d", len(amounts), releaseRows)
	}
	for _, stop := range []string{"precommit", "commit"} {
		before := records(dir)
		c := child(stop)
		for !strings.Contains(c.Output(), "STOPPED-AT") {
			select {
			case <-c.Wrote():
			case <-c.Exited():
				if !strings.Contains(c.Output(), "STOPPED-AT") {
					t.Fatalf("%s run ended before its stop: %v\n%s", stop, c.Err(), c.Output())
				}
			case <-testutil.Context(t).Done():
				t.Fatalf("%s run: no stop\n%s", stop, c.Output())
			}
		}
		if !c.Kill() {
			t.Fatalf("%s run exited before the kill\n%s", stop, c.Output())
		}
		after := records(dir)
		if want := before + map[string]int{"precommit": 0, "commit": 1}[stop]; after != want {
			t.Errorf("killed at %s: %d records, want %d", stop, after, want)
		}
		if e.hasColumn(t, faker.Orders, "amount") {
			t.Fatalf("killed at %s: amount reached the table before a Commit", stop)
		}
	}
	if out := complete("plain"); !strings.Contains(out, "SYNC-OK released=0") {
		t.Errorf("the last run released values again:\n%s", out)
	}
	if n, m := e.checkPatched(t, faker.Orders, "amount", "", amounts, nil); n != releaseRows || m != releaseRows {
		t.Errorf("%d orders, %d of them with a held amount; want %d and %d", n, m, releaseRows, releaseRows)
	}
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	_, head, err := store.Head(t.Context(), "release")
	if err != nil {
		t.Fatal(err)
	}
	if got := head.Totals[faker.Orders].Released; got != releaseRows {
		t.Errorf("totals: %d amounts released, want %d", got, releaseRows)
	}
}
