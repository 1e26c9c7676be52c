package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// recordKeys is an Emitter that keeps each record's stream, op and
// decoded key text, and the last resume state per call; it fails with
// errKilled after limit records (0: no limit).
type recordKeys struct {
	limit int
	keys  []string
	seqs  []int64
	vals  []string // each record's payload values, joined by "|"
	state []byte
}

var errKilled = errors.New("killed")

func (r *recordKeys) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	if r.limit > 0 && len(r.keys) >= r.limit {
		return errKilled
	}
	k, err := joinRow(key)
	if err != nil {
		return err
	}
	v, err := joinRow(payload)
	if err != nil {
		return err
	}
	r.keys = append(r.keys, stream+" "+op.String()+" "+k)
	r.seqs = append(r.seqs, seq)
	r.vals = append(r.vals, v)
	return nil
}

// joinRow joins an encoded row's values (their text) with "|".
func joinRow(b []byte) (string, error) {
	if len(b) == 0 {
		return "", nil
	}
	vals, err := source.DecodeRow(nil, b)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, v := range vals {
		parts = append(parts, string(v.Text))
	}
	return strings.Join(parts, "|"), nil
}

func (r *recordKeys) ResumePoint(st []byte) error { r.state = slices.Clone(st); return nil }

// afterSnapshot reads the snapshot splits of a first Open's splits to
// their end and returns their states with the stream's: a later Open
// given them reads the stream's changes alone, as a checkpoint taken
// once the snapshot is done would. (Given the stream's state alone, a
// later Open hands each snapshot to the stream, which reads the table.)
func afterSnapshot(t *testing.T, splits []source.Split, streamID string, streamState []byte) map[source.SplitID][]byte {
	t.Helper()
	resume := map[source.SplitID][]byte{source.SplitID(streamID): streamState}
	for _, sp := range splits {
		if sp.ID() == source.SplitID(streamID) {
			continue
		}
		rec := &recordKeys{}
		if err := sp.Read(context.Background(), rec, true); err != nil {
			t.Fatalf("%s: %v", sp.ID(), err)
		}
		resume[sp.ID()] = rec.state
	}
	return resume
}

// splitByID returns the split of that ID.
func splitByID(t *testing.T, splits []source.Split, id string) source.Split {
	t.Helper()
	for _, sp := range splits {
		if string(sp.ID()) == id {
			return sp
		}
	}
	t.Fatalf("no split %q among %d", id, len(splits))
	return nil
}

