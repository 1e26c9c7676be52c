package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// partitioned creates tbl, range-partitioned on at (PRIMARY KEY (id, at)),
// with partitions tbl_p1 to tbl_pN of 100 values of at each, and rows
// rows per partition: ids 1.. in p1, then on, at = the partition's
// lower bound + id % 100.
func partitioned(t *testing.T, d, tbl string, parts, rows int) {
	t.Helper()
	sqls := []string{fmt.Sprintf("CREATE TABLE %s (id int8, at int4, v text, n int8 NOT NULL DEFAULT 0, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)", tbl)}
	for i := range parts {
		sqls = append(sqls, fmt.Sprintf("CREATE TABLE %s_p%d PARTITION OF %s FOR VALUES FROM (%d) TO (%d)", tbl, i+1, tbl, i*100, (i+1)*100),
			fmt.Sprintf("INSERT INTO %s SELECT g, %d + g %% 100, md5(g::text) FROM generate_series(%d, %d) g", tbl, i*100, i*rows+1, (i+1)*rows))
	}
	execSQL(t, d, sqls...)
}

// tableRows returns "id/at" -> "v n" for a query's rows (id, at, v, n).
func tableRows(t *testing.T, d, sql string) map[string]string {
	t.Helper()
	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	res, err := c.Exec(context.Background(), sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out := map[string]string{}
	for _, r := range res[0].Rows {
		out[string(r[0])+"/"+string(r[1])] = string(r[2]) + " " + string(r[3])
	}
	return out
}

// applied applies a stream's output rows (seq order) by key (id, at) and
// returns the result as tableRows does, and how many records of each op
// the output holds.
func applied(out []map[string]any) (map[string]string, map[string]int) {
	got, ops := map[string]string{}, map[string]int{}
	for _, r := range out {
		op := fmt.Sprint(r["_openetl_op"])
		ops[op]++
		k := fmt.Sprintf("%v/%v", r["id"], r["at"])
		if op == "delete" {
			delete(got, k)
			continue
		}
		got[k] = fmt.Sprintf("%v %v", r["v"], r["n"])
	}
	return got, ops
}

// sameRows reports the differences between the applied output and want.
func sameRows(t *testing.T, got, want map[string]string, out []map[string]any) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if bad++; bad <= 5 {
				id, _, _ := strings.Cut(k, "/")
				t.Errorf("row %s: output %q (present %v), table %q; its versions: %s", k, g, ok, w, versions(out, id))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("row %s is in the output but not in the table", k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d rows differ (%d in the table, %d in the output applied)", bad, len(want), len(got))
	}
}

// stopAndApply stops a harness's Run (cancel, then its error on done),
// syncs once more to the end, and returns stream tbl's output (seq
// order) and, applied, its rows and records by op.
func stopAndApply(t *testing.T, h *harness, cancel context.CancelFunc, done chan error, tbl string) (
	out []map[string]any, got map[string]string, ops map[string]int) {
	t.Helper()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	res, err := h.sync()
	if err != nil {
		t.Fatalf("final sync: %v", err)
	}
	t.Logf("final sync read %d", res.Streams[tbl].Read)
	out = readRows(t, h.tables, tbl)
	got, ops = applied(out)
	return out, got, ops
}

// waitSplitDone waits until a checkpoint holds split id's snapshot as
// done, failing if the run ends first.
//
// A split handed over to the change stream (a partition attached since
// the slot was made, say) is done once the stream's state says it read
// the split's table: the split's own state says so only from the next
// Open on.
func waitSplitDone(t *testing.T, ckpts, id string, done chan error) {
	t.Helper()
	testutil.Until(t, "a checkpoint with "+id+" done", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run ended before a checkpoint held %s done: %v", id, err)
		default:
		}
		r := headRecord(t, ckpts)
		if r == nil {
			return false
		}
		var st struct{ Done bool }
		if b, ok := r.Resume[id]; ok && json.Unmarshal(b, &st) == nil && st.Done {
			return true
		}
		for sid, b := range r.Resume {
			if strings.HasPrefix(string(sid), "slot:") && slices.Contains(postgres.Snapped(b), id) {
				return true
			}
		}
		return false
	})
}

