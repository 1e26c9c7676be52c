package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/source"
	srcpg "github.com/openetl/etl/source/postgres"
)

// namedRow is one record of a namesSource stream: its op, key and the
// text form of each declared column's value (nil: null).
type namedRow struct {
	op   source.Op
	key  string
	vals []*string
}

func s(v string) *string { return &v }

// namedStream is a declared (FormatRow) stream of a namesSource.
type namedStream struct {
	stream source.Stream
	rows   []namedRow
}

// namesSource is a source of declared streams whose stream and column
// names Postgres can't take as they are. Each stream has one split that
// emits its rows in order, every one with a seq of its own.
type namesSource struct {
	mu      sync.Mutex
	streams []namedStream
}

func (n *namesSource) Discover(context.Context) (source.Catalog, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var c source.Catalog
	for _, st := range n.streams {
		c.Streams = append(c.Streams, st.stream)
	}
	return c, nil
}

func (n *namesSource) Replay() source.Replay { return source.ReplayExact }

func (n *namesSource) Open(_ context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []source.Split
	for i, st := range n.streams {
		for _, name := range streams {
			if name == st.stream.Name {
				var from int
				fmt.Sscan(string(resume[source.SplitID(fmt.Sprint(i))]), &from)
				out = append(out, &namedSplit{id: i, st: st, from: from})
			}
		}
	}
	return out, nil
}

type namedSplit struct {
	id   int
	st   namedStream
	from int
}

func (sp *namedSplit) ID() source.SplitID { return source.SplitID(fmt.Sprint(sp.id)) }

func (sp *namedSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	for i := sp.from; i < len(sp.st.rows); i++ {
		r := sp.st.rows[i]
		vals := make([][]byte, len(r.vals))
		null := make([]bool, len(r.vals))
		for j, v := range r.vals {
			if v == nil {
				null[j] = true
			} else {
				vals[j] = []byte(*v)
			}
		}
		if err := e.Record(sp.st.stream.Name, r.op, int64(sp.id*1000+i+1), []byte(r.key), source.AppendRow(nil, vals, null)); err != nil {
			return err
		}
	}
	return e.ResumePoint([]byte(fmt.Sprint(len(sp.st.rows))))
}

// catalogColumns lists the columns of every table of schema but the
// destination's own, as information_schema.columns has them:
// "table.column type" in table then ordinal order.
func catalogColumns(t *testing.T, schema string) string {
	t.Helper()
	return psql(t, `SELECT string_agg(table_name || '.' || column_name || ' ' || data_type, E'\n' ORDER BY table_name COLLATE "C", ordinal_position)
		FROM information_schema.columns WHERE table_schema = '`+schema+`' AND table_name NOT LIKE '\_openetl\_%'
		AND column_name NOT IN ('_openetl_id', '_openetl_op', '_openetl_seq', '_openetl_synced_at')`)
}

// Names Postgres can't take as the source spells them, through a
// pipeline into the server: a stream name longer than 63 bytes and one
// that is the same in its first 63, mixed-case stream and column names,
// two streams and three columns that differ only in case, columns named
// with reserved words (a merge key among them), two long column names
// that are the same in their first 63 bytes, names with characters
// outside [a-z0-9_] or a leading digit, and enum columns. The tables and
// columns psql finds in pg_class and information_schema are the names
// the destination's Capabilities give (lower case, reserved words with a
// '_', cut to 63 bytes, _2 and _3 for a repeat), no two the same, enums
// are text (and text[]), and every value is read back as written. A
// second Sync, whose catalog has gained a column "ORDER" and a stream
// Orders_PKey, adds column order__2 to orders and table orders_pkey,
// and keeps every name given.
func TestIdentifiers(t *testing.T) {
	t.Run("merge", func(t *testing.T) { testIdentifiers(t, true) })
	t.Run("on-conflict", func(t *testing.T) { testIdentifiers(t, false) })
}

