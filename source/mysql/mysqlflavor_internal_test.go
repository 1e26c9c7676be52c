package mysql

import (
	"encoding/binary"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl/source"
)

// No MySQL server runs here (Debian has none): these tests feed the
// MySQL code paths binlog events built byte for byte as MySQL 8 writes
// them (v2 rows events, GTID events with a server UUID, binary JSON),
// through go-mysql's parser with the MySQL flavor, into the source's
// reader. The binary JSON document is one captured from MySQL (it comes
// from go-mysql's TestParseJson).

// binlogWriter writes MySQL 8 binlog events without checksums.
type binlogWriter struct {
	pos    uint32 // end of the last event
	events [][]byte
}

func (w *binlogWriter) add(typ replication.EventType, body []byte) {
	size := uint32(19 + len(body))
	w.pos += size
	h := make([]byte, 19, size)
	binary.LittleEndian.PutUint32(h[0:], 1704164645)
	h[4] = byte(typ)
	binary.LittleEndian.PutUint32(h[5:], 1)
	binary.LittleEndian.PutUint32(h[9:], size)
	binary.LittleEndian.PutUint32(h[13:], w.pos)
	w.events = append(w.events, append(h, body...))
}

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }

func lenenc(b []byte) []byte { return append([]byte{byte(len(b))}, b...) }

// formatDescription is a MySQL 8.0.36 format description: 6-byte table
// IDs (post-header 8 for table maps, 10 for v2 rows events), checksums off.
func formatDescription() []byte {
	b := le16(4)
	sv := make([]byte, 50)
	copy(sv, "8.0.36")
	b = append(b, sv...)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, 19)
	lengths := make([]byte, 41)
	lengths[replication.TABLE_MAP_EVENT-1] = 8
	for _, t := range []replication.EventType{replication.WRITE_ROWS_EVENTv2, replication.UPDATE_ROWS_EVENTv2, replication.DELETE_ROWS_EVENTv2} {
		lengths[t-1] = 10
	}
	lengths[replication.QUERY_EVENT-1] = 13
	b = append(b, lengths...)
	return append(b, byte(replication.BINLOG_CHECKSUM_ALG_OFF), 0, 0, 0, 0)
}

var testSID = uuid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562")

// gtid is a MySQL GTID event: commit flag, SID, GNO, logical timestamps.
func gtid(gno int64) []byte {
	b := append([]byte{1}, testSID[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(gno))
	b = append(b, replication.LogicalTimestampTypeCode)
	b = binary.LittleEndian.AppendUint64(b, 0)
	return binary.LittleEndian.AppendUint64(b, 1)
}

func query(schema, q string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 7)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, byte(len(schema)))
	b = append(b, 0, 0, 0, 0) // error code, status vars length
	b = append(append(b, schema...), 0)
	return append(b, q...)
}

const tableID = 108

// The table: id bigint unsigned PK, j json, d decimal(10,2), e
// enum('a','b'), s set('x','y'), ts timestamp(3), dt datetime(6), bt
// bit(64), name varchar(20) (utf8mb4, collation 255), f float.
var allColumns = []struct{ name, typ string }{
	{"id", "bigint unsigned"}, {"j", "json"}, {"d", "decimal(10,2)"}, {"e", "enum('a','b')"}, {"s", "set('x','y')"},
	{"ts", "timestamp(3)"}, {"dt", "datetime(6)"}, {"bt", "bit(64)"}, {"name", "varchar(20)"}, {"f", "float"},
}

// withJSON says whether the test table has its JSON column j (which
// decode.go leaves to go-mysql); testColumns are its columns.
var (
	withJSON    = true
	testColumns = allColumns
)

func setJSON(on bool) {
	withJSON = on
	testColumns = allColumns
	if !on {
		testColumns = append(allColumns[:1:1], allColumns[2:]...)
	}
}