// TestPartitionedTable: a range-partitioned table published via its
// root is one stream under the root's name, keyed by the root's primary
// key, whose snapshot reads each partition as a split of its own. While
// a pipeline runs, inserts, updates (one moving rows to another
// partition), deletes, a partition attached with rows of its own (its
// first change comes without a change of it: the stream notices the
// attach between transactions, and a new attempt snapshots it) and a
// partition detached (its rows stay at the destination, its later
// changes are not read). The output, applied in seq order, equals the
// table plus the detached partition as it was, with exactly the records
// expected of each op.
func TestPartitionedTable(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("parted"), name("pub"), name("slot")
	partitioned(t, d, tbl, 3, 300)
	// A table to attach later, with rows, its columns in another order.
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s_p4 (n int8 NOT NULL DEFAULT 0, v text, at int4, id int8, PRIMARY KEY (id, at))", tbl),
		fmt.Sprintf("INSERT INTO %s_p4 (id, at, v) SELECT g, 300 + g %% 100, 'p4 ' || g FROM generate_series(10001, 10100) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	cfg := postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 70, SnapshotParallelism: 2,
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond}

	cat, err := newSource(t, d, cfg).Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Streams) != 1 || cat.Streams[0].Name != tbl || !slices.Equal(cat.Streams[0].PrimaryKey, []string{"id", "at"}) {
		t.Fatalf("catalog %+v, want the one stream %s keyed by (id, at)", cat.Streams, tbl)
	}

	h := newHarness(t, d, cfg)
	var logs strings.Builder
	h.logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	for i := 1; i <= 3; i++ {
		waitSplitDone(t, h.ckpts, fmt.Sprintf("snapshot:%s/%s_p%d", tbl, tbl, i), done)
	}

	// Changes while streaming: 30 inserts, 128 updates, 5 rows moved
	// from p1 to p2, 20 deletes.
	execSQL(t, d,
		fmt.Sprintf("INSERT INTO %s (id, at, v) SELECT g, g %% 300, 'new' FROM generate_series(2001, 2030) g", tbl),
		fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id %% 7 = 0 AND id <= 900", tbl),
		fmt.Sprintf("UPDATE %s SET at = at + 100, v = 'moved' WHERE id BETWEEN 1 AND 5", tbl),
		fmt.Sprintf("DELETE FROM %s WHERE id BETWEEN 600 AND 619", tbl))
	waitConfirmed(t, d, slot, done)

	// Attach p4 with its 100 rows; nothing changes in it until its
	// snapshot is done.
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_p4 FOR VALUES FROM (300) TO (400)", tbl, tbl))
	waitSplitDone(t, h.ckpts, fmt.Sprintf("snapshot:%s/%s_p4", tbl, tbl), done)
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = n + 10 WHERE at >= 300 AND id %% 10 = 0", tbl)) // 10 rows
	waitConfirmed(t, d, slot, done)

	// Detach p2 (with the moved rows): its rows stay at the destination,
	// and a change of it after the detach is not read.
	p2 := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s_p2", tbl))
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s_p2", tbl, tbl),
		fmt.Sprintf("UPDATE %s_p2 SET v = 'detached'", tbl),
		fmt.Sprintf("INSERT INTO %s (id, at, v) VALUES (3001, 10, 'last')", tbl))
	waitConfirmed(t, d, slot, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	// One new attempt, for the attach: the relation messages pgoutput
	// sends for each partition beside its root's are no added tables.
	if n := strings.Count(logs.String(), "starting a new attempt"); n != 1 || !strings.Contains(logs.String(), tbl+"_p4 was attached") {
		t.Errorf("the run started %d new attempts, want 1 for the attached partition: %s", n, logs.String())
	}
	res, err := h.sync()
	if err != nil {
		t.Fatalf("final sync: %v", err)
	}
	t.Logf("final sync read %d", res.Streams[tbl].Read)

	out := readRows(t, h.tables, tbl)
	got, ops := applied(out)
	want := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))
	maps.Copy(want, p2)
	sameRows(t, got, want, out)
	// Records in: 900 snapshot rows, 30 + 1 inserts, 100 rows of p4's
	// snapshot; 128 + 10 updates; 20 deletes; and the 5 moves.
	if wantOps := map[string]int{"insert": 900 + 31 + 100 + 5, "update": 138, "delete": 20 + 5}; !maps.Equal(ops, wantOps) {
		t.Errorf("records by op %v, want %v", ops, wantOps)
	}
	for i := 1; i <= 5; i++ {
		var seen []string
		for _, r := range out {
			if fmt.Sprint(r["id"]) == fmt.Sprint(i) {
				seen = append(seen, fmt.Sprintf("%v %v/%v", r["_openetl_op"], r["id"], r["at"]))
			}
		}
		if w := []string{fmt.Sprintf("insert %d/%d", i, i), fmt.Sprintf("delete %d/%d", i, i), fmt.Sprintf("insert %d/%d", i, 100+i)}; !slices.Equal(seen, w) {
			t.Errorf("row %d moved to p2: records %q, want %q", i, seen, w)
		}
	}
	t.Logf("%d rows in the table (with the detached partition's %d) equal the output's %d records applied in seq order (%v)",
		len(want), len(p2), len(out), ops)
}