// TestSnapshotResumesAfterLastChunk: a snapshot split killed in its
// fourth chunk resumes after the third, for a table with a composite key
// and for one without a key (ctid ranges): together the two reads hold
// every row exactly once. The keyless table's rows all carry the slot
// snapshot's seq. The keyed table's rest is read by the change stream
// in chunks under watermarks (the first snapshot is gone), each chunk's
// rows with its watermark's seq, above the slot snapshot's; the split
// emits nothing meanwhile, and is done once a later Open finds the
// stream's job finished.
func TestSnapshotResumesAfterLastChunk(t *testing.T) {
	d := dsn(t)
	keyed, keyless, pub, slot := name("chunked"), name("heap"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (a int4, b text, v text, PRIMARY KEY (a, b))", keyed),
		fmt.Sprintf("INSERT INTO %s SELECT g / 3, 'k' || (g %% 3), 'v' || g FROM generate_series(1, 95) g", keyed),
		fmt.Sprintf("CREATE TABLE %s (v text)", keyless),
		fmt.Sprintf("INSERT INTO %s SELECT repeat('x', 200) || g FROM generate_series(1, 3000) g", keyless),
		fmt.Sprintf("ANALYZE %s", keyless),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", pub, keyed, keyless))
	dropSlotAtCleanup(t, d, slot)
	ctx := context.Background()
	for _, tc := range []struct {
		table string
		rows  int
		chunk int
	}{{keyed, 95, 10}, {keyless, 3000, 200}} {
		t.Run(strings.SplitN(tc.table, "_", 2)[0], func(t *testing.T) {
			src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: tc.chunk})
			splits, err := src.Open(ctx, []string{tc.table}, nil)
			if err != nil {
				t.Fatal(err)
			}
			stream := splitByID(t, splits, "slot:"+slot)
			var streamState recordKeys
			if err := stream.Read(ctx, &streamState, true); err != nil {
				t.Fatal(err)
			}
			first := &recordKeys{limit: 3*tc.chunk + tc.chunk/2}
			err = splitByID(t, splits, "snapshot:"+tc.table).Read(ctx, first, true)
			if !errors.Is(err, errKilled) {
				t.Fatalf("first read: %v, want it killed", err)
			}
			var st struct {
				Seq  int64
				Done bool
			}
			if err := json.Unmarshal(first.state, &st); err != nil || st.Done {
				t.Fatalf("state at the kill %s: %v", first.state, err)
			}
			// What the first read emitted after its last resume point is
			// not committed: the resumed read starts after the last chunk.
			committed := first.keys
			if tc.table == keyed {
				committed = first.keys[:3*tc.chunk]
			}
			resume := map[source.SplitID][]byte{"slot:" + source.SplitID(slot): streamState.state, "snapshot:" + source.SplitID(tc.table): first.state}
			splits, err = src.Open(ctx, []string{tc.table}, resume)
			if err != nil {
				t.Fatal(err)
			}
			rest := &recordKeys{}
			if err := splitByID(t, splits, "snapshot:"+tc.table).Read(ctx, rest, true); err != nil {
				t.Fatal(err)
			}
			var chunked *recordKeys // the stream's rows: the keyed table's rest
			if tc.table == keyed {
				if len(rest.keys) != 0 || string(rest.state) != string(first.state) {
					t.Fatalf("handed over, the split emitted %d rows and state %s, want none and %s", len(rest.keys), rest.state, first.state)
				}
				// Status: the handed split reports the table's snapshot
				// as in progress while its job waits, nothing once done.
				rep := splitByID(t, splits, "snapshot:"+tc.table).(source.SnapshotReporter)
				if stream, done, _, ok := rep.SnapshotProgress(); !ok || stream != tc.table || done != int64(3*tc.chunk) {
					t.Errorf("handed split's progress before its job: %q, %d rows, %v; want %q, %d, true", stream, done, ok, tc.table, 3*tc.chunk)
				}
				chunked = &recordKeys{}
				if err := splitByID(t, splits, "slot:"+slot).Read(ctx, chunked, true); err != nil {
					t.Fatal(err)
				}
				if _, _, _, ok := rep.SnapshotProgress(); ok {
					t.Error("handed split's progress after its job: still in progress")
				}
				for _, s := range chunked.seqs {
					if s <= st.Seq {
						t.Fatalf("a row read by the stream has seq %d, want above the slot snapshot's %d", s, st.Seq)
					}
				}
				// Done at the next Open, which hands nothing over again,
				// even once the table has lost its key (a split handed
				// over and finished is done whatever its table is now).
				execSQL(t, d, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s_pkey", keyed, keyed))
				resume["slot:"+source.SplitID(slot)] = chunked.state
				splits, err = src.Open(ctx, []string{tc.table}, resume)
				if err != nil {
					t.Fatal(err)
				}
				rest = &recordKeys{}
				if err := splitByID(t, splits, "snapshot:"+tc.table).Read(ctx, rest, true); err != nil {
					t.Fatal(err)
				}
				again := &recordKeys{}
				if err := splitByID(t, splits, "slot:"+slot).Read(ctx, again, true); err != nil {
					t.Fatal(err)
				}
				if len(rest.keys)+len(again.keys) != 0 {
					t.Fatalf("after the job: the split emitted %d rows, the stream %d, want none", len(rest.keys), len(again.keys))
				}
				rest.keys, rest.seqs = chunked.keys, nil
			}
			all := append(slices.Clone(committed), rest.keys...)
			if tc.table == keyed {
				seen := map[string]int{}
				for _, k := range all {
					seen[k]++
				}
				if len(all) != tc.rows || len(seen) != tc.rows {
					t.Fatalf("%d rows, %d distinct keys after the resume, want %d each", len(all), len(seen), tc.rows)
				}
				// Key order across the kill.
				if got, want := rest.keys[0], fmt.Sprintf("%s insert 10|k1", tc.table); got != want {
					t.Errorf("resumed at %q, want %q", got, want)
				}
			} else {
				// Page ranges: every row of the pages read before the
				// kill's range, then the rest; no key, so count rows.
				if len(committed)+len(rest.keys) < tc.rows {
					t.Fatalf("%d + %d rows, want at least %d", len(committed), len(rest.keys), tc.rows)
				}
			}
			for _, s := range append(first.seqs, rest.seqs...) {
				if s != st.Seq {
					t.Fatalf("snapshot row seq %d, want the slot snapshot's %d", s, st.Seq)
				}
			}
			var done struct{ Done bool }
			if err := json.Unmarshal(rest.state, &done); err != nil || !done.Done {
				t.Errorf("final state %s, want done", rest.state)
			}
		})
	}
}