func tableMapBody() []byte {
	b := binary.LittleEndian.AppendUint64(nil, tableID)[:6]
	b = append(b, 1, 0) // flags
	b = append(append(append(b, lenenc([]byte("app"))...), 0), append(lenenc([]byte("t")), 0)...)
	b = append(b, byte(len(testColumns)))
	b = append(b, gomysql.MYSQL_TYPE_LONGLONG)
	meta := []byte{}
	if withJSON {
		b = append(b, gomysql.MYSQL_TYPE_JSON)
		meta = append(meta, 4)
	}
	b = append(b, gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_STRING,
		gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_TIMESTAMP2, gomysql.MYSQL_TYPE_DATETIME2, gomysql.MYSQL_TYPE_BIT,
		gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_FLOAT)
	meta = append(meta, 10, 2, gomysql.MYSQL_TYPE_ENUM, 1, gomysql.MYSQL_TYPE_SET, 1, 3, 6, 0, 8)
	meta = append(append(meta, le16(80)...), 4)
	b = append(b, lenenc(meta)...)
	b = append(b, bitmap(len(testColumns), 1)...) // nullable: all but id
	opt := func(typ byte, v []byte) { b = append(append(b, typ), lenenc(v)...) }
	// Signedness of the numeric columns id, d, f: id unsigned.
	opt(replication.TABLE_MAP_OPT_META_SIGNEDNESS, []byte{0x80})
	opt(replication.TABLE_MAP_OPT_META_DEFAULT_CHARSET, []byte{255})
	var names []byte
	for _, c := range testColumns {
		names = append(names, lenenc([]byte(c.name))...)
	}
	opt(replication.TABLE_MAP_OPT_META_COLUMN_NAME, names)
	opt(replication.TABLE_MAP_OPT_META_SET_STR_VALUE, append([]byte{2}, append(lenenc([]byte("x")), lenenc([]byte("y"))...)...))
	opt(replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, append([]byte{2}, append(lenenc([]byte("a")), lenenc([]byte("b"))...)...))
	opt(replication.TABLE_MAP_OPT_META_SIMPLE_PRIMARY_KEY, []byte{0})
	opt(replication.TABLE_MAP_OPT_META_ENUM_AND_SET_DEFAULT_CHARSET, []byte{255})
	return b
}

// The binary JSON {"key1": "value1", "key2": "value2"}, as MySQL wrote it.
var capturedJSON = []byte("\x00\x02\x00(\x00\x12\x00\x04\x00\x16\x00\x04\x00\f\x1a\x00\f!\x00key1key2\x06value1\x06value2")

type testRow struct {
	id       uint64
	json     []byte // nil: NULL
	dec      []byte // packed DECIMAL(10,2)
	enum     byte
	set      byte
	tsSec    uint32
	tsFrac   uint16 // in 1/10000 s
	dt       [8]byte
	bits     uint64
	name     string
	float    float32
	nullRest bool // all but id NULL
}

// image encodes a row image: the null bitmap, then the values.
func (r testRow) image() []byte {
	if r.nullRest {
		return append(bitmap(len(testColumns), 1), binary.LittleEndian.AppendUint64(nil, r.id)...)
	}
	b := bitmap(len(testColumns), len(testColumns))
	if !withJSON || r.json != nil {
		b[0] = 0
	} else {
		b = append([]byte{1 << 1}, make([]byte, len(b)-1)...)
	}
	b = binary.LittleEndian.AppendUint64(b, r.id)
	if withJSON && r.json != nil {
		b = append(binary.LittleEndian.AppendUint32(b, uint32(len(r.json))), r.json...)
	}
	b = append(b, r.dec...)
	b = append(b, r.enum, r.set)
	b = binary.BigEndian.AppendUint32(b, r.tsSec)
	b = binary.BigEndian.AppendUint16(b, r.tsFrac)
	b = append(b, r.dt[:]...)
	b = binary.BigEndian.AppendUint64(b, r.bits)
	b = append(append(b, byte(len(r.name))), r.name...)
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(r.float))
}

// datetime2 packs a DATETIME(6) value: 5 bytes of the offset integer
// part, 3 of microseconds, big endian.
func datetime2(y, mo, d, h, mi, s, us int) [8]byte {
	ymd := int64((y*13+mo)<<5 | d)
	hms := int64(h<<12 | mi<<6 | s)
	var out [8]byte
	binary.BigEndian.PutUint64(out[:], uint64((ymd<<17|hms)+0x8000000000)<<24|uint64(us))
	return out
}

// bitmap is a bitmap of n columns with bits from..n-1 set.
func bitmap(n, from int) []byte {
	b := make([]byte, (n+7)/8)
	for i := from; i < n; i++ {
		b[i/8] |= 1 << (i % 8)
	}
	return b
}

func rowsEvent() []byte {
	b := binary.LittleEndian.AppendUint64(nil, tableID)[:6]
	b = append(b, 1, 0)       // flags: statement end
	b = append(b, le16(2)...) // v2: no extra data
	b = append(b, byte(len(testColumns)))
	return append(b, bitmap(len(testColumns), 0)...)
}

func writeRows(rows ...testRow) []byte {
	b := rowsEvent()
	for _, r := range rows {
		b = append(b, r.image()...)
	}
	return b
}