// TestPartitionDetachedAndAttachedAgain: a detached partition's rows
// stay at the destination and its changes are not read; attached again,
// it is read again (by the change stream, under watermarks: its rows'
// seqs above every version before them), so its rows changed while
// detached reach the destination. A row deleted while it was detached
// stays.
func TestPartitionDetachedAndAttachedAgain(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("reattach"), name("pub"), name("slot")
	partitioned(t, d, tbl, 2, 50)
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 100 {
		t.Fatalf("snapshot sync: %+v, %v", res.Streams[tbl], err)
	}
	all := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))

	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s_p2", tbl, tbl),
		fmt.Sprintf("UPDATE %s_p2 SET v = 'while detached', n = 7 WHERE id <= 60", tbl),
		fmt.Sprintf("DELETE FROM %s_p2 WHERE id = 100", tbl),
		fmt.Sprintf("UPDATE %s SET n = 1 WHERE id = 1", tbl))
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 1 {
		t.Fatalf("sync after the detach: %+v, %v; want the one update of p1", res.Streams[tbl], err)
	}
	out := readRows(t, h.tables, tbl)
	got, _ := applied(out)
	all["1/1"] = strings.Replace(all["1/1"], " 0", " 1", 1)
	sameRows(t, got, all, out)

	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_p2 FOR VALUES FROM (100) TO (200)", tbl, tbl))
	res, err := h.sync()
	if err != nil || res.Streams[tbl].Read != 49 {
		t.Fatalf("sync after attaching again: %+v, %v; want p2's 49 rows read again", res.Streams[tbl], err)
	}
	// The rows read again are newer than every version before them.
	seq := func(r map[string]any) int64 { n, _ := r["_openetl_seq"].(json.Number).Int64(); return n }
	before := len(out)
	last := seq(out[before-1])
	out = readRows(t, h.tables, tbl)
	for _, r := range out[before:] {
		if seq(r) <= last {
			t.Fatalf("row %v/%v read again with seq %v, not above the last before it (%v)", r["id"], r["at"], r["_openetl_seq"], last)
		}
	}
	got, _ = applied(out)
	want := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))
	want["100/100"] = all["100/100"] // deleted while detached: it stays
	sameRows(t, got, want, out)
	if got["51/151"] != "while detached 7" {
		t.Errorf("row 51 after attaching again: %q", got["51/151"])
	}
}