// TestSnapshotWithoutStateHandedOver: in an attempt after the one that
// made the slot, a snapshot split with no state (the attempt before
// ended before its first chunk was checkpointed) and the split of a
// table opened only now are each handed to the change stream whole. The
// splits emit nothing; the stream reads both tables in chunks under
// watermarks, every row above the slot snapshot's seq and as it was at
// its own seq (a new snapshot of the split's own would give rows the
// slot snapshot's seq and values changed since); applied in seq order,
// the stream's records equal each table. The next Open finds both
// splits done.
func TestSnapshotWithoutStateHandedOver(t *testing.T) {
	d := dsn(t)
	a, b, pub, slot := name("nostate"), name("added"), name("pub"), name("slot")
	for _, tbl := range []string{a, b} {
		execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, n int8)", tbl),
			fmt.Sprintf("INSERT INTO %s SELECT g, 0 FROM generate_series(1, 120) g", tbl))
	}
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", pub, a, b))
	dropSlotAtCleanup(t, d, slot)
	ctx := context.Background()
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 25})
	splits, err := src.Open(ctx, []string{a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := &recordKeys{}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, first, true); err != nil {
		t.Fatal(err)
	}
	snap := postgres.StateSnapshot(first.state)
	if snap == 0 {
		t.Fatalf("the stream's state %x has no snapshot position", first.state)
	}
	// Changes after the slot's snapshot, before either table is read.
	for _, tbl := range []string{a, b} {
		execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 1 WHERE id %% 3 = 0", tbl))
	}
	execSQL(t, d, fmt.Sprintf("DELETE FROM %s WHERE id %% 10 = 1", a))

	streams := []string{a, b}
	resume := map[source.SplitID][]byte{"slot:" + source.SplitID(slot): first.state}
	if splits, err = src.Open(ctx, streams, resume); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range streams {
		id := "snapshot:" + tbl
		rec := &recordKeys{}
		if err := splitByID(t, splits, id).Read(ctx, rec, true); err != nil {
			t.Fatal(err)
		}
		if len(rec.keys) != 0 || rec.state == nil {
			t.Fatalf("%s handed over: %d rows, state %q; want none and its state", id, len(rec.keys), rec.state)
		}
		resume[source.SplitID(id)] = rec.state
		// Status: the table's snapshot in progress, none of it read.
		rep := splitByID(t, splits, id).(source.SnapshotReporter)
		if stream, done, _, ok := rep.SnapshotProgress(); !ok || stream != tbl || done != 0 {
			t.Errorf("%s's progress before its job: %q, %d rows, %v; want %q, 0, true", id, stream, done, ok, tbl)
		}
	}
	rest := &recordKeys{}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rest, true); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range streams {
		if _, _, _, ok := splitByID(t, splits, "snapshot:"+tbl).(source.SnapshotReporter).SnapshotProgress(); ok {
			t.Errorf("snapshot:%s's progress after its job: still in progress", tbl)
		}
	}
	for _, tbl := range streams {
		// Each key's records in seq order (the stream emits in seq
		// order); n only rises, so it never falls from one to the next.
		last, read := map[string]string{}, 0
		for i, k := range rest.keys {
			f := strings.Fields(k)
			if f[0] != tbl {
				continue
			}
			if f[1] == "delete" {
				delete(last, f[2])
				continue
			}
			if f[1] == "insert" {
				read++
				if rest.seqs[i] <= snap {
					t.Fatalf("%s: row %s read by the stream with seq %d, want above the slot snapshot's %d", tbl, f[2], rest.seqs[i], snap)
				}
			}
			if p, ok := last[f[2]]; ok && rest.vals[i] < p {
				t.Fatalf("%s: row %s falls from %q to %q at seq %d", tbl, f[2], p, rest.vals[i], rest.seqs[i])
			}
			last[f[2]] = rest.vals[i]
		}
		want := map[string]string{}
		for _, r := range queryRows(t, d, fmt.Sprintf("SELECT id, id || '|' || n FROM %s", tbl)) {
			want[r[0]] = r[1]
		}
		if read != len(want) || !maps.Equal(last, want) {
			t.Fatalf("%s: the stream read %d rows; applied in seq order its records give %d rows, want the table's %d (equal: %v)",
				tbl, read, len(last), len(want), maps.Equal(last, want))
		}
	}

	resume["slot:"+source.SplitID(slot)] = rest.state
	if splits, err = src.Open(ctx, streams, resume); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range streams {
		rec := &recordKeys{}
		if err := splitByID(t, splits, "snapshot:"+tbl).Read(ctx, rec, true); err != nil {
			t.Fatal(err)
		}
		var st struct{ Done bool }
		if err := json.Unmarshal(rec.state, &st); err != nil || !st.Done || len(rec.keys) != 0 {
			t.Fatalf("snapshot:%s at the next Open: %d rows, state %s; want none and done", tbl, len(rec.keys), rec.state)
		}
	}
	again := &recordKeys{}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, again, true); err != nil || len(again.keys) != 0 {
		t.Fatalf("the stream at the next Open: %d records, %v; want none", len(again.keys), err)
	}
}

