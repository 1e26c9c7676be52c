package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// TestKeyChangeDeletesOldKey: an UPDATE that changes a row's key reaches
// the destination as a delete of the old key, carrying the old key's
// columns (the whole old row under REPLICA IDENTITY FULL), then the new
// row; applied by key in seq order the destination equals the table.
// Under REPLICA IDENTITY USING INDEX the stream is keyed by that index,
// the only key whose changes Postgres logs: changing the primary key
// alone is an update of the same index key.
func TestKeyChangeDeletesOldKey(t *testing.T) {
	d := dsn(t)
	for _, tc := range []struct {
		identity string
		// the destination's rows after the key change, in seq order: op,
		// id, u, v
		want []string
		key  string // the stream's key column
	}{
		{"DEFAULT", []string{"insert 1 100 a", "insert 2 200 b", "delete 1 <nil> <nil>", "update 10 100 a",
			"delete 2 <nil> <nil>", "update 20 201 b"}, "id"},
		{"FULL", []string{"insert 1 100 a", "insert 2 200 b", "delete 1 100 a", "update 10 100 a",
			"delete 2 200 b", "update 20 201 b"}, "id"},
		// By the index on u: the first update keeps u (an update of row
		// u=100), the second changes it (the delete of u=200).
		{"USING INDEX", []string{"insert 1 100 a", "insert 2 200 b", "update 10 100 a",
			"delete <nil> 200 <nil>", "update 20 201 b"}, "u"},
	} {
		t.Run(strings.ReplaceAll(tc.identity, " ", "_"), func(t *testing.T) {
			tbl, pub, slot := name("keychange"), name("pub"), name("slot")
			identity := "REPLICA IDENTITY " + tc.identity
			if tc.identity == "USING INDEX" {
				identity += " " + tbl + "_u"
			}
			execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, u int4 NOT NULL, v text)", tbl),
				fmt.Sprintf("CREATE UNIQUE INDEX %s_u ON %s (u)", tbl, tbl),
				fmt.Sprintf("ALTER TABLE %s %s", tbl, identity),
				fmt.Sprintf("INSERT INTO %s VALUES (1, 100, 'a'), (2, 200, 'b')", tbl),
				fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
			dropSlotAtCleanup(t, d, slot)
			h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
			if _, err := h.sync(); err != nil {
				t.Fatal(err)
			}
			execSQL(t, d, fmt.Sprintf("UPDATE %s SET id = 10 WHERE id = 1", tbl),
				fmt.Sprintf("UPDATE %s SET id = 20, u = 201 WHERE id = 2", tbl))
			res, err := h.sync()
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Streams[tbl]; c.Quarantined != 0 {
				t.Fatalf("counts %+v: rows quarantined", c)
			}
			rows := readRows(t, h.tables, tbl)
			var got []string
			live := map[string]string{}
			for _, r := range rows {
				got = append(got, fmt.Sprintf("%v %v %v %v", r["_openetl_op"], r["id"], r["u"], r["v"]))
				k := fmt.Sprint(r[tc.key])
				if r["_openetl_op"] == "delete" {
					delete(live, k)
				} else {
					live[k] = fmt.Sprintf("%v %v %v", r["id"], r["u"], r["v"])
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rows\n%q\nwant\n%q", got, tc.want)
			}
			var applied []string
			for _, v := range live {
				applied = append(applied, v)
			}
			slices.Sort(applied)
			if want := []string{"10 100 a", "20 201 b"}; !slices.Equal(applied, want) {
				t.Errorf("applied by %s: %q, want the table %q", tc.key, applied, want)
			}
		})
	}
}

// changeRecorder keeps every record as "op key | values", a value
// written "<u>" when unchanged, "<nil>" when null, and its length when
// longer than 20 bytes; and the last resume state.
type changeRecorder struct {
	recs  []string
	state []byte
}