// TestPartitionDetachedConcurrently: DETACH PARTITION ... CONCURRENTLY
// while a pipeline streams completes (the source holds no transaction
// open once the snapshot is done, which its two transactions wait for),
// and ends like a plain detach: the partition's rows stay at the
// destination, its changes after the detach are not read, and the other
// partition's are.
func TestPartitionDetachedConcurrently(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("detachcc"), name("pub"), name("slot")
	partitioned(t, d, tbl, 2, 50)
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 20,
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	for i := 1; i <= 2; i++ {
		waitSplitDone(t, h.ckpts, fmt.Sprintf("snapshot:%s/%s_p%d", tbl, tbl, i), done)
	}
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 1 WHERE id IN (1, 51)", tbl))
	waitConfirmed(t, d, slot, done)
	p2 := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s_p2", tbl))
	// execSQL gives up after 30 s: a detach waiting on a transaction the
	// source holds open fails the test there.
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s_p2 CONCURRENTLY", tbl, tbl))
	execSQL(t, d, fmt.Sprintf("UPDATE %s_p2 SET v = 'detached', n = 9", tbl),
		fmt.Sprintf("UPDATE %s SET n = 2 WHERE id = 1", tbl),
		fmt.Sprintf("INSERT INTO %s (id, at, v) VALUES (1001, 10, 'after')", tbl))
	waitConfirmed(t, d, slot, done)
	out, got, ops := stopAndApply(t, h, cancel, done, tbl)
	want := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))
	maps.Copy(want, p2)
	sameRows(t, got, want, out)
	if w := map[string]int{"insert": 101, "update": 3}; !maps.Equal(ops, w) {
		t.Errorf("records by op %v, want %v", ops, w)
	}
}

// TestPartitionPublications: how the publication lists a partitioned
// table decides its streams. Via the root: one stream (partitions also
// listed by name add none). Not via the root (Postgres's default),
// whether by name or by schema: a *PartitionRootError saying how to fix
// the publication, which the source classifies as permanent. Partitions
// listed without their partitioned table: a stream each, as any table.
// A publication the source creates publishes via the root.
func TestPartitionPublications(t *testing.T) {
	d := dsn(t)
	tbl := name("pubs")
	partitioned(t, d, tbl, 2, 5)
	ctx := context.Background()
	streams := func(pub string, create ...string) ([]string, error) {
		t.Helper()
		src := newSource(t, d, postgres.Config{Publication: pub, Slot: name("slot"), CreatePublication: len(create) > 0, Tables: create})
		cat, err := src.Discover(ctx)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range cat.Streams {
			names = append(names, s.Name)
		}
		return names, nil
	}
	pub := func(sql string) string {
		t.Helper()
		p := name("pub")
		execSQL(t, d, fmt.Sprintf(sql, p))
		return p
	}
	refused := func(p, table string, parts ...string) {
		t.Helper()
		src := newSource(t, d, postgres.Config{Publication: p, Slot: name("slot")})
		_, err := src.Discover(ctx)
		var pe *postgres.PartitionRootError
		if !errors.As(err, &pe) || !errors.Is(err, postgres.ErrNotViaRoot) || pe.Table != table || !slices.Equal(pe.Partitions, parts) {
			t.Fatalf("publication %s: %v, want a *PartitionRootError naming %s and %v", p, err, table, parts)
		}
		if !strings.Contains(err.Error(), "publish_via_partition_root = true") || !src.Permanent(err) {
			t.Errorf("error %q: says no fix, or is not permanent", err)
		}
		if _, err := src.Open(ctx, nil, nil); !errors.As(err, &pe) {
			t.Errorf("Open: %v, want the *PartitionRootError", err)
		}
	}

	if got, err := streams(pub("CREATE PUBLICATION %s FOR TABLE " + tbl + " WITH (publish_via_partition_root = true)")); err != nil || !slices.Equal(got, []string{tbl}) {
		t.Errorf("via the root: %v, %v", got, err)
	}
	if got, err := streams(pub("CREATE PUBLICATION %s FOR TABLE " + tbl + ", " + tbl + "_p1 WITH (publish_via_partition_root = true)")); err != nil || !slices.Equal(got, []string{tbl}) {
		t.Errorf("via the root, a partition also listed: %v, %v", got, err)
	}
	refused(pub("CREATE PUBLICATION %s FOR TABLE "+tbl), tbl, tbl+"_p1", tbl+"_p2")
	if got, err := streams(pub("CREATE PUBLICATION %s FOR TABLE " + tbl + "_p1")); err != nil || !slices.Equal(got, []string{tbl + "_p1"}) {
		t.Errorf("a partition alone: %v, %v", got, err)
	}
	if queryOne(t, d, "SELECT current_setting('server_version_num')::int >= 150000") == "t" {
		schema := name("sch")
		execSQL(t, d, "CREATE SCHEMA "+schema)
		partitioned(t, d, schema+".m", 2, 5)
		refused(pub("CREATE PUBLICATION %s FOR TABLES IN SCHEMA "+schema), schema+".m", schema+".m_p1", schema+".m_p2")
		if got, err := streams(pub("CREATE PUBLICATION %s FOR TABLES IN SCHEMA " + schema + " WITH (publish_via_partition_root = true)")); err != nil || !slices.Equal(got, []string{schema + ".m"}) {
			t.Errorf("a schema via the root: %v, %v", got, err)
		}
	}
	created := name("pub")
	t.Cleanup(func() { execSQL(t, d, "DROP PUBLICATION IF EXISTS "+created) })
	if got, err := streams(created, tbl); err != nil || !slices.Equal(got, []string{tbl}) {
		t.Errorf("a created publication: %v, %v", got, err)
	}
	if v := queryOne(t, d, "SELECT pubviaroot FROM pg_publication WHERE pubname = '"+created+"'"); v != "t" {
		t.Errorf("created publication has publish_via_partition_root %s", v)
	}
}