// TestKeylessPagesExact: reading a keyless table in page ranges with a
// resume point after each range emits every row exactly once.
func TestKeylessPagesExact(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("pages"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT 'row ' || g FROM generate_series(1, 5000) g", tbl),
		fmt.Sprintf("ANALYZE %s", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 300})
	splits, err := src.Open(context.Background(), []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &payloadRecorder{}
	if err := splitByID(t, splits, "snapshot:"+tbl).Read(context.Background(), rec, true); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range rec.payloads {
		vals, err := source.DecodeRow(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(vals[0].Text)] = true
	}
	if len(rec.payloads) != 5000 || len(seen) != 5000 || rec.resumePoints < 5 {
		t.Fatalf("%d rows, %d distinct, %d resume points; want 5000, 5000, several", len(rec.payloads), len(seen), rec.resumePoints)
	}
}

type payloadRecorder struct {
	payloads     [][]byte
	resumePoints int
}

func (r *payloadRecorder) Record(_ string, _ source.Op, _ int64, _, payload []byte) error {
	r.payloads = append(r.payloads, slices.Clone(payload))
	return nil
}

func (r *payloadRecorder) ResumePoint([]byte) error { r.resumePoints++; return nil }

// TestToastFilledFromFullOldRow: under REPLICA IDENTITY FULL an update
// that leaves a TOASTed column alone arrives with the column's value.
func TestToastFilledFromFullOldRow(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("toastfull"), name("pub"), name("slot")
	big := strings.Repeat("y", 100000)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, big text, n int4)", tbl),
		fmt.Sprintf("ALTER TABLE %s ALTER big SET STORAGE EXTERNAL", tbl),
		fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, repeat('y', 100000), 1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	ctx := context.Background()
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 2 WHERE id = 1", tbl))
	splits, err = src.Open(ctx, []string{tbl}, afterSnapshot(t, splits, "slot:"+slot, rec.state))
	if err != nil {
		t.Fatal(err)
	}
	rec.payloads = nil
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	if len(rec.payloads) != 1 {
		t.Fatalf("read %d changes, want 1", len(rec.payloads))
	}
	vals, err := source.DecodeRow(nil, rec.payloads[0])
	if err != nil || len(vals) != 3 {
		t.Fatalf("payload: %v", err)
	}
	if string(vals[0].Text) != "1" || vals[1].Unchanged || string(vals[1].Text) != big || string(vals[2].Text) != "2" {
		t.Errorf("update decoded as id %s, big unchanged=%v len %d, n %s; want 1, the whole value, 2",
			vals[0].Text, vals[1].Unchanged, len(vals[1].Text), vals[2].Text)
	}
}

// TestTruncate: a truncate of a read table stops the sync with a
// *TruncateError naming it (the changes before it committed); with
// TruncateIgnore the sync goes on past it.
func TestTruncate(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("trunc"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1), (2)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 2 {
		t.Fatalf("snapshot sync: %+v, %v", res.Streams[tbl], err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (3)", tbl), fmt.Sprintf("TRUNCATE %s", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (4)", tbl))
	_, err := h.sync()
	var te *postgres.TruncateError
	if !errors.As(err, &te) || !slices.Equal(te.Streams, []string{tbl}) {
		t.Fatalf("sync over a truncate: %v, want a *TruncateError naming %s", err, tbl)
	}
	h.cfg.Truncates = postgres.TruncateIgnore
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	// Row 3 was committed before the failed sync stopped, or is read now;
	// row 4 comes after the truncate.
	if got := h.rows(tbl); !slices.Contains(got, "insert 3") || !slices.Contains(got, "insert 4") {
		t.Errorf("rows after ignoring the truncate: %v (last sync %+v)", got, res.Streams[tbl])
	}
}

