package iceberg_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
)

var flagSimSeed = flag.String("sim.seed", "", "TestSim replays this one seed and prints its trace (or OPENETL_SIM_SEED)")

// simOptions are the options TestSim runs every seed with (a seed
// replays only with the same options): the workloads of package sim's
// own TestSeeds, with more time per attempt, as Iceberg commits are
// slower than the fake's.
var simOptions = sim.Options{MaxRows: 40, MaxAttempts: 8, AttemptTimeout: 2 * time.Minute}

// defaultSimSeeds keeps TestSim near 15-30 s on a loaded 2-core machine
// (200 seeds took 75 s); OPENETL_SIM_SEEDS runs more.
const defaultSimSeeds = 40

// expiryFor says whether seed's run lets staged files expire between
// attempts: every seed, grouped ones included. Grouped epochs used to
// be the exception: Commit returns nil for an epoch whose files wait
// for their group, and when they expired Recover reported the HEAD
// epoch Lost and the log rewound past epochs whose source positions the
// runner had acknowledged (seeds 3874289869922588, 2866060847222531,
// 2866060847222462; with OPENETL_SIM_EXPIRY=1, 4 of the 300 seeds from
// OPENETL_SIM_BASE=2445757779571077). The destination now declares
// sink.Capabilities.Deferred and reports which epochs are visible
// (sink.Visibility), the runner acknowledges only those, and the
// simulation counts an epoch applied only once it is reported visible
// and checks at each rewind that no acknowledged position is past the
// record rewound to. The expiry here is orphan removal with no minimum
// age. OPENETL_SIM_EXPIRY=0 turns it off.
func expiryFor(uint64) bool { return os.Getenv("OPENETL_SIM_EXPIRY") != "0" }

// icebergTarget is package sim's view of a Destination on cat: a new
// Destination per attempt (a process of its own) on the shared catalog,
// merge tables as the simulation's setup says, every epoch committed
// (Grouping{}). It reads tables back with iceberg-go's scan (equality
// deletes applied), and with expiry it expires staged data as
// Maintain's orphan removal would with no minimum age: every file of the
// tables' locations that no snapshot refers to.
func icebergTarget(cat catalog.Catalog, seed uint64, expiry bool) *sim.Target {
	group, gname := simGrouping(seed)
	t := &sim.Target{
		Name: "iceberg on a SQLite catalog, " + gname,
		Open: func(context.Context, sim.Setup) (sink.Destination, error) {
			g := group
			return iceberg.New(iceberg.Config{Catalog: cat, Grouping: &g})
		},
		Read: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return scan(ctx, cat, iceberg.DefaultNamespace, stream)
		},
	}
	t.Unnamed = func(ctx context.Context, head *checkpoint.Record) ([]string, error) {
		return unnamedFiles(ctx, cat, head)
	}
	if expiry {
		t.DropStaged = func(ctx context.Context) (int, error) { return dropOrphans(ctx, cat) }
	}
	return t
}