// TestPartitionTruncate: a TRUNCATE of the partitioned table stops the
// stream with a *TruncateError naming its stream, as for any table (see
// Config.Truncates). Postgres sends no truncate of a single partition
// when the publication publishes via the root: the rows stay at the
// destination, and the stream goes on.
func TestPartitionTruncate(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("ptrunc"), name("pub"), name("slot")
	partitioned(t, d, tbl, 2, 5)
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 10 {
		t.Fatalf("snapshot sync: %+v, %v", res.Streams[tbl], err)
	}
	execSQL(t, d, fmt.Sprintf("TRUNCATE %s_p1", tbl), fmt.Sprintf("INSERT INTO %s (id, at) VALUES (100, 150)", tbl))
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 1 {
		t.Fatalf("sync over a partition's truncate: %+v, %v; want the one insert", res.Streams[tbl], err)
	}
	if got := h.rows(tbl); len(got) != 11 || got[10] != "insert 100" {
		t.Errorf("rows: %q", got)
	}
	execSQL(t, d, fmt.Sprintf("TRUNCATE %s", tbl))
	_, err := h.sync()
	var te *postgres.TruncateError
	if !errors.As(err, &te) || !slices.Equal(te.Streams, []string{tbl}) {
		t.Fatalf("sync over the table's truncate: %v, want a *TruncateError naming %s", err, tbl)
	}
}

// TestPartitionAttachedUnderRead: a partition attached after Open read
// the catalog ends a bounded Read of the change stream with a
// *SchemaChangeError (source.ErrReopen) naming it: at the relation
// message that comes with its first change, before that change is
// emitted, or, when it has no change, at the end of the Read.
func TestPartitionAttachedUnderRead(t *testing.T) {
	d := dsn(t)
	tbl, pub := name("attach"), name("pub")
	partitioned(t, d, tbl, 1, 5)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s_p2 (LIKE %s)", tbl, tbl), fmt.Sprintf("CREATE TABLE %s_p3 (LIKE %s)", tbl, tbl),
		fmt.Sprintf("INSERT INTO %s_p2 VALUES (100, 150, 'old', 0)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	ctx := context.Background()
	read := func(attach ...string) (*recordKeys, error) {
		t.Helper()
		slot := name("slot")
		dropSlotAtCleanup(t, d, slot)
		src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: time.Hour})
		splits, err := src.Open(ctx, []string{tbl}, nil)
		if err != nil {
			t.Fatal(err)
		}
		execSQL(t, d, attach...)
		rec := &recordKeys{}
		return rec, splitByID(t, splits, "slot:"+slot).Read(ctx, rec, true)
	}
	var se *postgres.SchemaChangeError
	rec, err := read(fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_p2 FOR VALUES FROM (100) TO (200)", tbl, tbl))
	if !errors.As(err, &se) || !errors.Is(err, source.ErrReopen) || se.Stream != tbl || !strings.Contains(se.Detail, tbl+"_p2 was attached") {
		t.Fatalf("bounded Read after an attach: %v (records %q), want a *SchemaChangeError naming %s_p2", err, rec.keys, tbl)
	}
	rec, err = read(fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_p3 FOR VALUES FROM (200) TO (300)", tbl, tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (200, 250, 'new', 0)", tbl))
	if !errors.As(err, &se) || !strings.Contains(se.Detail, tbl+"_p3 was attached") || len(rec.keys) != 0 {
		t.Fatalf("bounded Read after an attach and an insert into it: %v, records %q; want a *SchemaChangeError naming %s_p3 before any record",
			err, rec.keys, tbl)
	}
}