func (r *changeRecorder) Record(_ string, op source.Op, _ int64, key, payload []byte) error {
	show := func(b []byte) []string {
		vals, err := source.DecodeRow(nil, b)
		if err != nil {
			return []string{"bad: " + err.Error()}
		}
		var out []string
		for _, v := range vals {
			switch {
			case v.Unchanged:
				out = append(out, "<u>")
			case v.Null:
				out = append(out, "<nil>")
			case len(v.Text) > 20:
				out = append(out, fmt.Sprintf("%c*%d", v.Text[0], len(v.Text)))
			default:
				out = append(out, string(v.Text))
			}
		}
		return out
	}
	r.recs = append(r.recs, op.String()+" "+strings.Join(show(key), ",")+" | "+strings.Join(show(payload), " "))
	return nil
}

func (r *changeRecorder) ResumePoint(st []byte) error { r.state = slices.Clone(st); return nil }

// TestKeyChangeToast: an update that leaves a TOASTed column alone never
// turns it into a null, with or without a key change: the value comes
// from the old row under REPLICA IDENTITY FULL, and is marked unchanged
// otherwise (the engine quarantines such a row as unchanged_value). A
// TOASTed key column an update leaves alone is taken from the old key
// Postgres then sends.
func TestKeyChangeToast(t *testing.T) {
	d := dsn(t)
	for _, tc := range []struct {
		identity, keyType string
		setup             []string // after the table, as format strings of the table name
		insert, update    string
		want              []string
	}{
		{identity: "DEFAULT", keyType: "int4", insert: "(1, repeat('x', 100000), 1)", update: "SET id = 10, n = 2 WHERE id = 1",
			want: []string{"delete 1 | 1 <nil> <nil>", "update 10 | 10 <u> 2"}},
		{identity: "FULL", keyType: "int4", insert: "(1, repeat('x', 100000), 1)", update: "SET id = 10, n = 2 WHERE id = 1",
			want: []string{"delete 1 | 1 x*100000 1", "update 10 | 10 x*100000 2"}},
		{identity: "DEFAULT", keyType: "int4", insert: "(1, repeat('x', 100000), 1)", update: "SET n = 2 WHERE id = 1",
			want: []string{"update 1 | 1 <u> 2"}},
		// A key too long for the heap row (stored out of line, not
		// compressed) but short enough for the index.
		{identity: "DEFAULT", keyType: "text", setup: []string{"ALTER TABLE %s ALTER id SET STORAGE EXTERNAL"},
			insert: "(repeat('k', 2500), 'small', 1)", update: "SET n = 2",
			want: []string{"update k*2500 | k*2500 small 2"}},
	} {
		t.Run(tc.identity+"_"+tc.keyType+"_"+strings.Fields(tc.update)[1], func(t *testing.T) {
			tbl, pub, slot := name("toastkey"), name("pub"), name("slot")
			sqls := []string{fmt.Sprintf("CREATE TABLE %s (id %s PRIMARY KEY, big text, n int4)", tbl, tc.keyType),
				fmt.Sprintf("ALTER TABLE %s ALTER big SET STORAGE EXTERNAL", tbl),
				fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY %s", tbl, tc.identity)}
			for _, s := range tc.setup {
				sqls = append(sqls, fmt.Sprintf(s, tbl))
			}
			sqls = append(sqls, fmt.Sprintf("INSERT INTO %s VALUES %s", tbl, tc.insert),
				fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
			execSQL(t, d, sqls...)
			dropSlotAtCleanup(t, d, slot)
			src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
			ctx := context.Background()
			splits, err := src.Open(ctx, []string{tbl}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := &changeRecorder{}
			if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rec, true); err != nil {
				t.Fatal(err)
			}
			execSQL(t, d, fmt.Sprintf("UPDATE %s %s", tbl, tc.update))
			splits, err = src.Open(ctx, []string{tbl}, afterSnapshot(t, splits, "slot:"+slot, rec.state))
			if err != nil {
				t.Fatal(err)
			}
			rec.recs = nil
			if err := splitByID(t, splits, "slot:"+slot).Read(ctx, rec, true); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rec.recs, tc.want) {
				t.Errorf("changes\n%q\nwant\n%q", rec.recs, tc.want)
			}
		})
	}
}