// unnamedFiles lists the data files the writer wrote (their write UUID
// is version 8, see collect.go) that no snapshot of a table refers to
// and head's committables don't name.
func unnamedFiles(ctx context.Context, cat catalog.Catalog, head *checkpoint.Record) ([]string, error) {
	named := map[string]bool{}
	if head != nil {
		for _, c := range head.Committables {
			var cm struct {
				Tables []struct {
					Data []struct {
						Path string `json:"path"`
					} `json:"data"`
				} `json:"tables"`
			}
			if len(c) == 0 {
				continue
			}
			if err := json.Unmarshal(c, &cm); err != nil {
				return nil, err
			}
			for _, tf := range cm.Tables {
				for _, f := range tf.Data {
					named[path.Base(f.Path)] = true
				}
			}
		}
	}
	ns := table.Identifier{iceberg.DefaultNamespace}
	ok, err := cat.CheckNamespaceExists(ctx, ns)
	if err != nil || !ok {
		return nil, err
	}
	var out []string
	for ident, err := range cat.ListTables(ctx, ns) {
		if err != nil {
			return nil, err
		}
		tbl, err := cat.LoadTable(ctx, ident)
		if err != nil {
			return nil, err
		}
		plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(0))
		if err != nil {
			return nil, err
		}
		for _, f := range plan.Files() {
			base := path.Base(f)
			parts := strings.Split(strings.TrimSuffix(base, ".parquet"), "-")
			if len(parts) != 8 || named[base] {
				continue
			}
			if u, err := uuid.Parse(strings.Join(parts[2:7], "-")); err == nil && u.Version() == 8 {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

// dropOrphans deletes every file of the namespace's tables that their
// metadata does not reach: staged data files of epochs not applied.
func dropOrphans(ctx context.Context, cat catalog.Catalog) (int, error) {
	ns := table.Identifier{iceberg.DefaultNamespace}
	ok, err := cat.CheckNamespaceExists(ctx, ns)
	if err != nil || !ok {
		return 0, err
	}
	n := 0
	for ident, err := range cat.ListTables(ctx, ns) {
		if err != nil {
			return n, err
		}
		tbl, err := cat.LoadTable(ctx, ident)
		if err != nil {
			return n, err
		}
		// Data files only: with no minimum age, deleting metadata files
		// would race a zombie's commit that is writing them (seed
		// 4242112 lost a manifest the table then referred to), which is
		// what Maintain's OrphansOlderThan exists for, not a staged-data
		// expiry.
		res, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(time.Nanosecond),
			table.WithDeleteFunc(func(path string) error {
				if !strings.HasSuffix(path, ".parquet") {
					return nil
				}
				return os.Remove(strings.TrimPrefix(path, "file://"))
			}))
		if err != nil {
			return n, fmt.Errorf("delete orphan files of %v: %w", ident, err)
		}
		for _, f := range res.DeletedFiles {
			if strings.HasSuffix(f, ".parquet") {
				n++
			}
		}
	}
	return n, nil
}

// simGrouping picks the seed's grouping of epochs into table commits:
// every epoch (Grouping{}), or files waiting up to 10ms, or until 4 KiB
// or the attempt's end (lane 0's Close).
func simGrouping(seed uint64) (iceberg.Grouping, string) {
	switch seed % 3 {
	case 1:
		return iceberg.Grouping{Interval: 10 * time.Millisecond}, "grouping 10ms"
	case 2:
		return iceberg.Grouping{Bytes: 4 << 10, Interval: time.Hour}, "grouping 4 KiB"
	}
	return iceberg.Grouping{}, "every epoch committed"
}

func simReplay(seed uint64) string {
	return fmt.Sprintf("go test ./sink/iceberg -run '^TestSim$' -sim.seed=%d -v", seed)
}

// runSimSeed runs one seed against a fresh warehouse.
func runSimSeed(t *testing.T, seed uint64) (*sim.Report, error) {
	_, cat := openCatalog(t, t.TempDir())
	opts := simOptions
	opts.Target = icebergTarget(cat, seed, expiryFor(seed))
	return sim.Run(seed, opts)
}

// TestSim runs package sim's seeded simulation of the whole runner
// against the Iceberg writer on a SQLite catalog with a file warehouse:
// per seed, a workload (streams appended or merged, exact or superset
// source, lanes, epoch sizes) and a list of attempts with faults at
// every protocol step (crashes before and after PreCommit, after the
// HEAD write, during Commit and Recover; Commit errors and lost Commit
// responses; checkpoint store errors; zombies paused at a call while the
// next attempt runs; source disconnects; write errors;
// staged data files removed as orphans between attempts, grouped seeds
// included), then clean syncs; and the
// simulation's checks, reading the tables back with iceberg-go: nothing
// lost, no duplicates where exactly once is promised, each merged key's
// row the source's latest version, HEAD and rewinds consistent, every
// epoch of the final log applied.
//
// OPENETL_SIM_SEEDS sets the number of seeds (default 40), from
// OPENETL_SIM_BASE (default derived from the commit); -sim.seed=N
// or OPENETL_SIM_SEED=N replays one seed with its trace (the plan
// replays; goroutine interleavings may differ).
func TestSim(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: the seeds take minutes under -race")
	}
	sim.RunSeeds(t, sim.Seeds{
		Name: "the Iceberg writer", Key: "iceberg", Default: defaultSimSeeds, One: *flagSimSeed,
		Run: runSimSeed, Replay: simReplay,
	})
}