// TestPartitionDroppedBeforeItsSnapshot: a partition dropped after Open
// read the catalog, before its snapshot split read it, ends the split's
// Read with a *SchemaChangeError (source.ErrReopen) naming it; the next
// Open no longer has a split for it.
func TestPartitionDroppedBeforeItsSnapshot(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("dropped"), name("pub"), name("slot")
	partitioned(t, d, tbl, 2, 5)
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	ctx := context.Background()
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("DROP TABLE %s_p2", tbl))
	rec := &recordKeys{}
	err = splitByID(t, splits, "snapshot:"+tbl+"/"+tbl+"_p2").Read(ctx, rec, true)
	var se *postgres.SchemaChangeError
	if !errors.As(err, &se) || !errors.Is(err, source.ErrReopen) || !strings.Contains(se.Detail, tbl+"_p2 was dropped") {
		t.Fatalf("snapshot of a dropped partition: %v, want a *SchemaChangeError naming it", err)
	}
	if err := splitByID(t, splits, "snapshot:"+tbl+"/"+tbl+"_p1").Read(ctx, rec, true); err != nil || len(rec.keys) != 5 {
		t.Fatalf("snapshot of p1: %v, %d records, want 5", err, len(rec.keys))
	}
	if splits, err = src.Open(ctx, []string{tbl}, nil); err != nil || len(splits) != 2 || strings.HasSuffix(string(splits[1].ID()), "_p2") {
		t.Fatalf("Open after the drop: %d splits, %v; want the stream's and p1's", len(splits), err)
	}
}

// TestPartitionKeyless: a partitioned table without a primary key is
// read per partition in ranges of heap pages.
func TestPartitionKeyless(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("keyless"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8, at int4) PARTITION BY LIST (at)", tbl),
		fmt.Sprintf("CREATE TABLE %s_a PARTITION OF %s FOR VALUES IN (1)", tbl, tbl),
		fmt.Sprintf("CREATE TABLE %s_b PARTITION OF %s FOR VALUES IN (2)", tbl, tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 1 + g %% 2 FROM generate_series(1, 1001) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 100})
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 1001 {
		t.Fatalf("snapshot sync: %+v, %v; want 1001 rows", res.Streams[tbl], err)
	}
	st := testutil.ReadParquetTables(t, h.tables)[tbl]
	if st == nil || st.Rows != 1001 || st.DistinctIDs != 1001 {
		t.Fatalf("output %+v, want 1001 rows and ids", st)
	}
}