// TestSchemaChange: a column added between syncs is declared by the
// next one (the rows streamed from before the change have it null); one
// added while a pipeline runs ends its attempt with a *SchemaChangeError
// (a source.ErrReopen), and Run goes on in a new attempt that declares
// the column and carries on from the last checkpoint.
func TestSchemaChange(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("ddl"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, a text)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, 'one')", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (2, 'two')", tbl),
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN b int8", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (3, 'three', 33)", tbl),
		fmt.Sprintf("UPDATE %s SET b = 11 WHERE id = 1", tbl))
	if _, err := h.sync(); err != nil {
		t.Fatalf("sync after ADD COLUMN: %v", err)
	}

	// While running: Run goes on past the change, in a new attempt.
	var logs strings.Builder
	h.logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	// The syncs' walsender may still be going away: the slot active
	// again is the run's.
	testutil.Until(t, "slot "+slot+" released by the syncs", func() bool {
		return queryOne(t, d, "SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'") == "f"
	})
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	waitStreaming(t, d, slot, done) // it discovered the table before the change
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (4, 'four', 44)", tbl),
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN c text", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (5, 'five', 55, 'cinq')", tbl))
	waitConfirmed(t, d, slot, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run over ADD COLUMN: %v", err)
	}
	if !strings.Contains(logs.String(), "starting a new attempt") || !strings.Contains(logs.String(), `column \"c\"`) {
		t.Errorf("the new attempt was not logged with the change: %s", logs.String())
	}
	var got []string
	for _, r := range readRows(t, h.tables, tbl) {
		got = append(got, fmt.Sprintf("%v %v %v %v %v", r["_openetl_op"], r["id"], r["a"], r["b"], r["c"]))
	}
	want := []string{"insert 1 one <nil> <nil>", "insert 2 two <nil> <nil>", "insert 3 three 33 <nil>", "update 1 one 11 <nil>",
		"insert 4 four 44 <nil>", "insert 5 five 55 cinq"}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n%q\nwant\n%q", got, want)
	}
}

// TestQuietTablesConfirmWAL: while the pipeline's tables are quiet and
// other tables write, the slot's confirmed position keeps up with the
// WAL (keepalives between transactions are resume points), so the slot
// does not hold WAL back.
func TestQuietTablesConfirmWAL(t *testing.T) {
	d := dsn(t)
	tbl, other, pub, slot := name("quiet"), name("busy"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl),
		fmt.Sprintf("CREATE TABLE %s (id serial PRIMARY KEY, v text)", other),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	waitStreaming(t, d, slot, done)
	for i := 0; i < 20; i++ {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s (v) SELECT repeat('w', 1000) FROM generate_series(1, 50)", other))
	}
	waitConfirmed(t, d, slot, done)
	if c := h.lastCounts(tbl); c != 0 {
		t.Errorf("quiet table read %d rows", c)
	}
}

// tablesDir returns a directory for a harness.
func tablesDir(t *testing.T) (string, string) {
	dir := t.TempDir()
	return filepath.Join(dir, "tables"), filepath.Join(dir, "checkpoints")
}

// TestTableAddedLater: a table added to the publication after the
// pipeline started gets its own snapshot at the next sync, and its
// changes stream from then on; the first table's stream goes on.
func TestTableAddedLater(t *testing.T) {
	d := dsn(t)
	a, b, pub, slot := name("first"), name("later"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", a), fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", b),
		fmt.Sprintf("INSERT INTO %s VALUES (1)", a), fmt.Sprintf("INSERT INTO %s VALUES (1), (2)", b),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, a))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (2)", a), fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, b),
		fmt.Sprintf("INSERT INTO %s VALUES (3)", b))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("DELETE FROM %s WHERE id = 1", b))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if got, want := h.rows(a), []string{"insert 1", "insert 2"}; !slices.Equal(got, want) {
		t.Errorf("%s: %q, want %q", a, got, want)
	}
	// Row 3 of the added table may come twice (its snapshot and its
	// insert, see the package doc); applied in seq order, the rows are
	// 2 and 3.
	live := map[string]bool{}
	for _, r := range h.rows(b) {
		op, id, _ := strings.Cut(r, " ")
		live[id] = op != "delete"
	}
	if !live["2"] || !live["3"] || live["1"] {
		t.Errorf("%s applied: %v (rows %q), want 2 and 3", b, live, h.rows(b))
	}
}

