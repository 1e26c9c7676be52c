package mysql

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl/source"
)

// TestGTIDPositions: both flavors' GTID positions parse, print back in
// canonical form and advance one transaction at a time; MySQL's
// anonymous GTIDs (gtid_mode=OFF) leave the position alone.
func TestGTIDPositions(t *testing.T) {
	for _, c := range []struct{ flavor, in, out string }{
		{FlavorMariaDB, "0-1-10", "0-1-10"},
		{FlavorMariaDB, "1-2-5,0-1-10", "0-1-10,1-2-5"},
		{FlavorMySQL, "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"},
		{FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,\n2174b383-5441-11e8-b90a-c80aa9429562:1-3",
			"2174b383-5441-11e8-b90a-c80aa9429562:1-3,3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9"},
		{FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:tag_a:1-2", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:tag_a:1-2"},
	} {
		g, err := parseGTID(c.flavor, c.in)
		if err != nil || g.String() != c.out {
			t.Errorf("%s %q: %v %v, want %q", c.flavor, c.in, g, err, c.out)
		}
	}
	for _, bad := range [][2]string{{FlavorMariaDB, "0-1"}, {FlavorMariaDB, "x-1-2"}, {FlavorMySQL, "not-a-uuid:1-5"}, {FlavorMySQL, "0-1-10"}} {
		if _, err := parseGTID(bad[0], bad[1]); err == nil {
			t.Errorf("%s %q parsed", bad[0], bad[1])
		}
	}

	// MariaDB: one GTID per domain, the latest.
	tr, err := newGTIDTracker(FlavorMariaDB, "0-1-10")
	if err != nil {
		t.Fatal(err)
	}
	tr.beginMariaDB(gomysql.MariadbGTID{DomainID: 0, ServerID: 1, SequenceNumber: 11})
	must(t, tr.commit())
	tr.beginMariaDB(gomysql.MariadbGTID{DomainID: 2, ServerID: 3, SequenceNumber: 1})
	must(t, tr.commit())
	if tr.str != "0-1-11,2-3-1" {
		t.Errorf("MariaDB position %q", tr.str)
	}
	must(t, tr.commit()) // a commit without a GTID (non-transactional) changes nothing
	if tr.str != "0-1-11,2-3-1" {
		t.Errorf("MariaDB position %q", tr.str)
	}

	// MySQL: a set of intervals per server UUID.
	tr, err = newGTIDTracker(FlavorMySQL, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
	if err != nil {
		t.Fatal(err)
	}
	sid := []byte{0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62}
	must(t, tr.beginMySQL(sid, gomysql.Tag{}, 6))
	must(t, tr.commit())
	must(t, tr.beginMySQL(make([]byte, 16), gomysql.Tag{}, 0)) // anonymous
	must(t, tr.commit())
	must(t, tr.beginMySQL(sid, gomysql.NewTag("Tag_A"), 3))
	must(t, tr.commit())
	if want := "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-6:tag_a:3"; tr.str != want {
		t.Errorf("MySQL set %q, want %q", tr.str, want)
	}
	// GTIDs off: no position at all.
	tr, err = newGTIDTracker(FlavorMySQL, "")
	if err != nil {
		t.Fatal(err)
	}
	must(t, tr.beginMySQL(make([]byte, 16), gomysql.Tag{}, 0))
	must(t, tr.commit())
	if tr.str != "" {
		t.Errorf("anonymous GTIDs gave %q", tr.str)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestStates(t *testing.T) {
	good := []string{
		`{"v":1,"flavor":"mariadb","file":"bin.000001","pos":4,"gtid":"0-1-3"}`,
		`{"v":1,"flavor":"mysql","file":"binlog.000012","pos":1234}`,
		`{"v":1,"flavor":"mysql","file":"binlog.000012","pos":1234,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}`,
		`{"v":2,"flavor":"mariadb","file":"bin.000001","pos":4,"gtid":"0-1-3"}`,
		`{"v":2,"flavor":"mariadb","file":"bin.000001","pos":4,"gtid":"0-1-3","copied":["a","b"],"skip":{"b":{"file":"bin.000002","pos":120}}}`,
		`{"v":2,"flavor":"mariadb","file":"bin.000002","pos":300,"gtid":"0-1-9","origins":{"a":{"file":"bin.000001","pos":4,"gtid":"0-1-3"},"b":{"file":"bin.000002","pos":120,"gtid":"0-1-7"}}}`,
		`{"v":2,"flavor":"mysql","file":"b.2","pos":300,"origins":{"a":{"file":"b.1","pos":4}}}`,
	}
	for _, s := range good {
		st, err := decodeState([]byte(s))
		if err != nil || string(st.encode()) != s {
			t.Errorf("%s: %v, encodes to %s", s, err, st.encode())
		}
	}
	bad := []string{
		``, `{}`, `null`, `{"v":3,"flavor":"mysql","file":"b.1","pos":4}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"copied":["a"]}`,
		`{"v":2,"flavor":"mysql","file":"b.1","pos":4,"copied":["b","a"]}`,
		`{"v":2,"flavor":"mysql","file":"b.1","pos":4,"skip":{"a":{"file":"b","pos":4}}}`,
		`{"v":2,"flavor":"mysql","file":"b.1","pos":4,"skip":{"a":{"file":"b.2","pos":1}}}`,
		`{"v":2,"flavor":"mysql","file":"b.1","pos":4,"skip":{"a":{"file":"b.2","pos":4,"gtid":"x"}}}`,
		`{"v":2,"flavor":"mysql","file":"b.1","pos":4,"origins":{"a":{"file":"b","pos":4}}}`,
		`{"v":2,"flavor":"mysql","file":"b.1","pos":4,"origins":{"a":{"file":"b.1","pos":3}}}`,
		`{"v":2,"flavor":"mariadb","file":"b.1","pos":4,"origins":{"a":{"file":"b.1","pos":4,"gtid":"1-1-1,0-1-3"}}}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"origins":{"a":{"file":"b.1","pos":4}}}`,
		`{"v":1,"flavor":"postgres","file":"b.1","pos":4}`,
		`{"v":1,"flavor":"mysql","file":"binlog","pos":4}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":3}`,
		`{"v":1,"flavor":"mariadb","file":"b.1","pos":4,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"gtid":"0-1-3"}`,
		`{"v":1,"flavor":"mariadb","file":"b.1","pos":4,"gtid":"1-1-1,0-1-3"}`, // not canonical
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"extra":1}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4}garbage`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4}{}`,
	}
	for _, s := range bad {
		if _, err := decodeState([]byte(s)); !errors.Is(err, ErrBadState) {
			t.Errorf("%q: %v, want ErrBadState", s, err)
		}
	}
}

// FuzzDecodeState: any bytes either fail with ErrBadState or decode to
// a state that encodes back to a state decoding the same.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"v":1,"flavor":"mariadb","file":"bin.000001","pos":4,"gtid":"0-1-3"}`))
	f.Add([]byte(`{"v":1,"flavor":"mysql","file":"binlog.000012","pos":1234,"gtid":"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}`))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("%q: %v", b, err)
			}
			return
		}
		st2, err := decodeState(st.encode())
		if err != nil || !bytes.Equal(st2.encode(), st.encode()) {
			t.Fatalf("%q → %s → %v", b, st.encode(), err)
		}
	})
}