// TestPartitionAttachUnderWriter: a partition attached while a writer
// changes rows of every partition (moving some between partitions, and
// changing the attached partition's rows while its snapshot is read):
// the output applied in seq order equals the table.
func TestPartitionAttachUnderWriter(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("busy"), name("pub"), name("slot")
	partitioned(t, d, tbl, 2, 2000)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s_p3 (LIKE %s INCLUDING DEFAULTS)", tbl, tbl),
		fmt.Sprintf("ALTER TABLE %s_p3 ADD PRIMARY KEY (id, at)", tbl),
		fmt.Sprintf("INSERT INTO %s_p3 (id, at, v) SELECT g, 200 + g %% 100, 'p3' FROM generate_series(5001, 7000) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 100,
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	stop, wdone := make(chan struct{}), make(chan error, 1)
	txns := 0
	go func() {
		c, err := pgconn.Connect(context.Background(), d)
		if err != nil {
			wdone <- err
			return
		}
		defer c.Close(context.Background())
		rng := rand.New(rand.NewPCG(seed, 1))
		next := int64(100_000)
		for {
			select {
			case <-stop:
				wdone <- nil
				return
			default:
			}
			var sql strings.Builder
			sql.WriteString("BEGIN;")
			for range 1 + rng.IntN(10) {
				id := 1 + rng.Int64N(4000)
				if rng.IntN(3) == 0 {
					id = 5001 + rng.Int64N(2000) // p3's: no row in the table until the attach
				}
				switch rng.IntN(5) {
				case 0:
					next++
					fmt.Fprintf(&sql, "INSERT INTO %s (id, at, v) VALUES (%d, %d, 'new');", tbl, next, rng.IntN(200))
				case 1:
					fmt.Fprintf(&sql, "UPDATE %s SET at = CASE WHEN at < 100 THEN at + 100 WHEN at < 200 THEN at - 100 ELSE at END, v = 'moved' WHERE id = %d;", tbl, id)
				case 2:
					fmt.Fprintf(&sql, "DELETE FROM %s WHERE id = %d;", tbl, id)
				default:
					fmt.Fprintf(&sql, "UPDATE %s SET n = n + 1 WHERE id = %d;", tbl, id)
				}
			}
			sql.WriteString("COMMIT")
			if _, err := c.Exec(context.Background(), sql.String()).ReadAll(); err != nil {
				wdone <- err
				return
			}
			txns++
			time.Sleep(time.Millisecond)
		}
	}()
	stopWriter := sync.OnceFunc(func() { close(stop) })
	defer stopWriter()

	waitSplitDone(t, h.ckpts, fmt.Sprintf("snapshot:%s/%s_p1", tbl, tbl), done)
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_p3 FOR VALUES FROM (200) TO (300)", tbl, tbl))
	waitSplitDone(t, h.ckpts, fmt.Sprintf("snapshot:%s/%s_p3", tbl, tbl), done)
	waitConfirmed(t, d, slot, done)
	stopWriter()
	if err := <-wdone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitConfirmed(t, d, slot, done)
	out, got, ops := stopAndApply(t, h, cancel, done, tbl)
	want := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))
	sameRows(t, got, want, out)
	t.Logf("writer committed %d transactions; %d rows in the table equal the output's %d records applied in seq order (%v)",
		txns, len(want), len(out), ops)
}

// killedPartitionSnapshot makes a table of two partitions of 95 rows,
// published via its root, opens a source on it (chunks of 10), reads
// the stream's split to its end and p1's snapshot split until it is
// killed in its fourth chunk. It returns the source, the first Open's
// splits, the resume states of the stream and of p1, and p1's first
// read.
func killedPartitionSnapshot(t *testing.T, prefix string) (src *postgres.Source, splits []source.Split,
	resume map[source.SplitID][]byte, first *recordKeys, tbl, slot string) {
	t.Helper()
	d := dsn(t)
	tbl, pub := name(prefix), name("pub")
	slot = name("slot")
	partitioned(t, d, tbl, 2, 95)
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	ctx := context.Background()
	src = newSource(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 10})
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var streamState recordKeys
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, &streamState, true); err != nil {
		t.Fatal(err)
	}
	p1 := source.SplitID("snapshot:" + tbl + "/" + tbl + "_p1")
	first = &recordKeys{limit: 35}
	if err := splitByID(t, splits, string(p1)).Read(ctx, first, true); !errors.Is(err, errKilled) {
		t.Fatalf("first read: %v, want it killed", err)
	}
	resume = map[source.SplitID][]byte{source.SplitID("slot:" + slot): streamState.state, p1: first.state}
	return src, splits, resume, first, tbl, slot
}