// TestTableAddedWhileRunning: a table added to the publication while a
// pipeline runs ends the attempt (a source.ErrReopen), and Run goes on
// in a new attempt that snapshots the table beside the stream.
func TestTableAddedWhileRunning(t *testing.T) {
	d := dsn(t)
	a, b, pub, slot := name("first"), name("later"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", a), fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", b),
		fmt.Sprintf("INSERT INTO %s VALUES (1)", a), fmt.Sprintf("INSERT INTO %s VALUES (1), (2)", b),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, a))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
	var logs strings.Builder
	h.logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	waitConfirmed(t, d, slot, done)
	execSQL(t, d, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, b),
		fmt.Sprintf("INSERT INTO %s VALUES (3)", b), fmt.Sprintf("INSERT INTO %s VALUES (2)", a))
	// The running attempt meets the new table's relation message, and
	// the runner starts a new one by itself, which streams on.
	waitConfirmed(t, d, slot, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run over an added table: %v", err)
	}
	if !strings.Contains(logs.String(), "starting a new attempt") || !strings.Contains(logs.String(), "table added to the publication") {
		t.Fatalf("the run did not start a new attempt for the added table: %s", logs.String())
	}
	// A stop can come before the new attempt's snapshots committed: a
	// sync finishes them.
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	// Applied in seq order (a snapshot read in the second attempt, under
	// a new snapshot, can hold a row its stream also inserts: see the
	// package doc), each table equals the source.
	for tbl, want := range map[string]string{a: "1 2", b: "1 2 3"} {
		live := map[string]bool{}
		for _, r := range h.rows(tbl) {
			op, id, _ := strings.Cut(r, " ")
			live[id] = op != "delete"
		}
		var got []string
		for id, ok := range live {
			if ok {
				got = append(got, id)
			}
		}
		slices.Sort(got)
		if strings.Join(got, " ") != want {
			t.Errorf("%s applied: %v (rows %q), want %s", tbl, got, h.rows(tbl), want)
		}
	}
}

// waitStreaming waits until a walsender streams from slot (the run
// discovered its tables, claimed and opened its split), failing if the
// run ends first.
func waitStreaming(t *testing.T, d, slot string, done chan error) {
	t.Helper()
	testutil.Until(t, "replication from slot "+slot, func() bool {
		select {
		case err := <-done:
			done <- err // for the caller's deferred wait
			t.Fatalf("run ended before it streamed from slot %s: %v", slot, err)
		default:
		}
		return queryOne(t, d, "SELECT COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "t"
	})
}

// waitConfirmed waits until slot has confirmed the WAL written so far,
// which the runner acknowledges only once the epoch holding it and the
// next one are committed (the next needs more WAL: a heartbeat), failing
// if the run ends first.
func waitConfirmed(t *testing.T, d, slot string, done chan error) {
	t.Helper()
	// A slot created after now would confirm a later position at once.
	testutil.Until(t, "slot "+slot+" to exist", func() bool {
		return queryOne(t, d, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"'") != "0"
	})
	lsn := queryOne(t, d, "SELECT pg_current_wal_insert_lsn()")
	defer func() {
		if t.Failed() {
			t.Logf("slot %s confirmed %s, waiting for %s", slot,
				queryOne(t, d, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '"+slot+"'"), lsn)
		}
	}()
	testutil.Until(t, "slot "+slot+" to confirm "+lsn, func() bool {
		select {
		case err := <-done:
			done <- err // for the caller's deferred wait
			t.Fatalf("run ended before the slot confirmed %s: %v", lsn, err)
		default:
		}
		return queryOne(t, d, "SELECT COALESCE((SELECT confirmed_flush_lsn >= '"+lsn+"' FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "t"
	})
}

// syncWriter serializes writes to w (a log handler's output).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestSlotLostAndTeardown: with OnPositionLost set to PositionLostResnapshot, a dropped slot
// makes the next sync start over with a new snapshot instead of failing;
// and Teardown drops the slot and the publication the source created.
func TestSlotLostAndTeardown(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("lost"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, CreatePublication: true, Tables: []string{tbl}, Slot: slot})
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, "SELECT pg_drop_replication_slot('"+slot+"')", fmt.Sprintf("INSERT INTO %s VALUES (2)", tbl))
	if _, err := h.sync(); !errors.Is(err, postgres.ErrSlotMissing) {
		t.Fatalf("sync without the slot: %v, want ErrSlotMissing", err)
	}
	h.cfg.OnPositionLost = source.PositionLostResnapshot
	res, err := h.sync()
	if err != nil || res.Streams[tbl].Read != 2 {
		t.Fatalf("resnapshot sync: %+v, %v; want both rows read again", res.Streams[tbl], err)
	}
	src := newSource(t, d, h.cfg)
	if err := src.Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := queryOne(t, d, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"'"); n != "0" {
		t.Errorf("slot still there after Teardown")
	}
	if n := queryOne(t, d, "SELECT count(*) FROM pg_publication WHERE pubname = '"+pub+"'"); n != "0" {
		t.Errorf("publication still there after Teardown")
	}
}

// TestIntervalHeld: sink/parquet can't write intervals, so an interval
// column's values are held (kept under the pipeline's _held/ files)
// rather than failing the sync or being dropped; the other columns land,
// and a schema.blocked event (change "held") names the column.
func TestIntervalHeld(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("ival"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, span interval, note text)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, '1 year 2 mons 3 days 04:05:06.789012', 'a'), (2, NULL, 'b')", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	events := newEventLog()
	h.onEvent = events.add
	if _, err := h.sync(); err != nil {
		t.Fatalf("sync with an interval column: %v", err)
	}
	var blocked []string
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSchemaBlocked {
			blocked = append(blocked, e.Stream+"."+e.Column+" "+e.Change)
		}
	}
	if want := []string{tbl + ".span held"}; !slices.Equal(blocked, want) {
		t.Errorf("schema.blocked events %q, want %q", blocked, want)
	}
	if got := h.rows(tbl); !slices.Equal(got, []string{"insert 1", "insert 2"}) {
		t.Errorf("rows %q", got)
	}
	var held []string
	filepath.WalkDir(h.ckpts, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.Contains(p, "_held") {
			b, _ := os.ReadFile(p)
			held = append(held, string(b))
		}
		return nil
	})
	if all := strings.Join(held, ""); !strings.Contains(all, "span") || !strings.Contains(all, "1 year 2 mons 3 days 04:05:06.789012") {
		t.Errorf("held files %q, want the interval value", held)
	}
}