func updateRows(pairs ...[2]testRow) []byte {
	b := rowsEvent()
	b = append(b, bitmap(len(testColumns), 0)...) // the after image's columns
	for _, p := range pairs {
		b = append(append(b, p[0].image()...), p[1].image()...)
	}
	return b
}

type fakeEmitter struct {
	recs   []rec
	states []string
}

type rec struct {
	op      source.Op
	seq     int64
	key     string
	payload []string
}

func (f *fakeEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	vals, err := source.DecodeRow(nil, payload)
	if err != nil {
		return err
	}
	var p []string
	for _, v := range vals {
		if v.Null {
			p = append(p, "NULL")
		} else {
			p = append(p, string(v.Text))
		}
	}
	f.recs = append(f.recs, rec{op, seq, string(key), p})
	return nil
}

func (f *fakeEmitter) ResumePoint(st []byte) error {
	f.states = append(f.states, string(st))
	return nil
}

// testTable declares the table as Discover would.
func testTable() *table {
	t := &table{name: "t", byName: map[string]int{}, stream: source.Stream{Name: "t", Format: source.FormatRow, CDC: true,
		Types: source.TypesMySQL, PrimaryKey: []string{"id"}}, key: []int{0}}
	for i, c := range testColumns {
		t.byName[c.name] = i
		t.stream.Columns = append(t.stream.Columns, source.Column{Name: c.name, Type: c.typ, Nullable: i > 0})
		t.kinds = append(t.kinds, kindOf(strings.Fields(strings.Split(c.typ, "(")[0])[0], c.typ))
		t.sigs = append(t.sigs, declaredSig(c.typ))
	}
	return t
}

// TestMySQLFlavorRowsV2 reads the same MySQL events three ways: the
// table with a binary JSON column (decoded by go-mysql), without it
// (decoded by decode.go), and without it decoded by go-mysql.
func TestMySQLFlavorRowsV2(t *testing.T) {
	for _, c := range []struct {
		name           string
		json, standard bool
	}{{"json", true, false}, {"fast", false, false}, {"standard", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			setJSON(c.json)
			defer setJSON(true)
			testRowsV2(t, c.standard)
		})
	}
}

