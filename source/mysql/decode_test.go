package mysql_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl/source/mysql"
)

// randomExpr is an SQL expression giving a random value of each golden
// column's type, NULL one time in ten.
var randomExpr = map[string]string{
	"ti": "FLOOR(RAND()*256)-128", "tiu": "FLOOR(RAND()*256)", "si": "FLOOR(RAND()*65536)-32768", "siu": "FLOOR(RAND()*65536)",
	"mi": "FLOOR(RAND()*16777216)-8388608", "miu": "FLOOR(RAND()*16777216)", "i": "FLOOR(RAND()*4294967296)-2147483648",
	"iu": "FLOOR(RAND()*4294967296)", "bi": "CAST(FLOOR(RAND()*9e18) AS SIGNED) * IF(RAND()<0.5, -1, 1)",
	"biu":  "CAST(FLOOR(RAND()*1.8e19) AS UNSIGNED)",
	"dbig": "CAST(CONCAT(IF(RAND()<0.5,'-',''), FLOOR(RAND()*1e15), '.', LPAD(FLOOR(RAND()*1e15), 15, '0'), LPAD(FLOOR(RAND()*1e15), 15, '0')) AS DECIMAL(65,30))",
	"d38":  "CAST((RAND()-0.5)*1e20 AS DECIMAL(38,10))", "du": "CAST(RAND()*1e12 AS DECIMAL(20,4))",
	"f": "(RAND()-0.5)*POW(10, FLOOR(RAND()*60)-30)", "db": "(RAND()-0.5)*POW(10, FLOOR(RAND()*600)-300)",
	"b1": "FLOOR(RAND()*2)", "b64": "CAST(FLOOR(RAND()*1.8e19) AS UNSIGNED)", "bo": "FLOOR(RAND()*2)",
	"dt":  "DATE('1000-01-01') + INTERVAL FLOOR(RAND()*3000000) DAY",
	"dtm": "TIMESTAMP('1000-01-01') + INTERVAL FLOOR(RAND()*2.5e11) SECOND",
	"dt6": "TIMESTAMP('1000-01-01') + INTERVAL FLOOR(RAND()*2.5e17) MICROSECOND",
	"ts":  "FROM_UNIXTIME(1 + FLOOR(RAND()*2147483000) + ROUND(RAND(), 6))", "ts0": "FROM_UNIXTIME(1 + FLOOR(RAND()*2147483000))",
	"tm": "SEC_TO_TIME(ROUND(RAND()*6038000 - 3019000, 6))", "tm0": "SEC_TO_TIME(FLOOR(RAND()*6038000) - 3019000)",
	"y": "1901 + FLOOR(RAND()*255)", "c": "LEFT(MD5(RAND()), FLOOR(RAND()*6))", "vc": "REPEAT(MD5(RAND()), FLOOR(RAND()*9))",
	"l1": "CONVERT(CONCAT('é€', FLOOR(RAND()*1000)) USING latin1)", "tx": "REPEAT('ü', FLOOR(RAND()*300))",
	"bn": "LEFT(UNHEX(CONCAT(MD5(RAND()), '00000000')), FLOOR(RAND()*5))", "vb": "UNHEX(LEFT(MD5(RAND()), 2*FLOOR(RAND()*6)))",
	"bl": "UNHEX(REPEAT(MD5(RAND()), FLOOR(RAND()*20)))", "e": "ELT(1+FLOOR(RAND()*3), 'a', 'b', 'c')",
	"st": "MAKE_SET(FLOOR(RAND()*8), 'x', 'y', 'z')", "j": "JSON_OBJECT('k', RAND(), 'v', MD5(RAND()))",
}

// TestDecodeDifferential: random values of every golden type, inserted,
// updated (some keys changed) and deleted, read from the binlog by
// decode.go and by go-mysql's decoder, give the same records byte for
// byte.
func TestDecodeDifferential(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, goldenTable(db, "r", goldenCols))
	src := newSource(t, d, db, mysql.Config{})
	empty, _ := readOnce(t, src, nil, nil)
	var exprs []string
	for _, c := range goldenCols {
		exprs = append(exprs, fmt.Sprintf("IF(RAND() < 0.1, NULL, %s)", randomExpr[c.name]))
	}
	var sets []string
	for _, c := range goldenCols[:len(goldenCols)/2] {
		sets = append(sets, fmt.Sprintf("%s = IF(RAND() < 0.1, NULL, %s)", c.name, randomExpr[c.name]))
	}
	execSQL(t, d, "SET time_zone = '+05:30'",
		fmt.Sprintf("INSERT INTO %[1]s.r SELECT seq, %[2]s FROM %[1]s.seq_1_to_2000", db, strings.Join(exprs, ", ")),
		fmt.Sprintf("UPDATE %s.r SET %s WHERE id %% 3 = 0", db, strings.Join(sets, ", ")),
		fmt.Sprintf("UPDATE %s.r SET id = id + 10000 WHERE id %% 7 = 0", db),
		fmt.Sprintf("DELETE FROM %s.r WHERE id %% 5 = 0", db))
	fast, _ := readOnce(t, src, nil, empty.last())
	std := newSource(t, d, db, mysql.Config{})
	mysql.SetStandardDecode(std, true)
	standard, _ := readOnce(t, std, nil, empty.last())
	if len(fast.recs) != len(standard.recs) || len(fast.recs) < 3000 {
		t.Fatalf("decode.go read %d records, go-mysql %d", len(fast.recs), len(standard.recs))
	}
	bad := 0
	for i := range fast.recs {
		a, b := fast.recs[i], standard.recs[i]
		if a.Op != b.Op || a.Seq != b.Seq || !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Payload, b.Payload) {
			if bad++; bad < 5 {
				t.Errorf("record %d: decode.go %v %d %q\n%q\ngo-mysql %v %d %q\n%q", i, a.Op, a.Seq, a.Key, values(t, a.Payload), b.Op, b.Seq, b.Key, values(t, b.Payload))
			}
		}
	}
	t.Logf("%d records compared, %d differ", len(fast.recs), bad)
}