// progressEmitter asks the split for its snapshot progress at every
// record.
type progressEmitter struct {
	sp interface {
		SnapshotProgress() (string, int64, int64, bool)
	}
	seen []int64
	est  int64
}

func (p *progressEmitter) Record(string, source.Op, int64, []byte, []byte) error {
	_, done, est, ok := p.sp.SnapshotProgress()
	if ok {
		p.seen = append(p.seen, done)
		p.est = est
	}
	return nil
}

func (p *progressEmitter) ResumePoint([]byte) error { return nil }

// TestProgressAndLag: a snapshot split reports rows copied and the
// table's estimate while it copies, and not once done; the change stream
// reports its WAL lag in bytes.
func TestProgressAndLag(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("prog"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT generate_series(1, 1000)", tbl), fmt.Sprintf("ANALYZE %s", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 100})
	ctx := context.Background()
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := splitByID(t, splits, "snapshot:"+tbl)
	pe := &progressEmitter{sp: snap.(interface {
		SnapshotProgress() (string, int64, int64, bool)
	})}
	if err := snap.Read(ctx, pe, true); err != nil {
		t.Fatal(err)
	}
	if len(pe.seen) != 1000 || pe.seen[0] != 0 || pe.seen[999] != 999 || pe.est != 1000 {
		t.Errorf("progress: %d reports, first %v, estimate %d; want 1000 from 0 to 999 of 1000", len(pe.seen), pe.seen[:min(3, len(pe.seen))], pe.est)
	}
	if _, _, _, ok := pe.sp.SnapshotProgress(); ok {
		t.Error("a finished snapshot split still reports progress")
	}
	stream := splitByID(t, splits, "slot:"+slot).(interface {
		Lag() (int64, string, time.Duration, bool)
	})
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (1001)", tbl))
	if err := splits[0].Read(ctx, &recordKeys{}, true); err != nil {
		t.Fatal(err)
	}
	// Caught up with the server's position as of its last message (other
	// sessions may write a little WAL meanwhile).
	if behind, unit, _, ok := stream.Lag(); !ok || unit != "byte" || behind < 0 || behind > 1<<16 {
		t.Errorf("lag after a bounded read: %d %s ok=%v, want about 0 bytes", behind, unit, ok)
	}
}

// TestStreamedTransactions: with protocol 2 (the default on Postgres 14+)
// and a tiny logical_decoding_work_mem the server streams large
// transactions while they run; the source buffers them (spilling to a
// file past StreamedTxnMemory) and emits them at their commit, without the
// changes of a rolled-back savepoint or of an aborted transaction, and
// beside small transactions that commit before and after them.
func TestStreamedTransactions(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("streamed"), name("pub"), name("slot")
	h, run := streamingSetup(t, d, tbl, pub, slot)
	run(fmt.Sprintf("BEGIN; INSERT INTO %s SELECT g, repeat('a', 100) FROM generate_series(1, 3000) g", tbl))
	run(fmt.Sprintf("SAVEPOINT s1; INSERT INTO %s SELECT g, 'gone' FROM generate_series(10001, 12000) g; ROLLBACK TO SAVEPOINT s1", tbl))
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (50000, 'first')", tbl)) // commits before the big one
	run(fmt.Sprintf("UPDATE %s SET v = 'u' WHERE id <= 1000; COMMIT", tbl))
	run(fmt.Sprintf("BEGIN; INSERT INTO %s SELECT g, repeat('b', 100) FROM generate_series(20001, 23000) g; ROLLBACK", tbl))
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (50001, 'last')", tbl))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if n := queryOne(t, d, "SELECT COALESCE(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = '"+slot+"'"); n == "0" {
		t.Fatal("the server streamed no transaction: the test does not exercise protocol 2 streaming")
	}
	rows := h.rows(tbl)
	count := map[string]int{}
	for _, r := range rows {
		op, id, _ := strings.Cut(r, " ")
		var n int
		fmt.Sscan(id, &n)
		switch {
		case n > 10000 && n < 50000:
			t.Fatalf("row %s of a rolled-back savepoint or an aborted transaction landed", r)
		case n < 50000:
			count[op]++
		}
	}
	if len(rows) != 4002 || count["insert"] != 3000 || count["update"] != 1000 {
		t.Fatalf("%d rows (%v), want 3000 inserts and 1000 updates of the big transaction and 2 small inserts", len(rows), count)
	}
	// Seqs are change positions: within the big transaction each row's
	// update follows its insert.
	if i, u := slices.Index(rows, "insert 7"), slices.Index(rows, "update 7"); i < 0 || u < i {
		t.Errorf("insert 7 at %d, update 7 at %d in seq order", i, u)
	}
}

// TestStreamedTransactionOpenAcrossRestart: a sync ends while a large
// transaction the server streams in progress is still open, at the
// commit of a small one that committed inside it; the next sync, a new
// session, restarts from there and receives the large transaction whole
// at its commit, and a change after it whose table's relation message
// came inside the streamed transaction (the server counts it as sent
// once that transaction commits). Every change lands exactly once.
func TestStreamedTransactionOpenAcrossRestart(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("streamopen"), name("pub"), name("slot")
	h, run := streamingSetup(t, d, tbl, pub, slot)
	streamed := func() string {
		return queryOne(t, d, "SELECT COALESCE(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = '"+slot+"'")
	}
	run(fmt.Sprintf("BEGIN; INSERT INTO %s SELECT g, repeat('a', 100) FROM generate_series(1, 3000) g", tbl))
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (50000, 'during')", tbl))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if got := h.rows(tbl); !slices.Equal(got, []string{"insert 50000"}) {
		t.Fatalf("after the sync with the big transaction open: %v, want only insert 50000", got)
	}
	if n := streamed(); n == "0" {
		t.Fatal("the server streamed no transaction while the big one was open: the test does not exercise a restart inside one")
	}
	run(fmt.Sprintf("UPDATE %s SET v = 'u' WHERE id <= 1000; COMMIT", tbl))
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (50001, 'after')", tbl))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	rows := h.rows(tbl)
	count := map[string]int{}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r] {
			t.Fatalf("%s landed twice", r)
		}
		seen[r] = true
		op, _, _ := strings.Cut(r, " ")
		count[op]++
	}
	if len(rows) != 4002 || count["insert"] != 3002 || count["update"] != 1000 || !seen["insert 50001"] {
		t.Fatalf("%d rows (%v), want the big transaction's 3000 inserts and 1000 updates and inserts 50000 and 50001", len(rows), count)
	}
}

// streamingSetup makes table tbl (id int4 key, v text) in publication
// pub and a harness on slot that syncs once (the slot then exists), with
// a tiny logical_decoding_work_mem so the server streams large
// transactions in progress, and 4 kB of each kept in memory (the rest
// spills to a file). run executes SQL on a session of its own, so a
// transaction can stay open across calls.
func streamingSetup(t *testing.T, d, tbl, pub, slot string) (*harness, func(sql string)) {
	t.Helper()
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d+"&logical_decoding_work_mem=64kB", postgres.Config{Publication: pub, Slot: slot, StreamedTxnMemory: 4096})
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := pgconn.Connect(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(ctx) })
	return h, func(sql string) {
		t.Helper()
		if _, err := a.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