func testIdentifiers(t *testing.T, merge bool) {
	e := newEnv(t)
	long := "Customer_Lifetime_Value_Aggregated_By_Sales_Region_And_Fiscal_Quarter"
	longCol := "the_total_amount_of_every_order_line_in_the_currency_of_the_invoice"
	if len(long) <= 63 || len(longCol) <= 63 {
		t.Fatalf("the long names are %d and %d bytes", len(long), len(longCol))
	}
	// Table and column names as the engine gives them under the
	// destination's Capabilities.
	longA, longB := strings.ToLower(long)[:63], strings.ToLower(long)[:61]+"_2"
	colA, colB := longCol[:63], longCol[:61]+"_2"

	ordersCols := []source.Column{
		{Name: "Order", Type: "int8"}, {Name: "CustomerID", Type: "int4", Nullable: true},
		{Name: "select", Type: "text", Nullable: true}, {Name: "user", Type: "text", Nullable: true},
		{Name: "from", Type: "date", Nullable: true}, {Name: "Note", Type: "text", Nullable: true},
		{Name: "note", Type: "text", Nullable: true}, {Name: "NOTE", Type: "varchar(10)", Nullable: true},
		{Name: longCol + "_A", Type: "numeric(10,2)", Nullable: true}, {Name: longCol + "_B", Type: "numeric(10,2)", Nullable: true},
		{Name: "Mood", Type: "enum('sad','ok','it''s')", Nullable: true}, {Name: "Moods", Type: "_mood", Nullable: true},
		{Name: "Unit Price", Type: "float8", Nullable: true}, {Name: "2nd", Type: "text", Nullable: true},
	}
	src := &namesSource{streams: []namedStream{
		{stream: source.Stream{Name: long + "_A", Format: source.FormatRow, Columns: []source.Column{
			{Name: "ID", Type: "int4"}, {Name: "Region", Type: "text", Nullable: true}}},
			rows: []namedRow{{source.OpInsert, "", []*string{s("1"), s("North")}}, {source.OpInsert, "", []*string{s("2"), nil}}}},
		{stream: source.Stream{Name: long + "_B", Format: source.FormatRow, PrimaryKey: []string{"ID"}, Columns: []source.Column{
			{Name: "ID", Type: "int4"}, {Name: "Region", Type: "text", Nullable: true}}},
			rows: []namedRow{{source.OpInsert, "3", []*string{s("3"), s("South")}}}},
		{stream: source.Stream{Name: "Orders", Format: source.FormatRow, CDC: true, PrimaryKey: []string{"Order"}, Columns: ordersCols},
			rows: []namedRow{
				{source.OpInsert, "1", []*string{s("1"), s("42"), s("star"), s("alice"), s("2026-12-01"), s("N"), s("n"), s("NOTE"),
					s("12345678.90"), s("-0.01"), s("it's"), s("{sad,ok}"), s("1.5"), s("second")}},
				{source.OpInsert, "2", []*string{s("2"), nil, s("*"), s("bob"), nil, nil, s(""), nil, nil, s("0.00"), s("sad"), s("{}"), nil, nil}},
				{source.OpInsert, "3", []*string{s("3"), s("7"), s("x"), s("carol"), s("1999-01-08"), s("three"), nil, s("three"),
					s("1.00"), nil, nil, nil, s("-0.25"), s("2")}},
				{source.OpUpdate, "1", []*string{s("1"), s("43"), s("star, again"), s("alice"), s("2026-12-02"), s("N2"), s("n2"), s("NOTE2"),
					s("0.10"), s("99999999.99"), s("ok"), s("{it's}"), s("2.5"), s("second")}},
			}},
		{stream: source.Stream{Name: "orders", Format: source.FormatRow, Columns: []source.Column{
			{Name: "id", Type: "int4"}, {Name: "ORDER", Type: "text", Nullable: true}}},
			rows: []namedRow{{source.OpInsert, "", []*string{s("1"), s("lower-case orders")}}}},
		{stream: source.Stream{Name: "user", Format: source.FormatRow, Columns: []source.Column{
			{Name: "User", Type: "text"}, {Name: "Group", Type: "text", Nullable: true}}},
			rows: []namedRow{{source.OpInsert, "", []*string{s("root"), s("wheel")}}}},
	}}

	dir := t.TempDir()
	sync := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		dst := e.open(t)
		postgres.SetMerge(dst, merge)
		p, err := etl.NewPipeline("idents").From(src).To(dst).Checkpoints(store).
			Mode(delivery.Merge, "Orders", long+"_B").Mode(delivery.Overwrite, "user").Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for st, c := range res.Streams {
			if c.Quarantined != 0 || c.Held != 0 {
				t.Errorf("stream %s: %d quarantined, %d held, want none", st, c.Quarantined, c.Held)
			}
		}
	}
	sync()

	tables := func() string {
		return psql(t, `SELECT string_agg(c.relname, ' ' ORDER BY c.relname COLLATE "C") FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = '`+e.schema+`' AND c.relkind = 'r' AND c.relname NOT LIKE '\_openetl\_%'`)
	}
	if got, want := tables(), longB+" "+longA+" orders orders_2 user_"; got != want { // longB's _2 sorts first
		t.Errorf("tables %q, want %q", got, want)
	}
	wantCols := []string{
		longA + ".id integer", longA + ".region text",
		longB + ".id integer", longB + ".region text", longB + "._openetl_deleted boolean",
		"orders.order_ bigint", "orders.customerid integer", "orders.select_ text", "orders.user_ text", "orders.from_ date",
		"orders.note text", "orders.note_2 text", "orders.note_3 character varying",
		"orders." + colA + " numeric", "orders." + colB + " numeric",
		"orders.mood text", "orders.moods ARRAY", "orders.unit_price double precision", "orders._2nd text",
		"orders._openetl_deleted boolean",
		"orders_2.id integer", "orders_2.order_ text",
		"user_.user_ text", "user_.group_ text",
	}
	cols := catalogColumns(t, e.schema)
	if want := strings.Join(sortByTable(wantCols), "\n"); cols != want {
		t.Errorf("columns:\n%s\nwant\n%s", cols, want)
	}
	// The declared types kept, enums as text.
	types := psql(t, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = '`+e.schema+`.orders'::regclass AND attname IN ('note_3', '`+colA+`', '`+colB+`', 'mood', 'moods')`)
	if want := "note_3 character varying(10), " + colA + " numeric(10,2), " + colB + " numeric(10,2), mood text, moods text[]"; types != want {
		t.Errorf("orders types: %s, want %s", types, want)
	}
	// The primary keys of the merged tables, and no index (or other
	// relation) of the schema but the tables has a name the engine could
	// give a later stream's table.
	keys := func() string {
		return psql(t, `SELECT string_agg(c.relname || ' ' || pg_get_constraintdef(k.oid), E'\n' ORDER BY c.relname COLLATE "C")
			FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = '`+e.schema+`' AND k.contype = 'p' AND c.relname NOT LIKE '\_openetl\_%'`)
	}
	if got, want := keys(), longB+" PRIMARY KEY (id)\norders PRIMARY KEY (order_)"; got != want {
		t.Errorf("primary keys:\n%s\nwant\n%s", got, want)
	}
	others := func() string {
		return psql(t, `SELECT coalesce(string_agg(c.relname || ' ' || c.relkind::text, ', ' ORDER BY c.relname COLLATE "C"), '-')
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = '`+e.schema+`' AND c.relkind <> 'r' AND c.relname ~ '^[a-z0-9_]+$' AND c.relname NOT LIKE '\_openetl\_%'`)
	}
	if got := others(); got != "-" {
		t.Errorf("relations that are not tables, with names a table may get: %s", got)
	}
	q := func(table string) string { return `"` + e.schema + `"."` + table + `"` }
	data := func() string {
		var out []string
		for _, qs := range []string{
			`SELECT id, coalesce(region, 'NULL') FROM ` + q(longA) + ` ORDER BY id`,
			`SELECT id, region, _openetl_deleted FROM ` + q(longB),
			`SELECT order_, customerid, select_, user_, from_, note, note_2, note_3, "` + colA + `", "` + colB + `", mood, moods, unit_price, _2nd, _openetl_deleted
				FROM ` + q("orders") + ` ORDER BY order_`,
			`SELECT id, order_ FROM ` + q("orders_2"),
			`SELECT user_, group_ FROM ` + q("user_"),
		} {
			out = append(out, psql(t, qs))
		}
		return strings.Join(out, "\n--\n")
	}
	want := strings.Join([]string{
		"1|North\n2|NULL",
		"3|South|f",
		"1|43|star, again|alice|2026-12-02|N2|n2|NOTE2|0.10|99999999.99|ok|{it's}|2.5|second|f\n" +
			"2||*|bob||||||0.00|sad|{}|||f\n" +
			"3|7|x|carol|1999-01-08|three||three|1.00||||-0.25|2|f",
		"1|lower-case orders",
		"root|wheel",
	}, "\n--\n")
	if got := data(); got != want {
		t.Errorf("rows after the first Sync:\n%s\nwant\n%s", got, want)
	}

	// The second Sync: orders gains a column ORDER (order_ is taken:
	// order__2), and a stream Orders_PKey (orders_pkey) appears, with
	// the name of the index Postgres would give orders' primary key.
	src.mu.Lock()
	o := &src.streams[2]
	o.stream.Columns = append(o.stream.Columns, source.Column{Name: "ORDER", Type: "text", Nullable: true})
	for i := range o.rows {
		o.rows[i].vals = append(o.rows[i].vals, nil)
	}
	o.rows = append(o.rows,
		namedRow{source.OpDelete, "2", []*string{s("2"), nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}},
		namedRow{source.OpInsert, "4", []*string{s("4"), s("4"), s("four"), s("dave"), nil, nil, nil, nil, nil, nil, s("sad"), nil, nil, nil, s("#4")}})
	src.streams = append(src.streams, namedStream{
		stream: source.Stream{Name: "Orders_PKey", Format: source.FormatRow, Columns: []source.Column{{Name: "Key", Type: "int4"}}},
		rows:   []namedRow{{source.OpInsert, "", []*string{s("9")}}}})
	src.mu.Unlock()
	sync()

	if got, want := tables(), longB+" "+longA+" orders orders_2 orders_pkey user_"; got != want {
		t.Errorf("tables after the second Sync %q, want %q", got, want)
	}
	wantCols = append(wantCols, "orders.order__2 text", "orders_pkey.key integer")
	if got, want := catalogColumns(t, e.schema), strings.Join(sortByTable(wantCols), "\n"); got != want {
		t.Errorf("columns after the second Sync:\n%s\nwant\n%s", got, want)
	}
	if got, want := psql(t, `SELECT order_, coalesce(order__2, 'NULL'), _openetl_deleted FROM `+q("orders")+` ORDER BY order_`),
		"1|NULL|f\n2|NULL|t\n3|NULL|f\n4|#4|f"; got != want {
		t.Errorf("orders after the second Sync:\n%s\nwant\n%s", got, want)
	}
	if got := psql(t, `SELECT key FROM `+q("orders_pkey")); got != "9" {
		t.Errorf("orders_pkey = %q, want 9", got)
	}
}

// sortByTable orders "table.column type" lines by table, keeping the
// columns' order within each table, as catalogColumns lists them.
func sortByTable(lines []string) []string {
	var order []string
	by := map[string][]string{}
	for _, l := range lines {
		tbl := l[:strings.IndexByte(l, '.')]
		if by[tbl] == nil {
			order = append(order, tbl)
		}
		by[tbl] = append(by[tbl], l)
	}
	slices.Sort(order)
	var out []string
	for _, tbl := range order {
		out = append(out, by[tbl]...)
	}
	return out
}

// A stream whose table name is one of the destination's own, the ledger
// (-openetl_ledger's is _openetl_ledger, a Config.Ledger of "books" a
// stream books's) or another with the _openetl_ prefix, fails Build,
// naming the table, and the ledger is left as it was; before, its epoch
// failed at every Commit, on a NOT NULL column of the ledger.
func TestOwnTableNames(t *testing.T) {
	e := newEnv(t)
	ledgerCols := func(table string) string {
		return psql(t, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = '`+e.schema+`.`+table+`'::regclass AND attnum > 0`)
	}
	books, err := postgres.New(t.Context(), postgres.Config{Pool: e.pool, Schema: e.schema, Ledger: "books"})
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	want := ledgerCols("books")
	for _, tc := range []struct {
		stream, table string
		dst           sink.Destination
	}{
		{"-openetl_ledger", "_openetl_ledger", e.open(t)},
		{"-OpenETL_Quarantine", "_openetl_quarantine", e.open(t)},
		{"-openetl_other", "_openetl_other", e.open(t)},
		{"Books", "books", books},
	} {
		src := &namesSource{streams: []namedStream{{stream: source.Stream{Name: tc.stream, Format: source.FormatRow,
			Columns: []source.Column{{Name: "pipeline", Type: "text"}}}, rows: []namedRow{{source.OpInsert, "", []*string{s("x")}}}}}}
		_, err := etl.NewPipeline("own").From(src).To(tc.dst).Checkpoints(checkpoint.NewMem()).Build()
		if err == nil || !strings.Contains(err.Error(), "table "+tc.table+" is the destination's own") {
			t.Errorf("stream %s: Build: %v, want table %s refused", tc.stream, err, tc.table)
		}
	}
	if got := ledgerCols("books"); got != want {
		t.Errorf("ledger columns %s, want %s", got, want)
	}
}