func testRowsV2(t *testing.T, standard bool) {
	if _, off := time.Now().Zone(); off != 5*3600+1800 {
		t.Fatalf("time.Local is at %+ds, want +05:30 (TestMain, zone_test.go, sets it)", off)
	}

	pos := decimalPacked(false, 1234, 56)
	neg := decimalPacked(true, 1234, 56)
	r1 := testRow{id: 1<<64 - 1, json: capturedJSON, dec: pos, enum: 2, set: 3, tsSec: 1704164645, tsFrac: 1230,
		dt: datetime2(2024, 1, 2, 3, 4, 5, 500000), bits: 1<<64 - 1, name: "héllo", float: 1.1}
	r2 := r1
	r2.id, r2.dec, r2.json, r2.name = 2, neg, nil, "x"
	r2b := r2
	r2b.id = 3 // the key changes
	r3 := testRow{id: 7, nullRest: true}

	w := &binlogWriter{pos: 4}
	w.add(replication.FORMAT_DESCRIPTION_EVENT, formatDescription())
	startPos := w.pos
	w.add(replication.GTID_EVENT, gtid(6))
	w.add(replication.QUERY_EVENT, query("app", "BEGIN"))
	w.add(replication.TABLE_MAP_EVENT, tableMapBody())
	w.add(replication.WRITE_ROWS_EVENTv2, writeRows(r1, r2, r3))
	writePos := w.pos
	w.add(replication.XID_EVENT, binary.LittleEndian.AppendUint64(nil, 99))
	end1 := w.pos
	w.add(replication.GTID_EVENT, gtid(7))
	w.add(replication.QUERY_EVENT, query("app", "BEGIN"))
	w.add(replication.TABLE_MAP_EVENT, tableMapBody())
	w.add(replication.UPDATE_ROWS_EVENTv2, updateRows([2]testRow{r2, r2b}))
	updPos := w.pos
	w.add(replication.TABLE_MAP_EVENT, tableMapBody()) // one per statement
	w.add(replication.DELETE_ROWS_EVENTv2, writeRows(r3))
	delPos := w.pos
	w.add(replication.XID_EVENT, binary.LittleEndian.AppendUint64(nil, 100))
	end2 := w.pos

	src := &Source{cfg: Config{Database: "app"}, log: slog.New(slog.DiscardHandler), standardDecode: standard,
		info: &serverInfo{flavor: FlavorMySQL, gtidMode: true, charsets: map[uint64]string{255: "utf8mb4", 63: "binary"}}}
	tbl := testTable()
	sp := &split{src: src, tables: []*table{tbl}, byName: map[string]*table{"t": tbl}, scratch: make([]byte, 0, 64)}
	start := position{file: "binlog.000003", idx: 3, pos: startPos, gtid: testSID.String() + ":1-5"}
	gt, err := newGTIDTracker(FlavorMySQL, start.gtid)
	if err != nil {
		t.Fatal(err)
	}
	em := &fakeEmitter{}
	r := &reader{sp: sp, e: em, flavor: FlavorMySQL, cur: start, last: state{flavor: FlavorMySQL, at: start}, gtid: gt,
		maps: map[uint64]*tableMap{}, lastMark: time.Now()}
	p := replication.NewBinlogParser()
	p.SetFlavor(gomysql.MySQLFlavor)
	p.SetTimestampStringLocation(time.UTC)
	p.SetRowsEventDecodeFunc(deferRows)
	for _, raw := range w.events {
		ev, err := p.Parse(raw)
		if err != nil {
			t.Fatalf("parse %v: %v", raw[4], err)
		}
		if err := r.event(ev, nil); err != nil {
			t.Fatalf("%s: %v", ev.Header.EventType, err)
		}
	}

	if m := r.maps[tableID]; m == nil || m.fast == withJSON {
		t.Fatalf("table map %+v: want decode.go to read it exactly when there is no JSON column", m)
	}
	// Row k of an event at [start, end) has seq file<<32 | start+k.
	seq := func(end uint32, size int, k int) int64 { return 3<<32 | int64(end) - int64(size) + int64(k) }
	wsize := 19 + len(writeRows(r1, r2, r3))
	usize := 19 + len(updateRows([2]testRow{r2, r2b}))
	dsize := 19 + len(writeRows(r3))
	full := []string{"18446744073709551615", `{"key1":"value1","key2":"value2"}`, "1234.56", "b", "x,y",
		"2024-01-02 03:04:05.123", "2024-01-02 03:04:05.500000", "18446744073709551615", "héllo", "1.1"}
	row2 := slices.Clone(full)
	row2[0], row2[1], row2[2], row2[8] = "2", "NULL", "-1234.56", "x"
	row3 := slices.Clone(row2)
	row3[0] = "3"
	null7 := []string{"7", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL"}
	if !withJSON {
		drop := func(p []string) []string { return append(p[:1:1], p[2:]...) }
		full, row2, row3, null7 = drop(full), drop(row2), drop(row3), drop(null7)
	}
	want := []rec{
		{source.OpInsert, seq(writePos, wsize, 0), keyOf(full[0]), full},
		{source.OpInsert, seq(writePos, wsize, 1), keyOf("2"), row2},
		{source.OpInsert, seq(writePos, wsize, 2), keyOf("7"), null7},
		{source.OpDelete, seq(updPos, usize, 0), keyOf("2"), row2},
		{source.OpUpdate, seq(updPos, usize, 1), keyOf("3"), row3},
		{source.OpDelete, seq(delPos, dsize, 0), keyOf("7"), null7},
	}
	if len(em.recs) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(em.recs), len(want), em.recs)
	}
	for i := range want {
		g, w := em.recs[i], want[i]
		if g.op != w.op || g.seq != w.seq || g.key != w.key || !slices.Equal(g.payload, w.payload) {
			t.Errorf("record %d:\n got %v %d %q %q\nwant %v %d %q %q", i, g.op, g.seq, g.key, g.payload, w.op, w.seq, w.key, w.payload)
		}
	}
	wantStates := []string{
		`{"v":2,"flavor":"mysql","file":"binlog.000003","pos":` + itoa(end1) + `,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-6"}`,
		`{"v":2,"flavor":"mysql","file":"binlog.000003","pos":` + itoa(end2) + `,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7"}`,
	}
	if !slices.Equal(em.states, wantStates) {
		t.Errorf("resume states\n%q\nwant\n%q", em.states, wantStates)
	}
	// The states decode back, strictly.
	for _, s := range em.states {
		st, err := decodeState([]byte(s))
		if err != nil || string(st.encode()) != s {
			t.Errorf("state %s: %v", s, err)
		}
	}
}

func keyOf(v string) string { return string(source.AppendRowValue(nil, []byte(v))) }

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// decimalPacked packs a DECIMAL(10,2) value: 8 integer digits in 4
// bytes, 2 fractional digits in 1 byte, big endian, the sign in the top
// bit, negative values inverted.
func decimalPacked(neg bool, integral uint32, frac byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, integral)
	b = append(b, frac)
	b[0] |= 0x80
	if neg {
		for i := range b {
			b[i] ^= 0xff
		}
	}
	return b
}