// TestPartitionSnapshotResumes: a partition's snapshot split killed in
// its fourth chunk resumes after the third: the change stream reads that
// partition's rest in chunks under watermarks, with seqs above the slot
// snapshot's, and the split emits nothing; so is the whole of a
// partition whose split had no state yet.
func TestPartitionSnapshotResumes(t *testing.T) {
	src, splits, resume, first, tbl, slot := killedPartitionSnapshot(t, "presume")
	ctx := context.Background()
	if len(splits) != 3 {
		t.Fatalf("%d splits, want the stream's and one per partition", len(splits))
	}
	p1, p2 := source.SplitID("snapshot:"+tbl+"/"+tbl+"_p1"), source.SplitID("snapshot:"+tbl+"/"+tbl+"_p2")
	d := dsn(t)
	execSQL(t, d, "SELECT pg_logical_emit_message(false, 'openetl.test', '')") // some WAL since the slot's snapshot
	var err error
	if splits, err = src.Open(ctx, []string{tbl}, resume); err != nil {
		t.Fatal(err)
	}
	handed, rest, other := &recordKeys{}, &recordKeys{}, &recordKeys{}
	if err := splitByID(t, splits, string(p1)).Read(ctx, handed, true); err != nil {
		t.Fatal(err)
	}
	if len(handed.keys) != 0 {
		t.Fatalf("the handed-over split emitted %d rows", len(handed.keys))
	}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rest, true); err != nil {
		t.Fatal(err)
	}
	if err := splitByID(t, splits, string(p2)).Read(ctx, other, true); err != nil {
		t.Fatal(err)
	}
	if len(other.keys) != 0 {
		t.Fatalf("p2's split, handed over with no state, emitted %d rows", len(other.keys))
	}
	all := append(slices.Clone(first.keys[:30]), rest.keys...)
	seen := map[string]bool{}
	for _, k := range all {
		seen[k] = true
	}
	if len(all) != 190 || len(seen) != 190 {
		t.Fatalf("%d rows, %d distinct over p1's first read and the stream; want both partitions' 190", len(all), len(seen))
	}
	snap := first.seqs[0]
	for _, s := range rest.seqs {
		if s <= snap {
			t.Fatalf("resumed row seq %d, want above the slot snapshot's %d", s, snap)
		}
	}
}

// TestPartitionDetachedWhileHanded: a partition whose snapshot's rest
// was handed to the change stream and is detached before the stream
// reads it is no longer the table's: the job reads none of its rows
// (each chunk checks, under its own snapshot, that the leaf is still
// under the root) and ends, and the next Open has no split for it.
func TestPartitionDetachedWhileHanded(t *testing.T) {
	src, _, resume, _, tbl, slot := killedPartitionSnapshot(t, "pdetach")
	ctx := context.Background()
	d := dsn(t)
	p1 := source.SplitID("snapshot:" + tbl + "/" + tbl + "_p1")
	splits, err := src.Open(ctx, []string{tbl}, resume)
	if err != nil {
		t.Fatal(err)
	}
	if splits, err = src.Open(ctx, []string{tbl}, resume); err != nil {
		t.Fatal(err)
	}
	handed := &recordKeys{}
	if err := splitByID(t, splits, string(p1)).Read(ctx, handed, true); err != nil || len(handed.keys) != 0 {
		t.Fatalf("the handed-over split: %d rows, %v", len(handed.keys), err)
	}
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s_p1", tbl, tbl))
	rest := &recordKeys{}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rest, true); err != nil {
		t.Fatal(err)
	}
	// The stream reads p2 (its split had no state: handed over whole)
	// and none of p1's rows (ids 1 to 95; p2's are 96 to 190).
	p2rows := 0
	for _, k := range rest.keys {
		id, _, _ := strings.Cut(strings.Fields(k)[2], "|")
		if n, _ := strconv.Atoi(id); n <= 95 {
			t.Fatalf("the stream read a row of the detached partition: %q", k)
		}
		p2rows++
	}
	if p2rows != 95 {
		t.Fatalf("the stream read %d rows of p2, want its 95", p2rows)
	}
	resume[source.SplitID("slot:"+slot)] = rest.state
	if splits, err = src.Open(ctx, []string{tbl}, resume); err != nil {
		t.Fatal(err)
	}
	// Detached, p1 is no longer one of the table's partitions: the next
	// Open has no split for it (its rows read before the kill stay).
	for _, sp := range splits {
		if sp.ID() == p1 {
			t.Fatalf("the Open after the detach still has a split for %s", p1)
		}
	}
}