func TestPositions(t *testing.T) {
	a, _ := parsePosition("bin.000009", "4000000000")
	b, _ := parsePosition("bin.000010", "4")
	if !a.before(b) || b.before(a) || a.seq() >= b.seq() || a.seq() != 9<<32|4000000000 {
		t.Errorf("positions %+v %+v: seqs %d %d", a, b, a.seq(), b.seq())
	}
	for _, bad := range []string{"bin", "bin.", "bin.x", "bin.-1"} {
		if _, err := fileIndex(bad); err == nil {
			t.Errorf("file %q has an index", bad)
		}
	}
}

func TestDeclaredSig(t *testing.T) {
	for in, want := range map[string]string{
		"int(11)": "int", "int(10) unsigned": "int unsigned", "bigint(20) unsigned zerofill": "bigint unsigned",
		"tinyint(1)": "tinyint", "decimal(65,30)": "decimal(65,30)", "decimal(10,2) unsigned": "decimal(10,2) unsigned",
		"float": "float", "float(30)": "double", "double": "double", "varchar(20)": "", "enum('a','b')": "", "year(4)": "",
		"bit(8)": "", "mediumint(8) unsigned": "mediumint unsigned", "smallint(6)": "smallint",
	} {
		if got := declaredSig(in); got != want {
			t.Errorf("declaredSig(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseDSN(t *testing.T) {
	for in, want := range map[string]dsn{
		"etl:secret@127.0.0.1:3306/app":      {"etl", "secret", "127.0.0.1:3306", "app"},
		"etl:p@ss@tcp(db:3307)/app?tls=true": {"etl", "p@ss", "db:3307", "app"},
		"root@unix(/tmp/s.sock)/x":           {"root", "", "/tmp/s.sock", "x"},
	} {
		got, err := parseDSN(in)
		if err != nil || got != want {
			t.Errorf("parseDSN(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := parseDSN("etl:secret"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad DSN: %v (must not show the password)", err)
	}
}

func TestLatin1(t *testing.T) {
	if got := string(latin1ToUTF8(nil, []byte{'a', 0xe9, 0x80, 0xff, 0x81})); got != "aé€ÿ\u0081" {
		t.Errorf("latin1 %q", got)
	}
}

// TestCheckSettings: each setting the source needs is named when wrong.
func TestCheckSettings(t *testing.T) {
	ok := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
	if err := checkSettings(FlavorMySQL, ok); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ flavor, name, value string }{
		{FlavorMariaDB, "log_bin", "OFF"}, {FlavorMariaDB, "binlog_format", "MIXED"}, {FlavorMySQL, "binlog_row_image", "NOBLOB"},
		{FlavorMariaDB, "binlog_row_metadata", "NO_LOG"}, {FlavorMySQL, "binlog_row_metadata", "MINIMAL"},
		{FlavorMySQL, "binlog_row_value_options", "PARTIAL_JSON"},
	} {
		vars := map[string]string{}
		for k, v := range ok {
			vars[k] = v
		}
		vars[c.name] = c.value
		err := checkSettings(c.flavor, vars)
		var se *SettingsError
		if !errors.As(err, &se) || se.Variable != c.name || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%s on %s: %v", c.name, c.value, c.flavor, err)
		}
	}
	// A server without binlog_row_metadata (MySQL 5.7, MariaDB 10.4).
	vars := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
	if err := checkSettings(FlavorMariaDB, vars); err == nil || !strings.Contains(err.Error(), "MariaDB 10.5") {
		t.Errorf("no binlog_row_metadata: %v", err)
	}
}

func TestSnapStates(t *testing.T) {
	good := []string{
		`{"v":1,"flavor":"mariadb","file":"bin.000001","pos":4,"gtid":"0-1-3"}`,
		`{"v":1,"flavor":"mysql","file":"binlog.000012","pos":1234,"after":["MTI=","YQ=="],"rows":2000}`,
		`{"v":1,"flavor":"mysql","file":"binlog.000012","pos":1234,"done":true,"rows":5}`,
	}
	for _, s := range good {
		st, err := decodeSnapState([]byte(s))
		if err != nil || string(st.encode()) != s {
			t.Errorf("%s: %v, encodes to %s", s, err, st.encode())
		}
	}
	bad := []string{
		``, `{}`, `{"v":2,"flavor":"mysql","file":"b.1","pos":4}`,
		`{"v":1,"flavor":"postgres","file":"b.1","pos":4}`,
		`{"v":1,"flavor":"mysql","file":"b","pos":4}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"rows":-1}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"after":["!"]}`,
		`{"v":1,"flavor":"mysql","file":"b.1","pos":4,"extra":1}`,
	}
	for _, s := range bad {
		if _, err := decodeSnapState([]byte(s)); !errors.Is(err, ErrBadState) {
			t.Errorf("%q: %v, want ErrBadState", s, err)
		}
	}
}

func TestKeysetLiterals(t *testing.T) {
	for _, c := range []struct {
		k    litKind
		v    string
		want string
	}{
		{litNumber, "-12", "-12"},
		{litNumber, "18446744073709551615", "18446744073709551615"},
		{litNumber, "12.50", "12.50"},
		{litQuoted, "2024-01-02 03:04:05.123456", "'2024-01-02 03:04:05.123456'"},
		{litQuoted, "-838:59:59", "'-838:59:59'"},
		{litText, "é'\\", "_utf8mb4 X'c3a9275c'"},
		{litText, "", "_utf8mb4''"},
		{litBinary, "\x00\xff", "X'00ff'"},
		{litBinary, "", "_binary''"},
	} {
		got, err := appendLiteral(nil, c.k, []byte(c.v))
		if err != nil || string(got) != c.want {
			t.Errorf("%d %q: %s, %v; want %s", c.k, c.v, got, err, c.want)
		}
	}
	for _, c := range []struct {
		k litKind
		v string
	}{{litNumber, "1 OR 1=1"}, {litNumber, ""}, {litNumber, "1-2"}, {litQuoted, "2024-01-01' OR '1"}, {litNone, "1"}} {
		if got, err := appendLiteral(nil, c.k, []byte(c.v)); err == nil {
			t.Errorf("%d %q: %s, want an error", c.k, c.v, got)
		}
	}
	for _, dt := range []string{"float", "double", "enum", "set", "bit", "text", "blob", "json", "geometry"} {
		if literalKind(dt) != litNone {
			t.Errorf("%s keys are paged", dt)
		}
	}
	tbl := &table{name: "t", stream: source.Stream{Columns: []source.Column{{Name: "a"}, {Name: "b`c"}}}, key: []int{0, 1},
		keyLits: []litKind{litNumber, litText}}
	sp := &snapSplit{t: tbl, st: snapState{after: [][]byte{[]byte("7"), []byte("x")}}}
	got, err := sp.where(nil)
	if want := " WHERE (`a` > 7) OR (`a` = 7 AND `b``c` > _utf8mb4 X'78')"; err != nil || string(got) != want {
		t.Errorf("where: %s, %v; want %s", got, err, want)
	}
	sp.st.after = sp.st.after[:1]
	if _, err := sp.where(nil); !errors.Is(err, ErrBadState) {
		t.Errorf("where after a key of the wrong length: %v", err)
	}
}