// A Postgres → Postgres pipeline of a mixed-case table whose columns are
// mixed case, reserved words, two names that differ only in case, an
// enum (CREATE TYPE ... AS ENUM) and an array of it, merged by a key
// named "Order": the destination's table and columns are the lower-case
// names, reserved words with a '_' and the second Note note_2, the enums
// text and text[], and psql reads the same rows on both sides.
func TestPostgresToPostgresIdentifiers(t *testing.T) {
	e := newEnv(t)
	n := fmt.Sprintf("%d_%d", time.Now().UnixNano()%1e9, unique.Add(1))
	tbl, enum, slot := "Orders_"+n, "mood_"+n, "pgident_"+n
	psql(t, `CREATE TYPE `+enum+` AS ENUM ('sad', 'ok', 'it''s');
		CREATE TABLE "`+tbl+`" ("Order" int PRIMARY KEY, "CustomerID" int, "select" text, "user" text, "from" date,
			"Note" text, "note" text, "Mood" `+enum+`, "Moods" `+enum+`[]);
		INSERT INTO "`+tbl+`" VALUES (1, 42, 'star', 'alice', '2026-12-01', 'N', 'n', 'it''s', '{sad,ok}'),
			(2, NULL, '*', 'bob', NULL, NULL, '', 'sad', '{}'), (3, 7, NULL, NULL, '1999-01-08', 'three', NULL, NULL, NULL)`)
	t.Cleanup(func() {
		psql(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '`+slot+`';
			DROP PUBLICATION IF EXISTS `+slot+`; DROP TABLE "`+tbl+`"; DROP TYPE `+enum)
	})
	dir := t.TempDir()
	sync := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		src, err := srcpg.New(srcpg.Config{DSN: dsn(t), Publication: slot, CreatePublication: true, Tables: []string{tbl}, Slot: slot})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		store, err := checkpoint.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("pgident").From(src).To(e.open(t)).Checkpoints(store).Mode(delivery.Merge, tbl).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(context.Background())
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for st, c := range res.Streams {
			if c.Quarantined != 0 || c.Held != 0 {
				t.Errorf("stream %s: %d quarantined, %d held, want none", st, c.Quarantined, c.Held)
			}
		}
	}
	dtbl := strings.ToLower(tbl)
	same := func(when string) {
		t.Helper()
		want := psql(t, `SELECT "Order", "CustomerID", "select", "user", "from", "Note", "note", "Mood", "Moods" FROM "`+tbl+`" ORDER BY 1`)
		got := psql(t, `SELECT order_, customerid, select_, user_, from_, note, note_2, mood, moods FROM `+e.schema+`.`+dtbl+
			` WHERE NOT _openetl_deleted ORDER BY 1`)
		if got != want {
			t.Errorf("%s: destination\n%s\nsource\n%s", when, got, want)
		}
	}
	sync()
	same("after the first Sync")
	if got, want := catalogColumns(t, e.schema), strings.Join([]string{dtbl + ".order_ integer", dtbl + ".customerid integer",
		dtbl + ".select_ text", dtbl + ".user_ text", dtbl + ".from_ date", dtbl + ".note text", dtbl + ".note_2 text",
		dtbl + ".mood text", dtbl + ".moods ARRAY", dtbl + "._openetl_deleted boolean"}, "\n"); got != want {
		t.Errorf("columns:\n%s\nwant\n%s", got, want)
	}
	if got := psql(t, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '`+e.schema+`.`+dtbl+`'::regclass AND attname = 'moods'`); got != "text[]" {
		t.Errorf("moods is %s, want text[]", got)
	}
	psql(t, `ALTER TYPE `+enum+` ADD VALUE 'happy'`)
	psql(t, `UPDATE "`+tbl+`" SET "Mood" = 'happy', "select" = 'again' WHERE "Order" = 2; DELETE FROM "`+tbl+`" WHERE "Order" = 3;
		INSERT INTO "`+tbl+`" VALUES (4, 4, 'four', 'dave', NULL, 'IV', 'iv', 'ok', '{happy}')`)
	sync()
	same("after the second Sync")
}
