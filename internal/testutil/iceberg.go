package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// IcebergTable is what the independent reader (pyiceberg) found in one
// table of a SQL catalog on SQLite: its current snapshot with deletes
// applied.
type IcebergTable struct {
	Rows          int64             `json:"rows"`
	DistinctIDs   int64             `json:"distinct_ids"`
	DistinctSeqs  int64             `json:"distinct_seqs"`
	Columns       []string          `json:"columns"`
	Properties    map[string]string `json:"properties"`
	Snapshots     int               `json:"snapshots"`
	DataFiles     int               `json:"data_files"`
	DeleteFiles   int               `json:"delete_files"`
	FormatVersion int               `json:"format_version"`
	// Reader is how the rows were read: "pyiceberg-scan", or, for tables
	// with equality deletes (which pyiceberg 0.12 can't scan),
	// "pyiceberg-metadata+spec-equality-deletes": pyiceberg's manifest
	// entries, pyarrow for the files, the spec's delete rule in Python.
	Reader string `json:"reader"`
	// Data holds every row: column name → value (strings, numbers,
	// booleans as JSON gives them; other types in their Python str()
	// form; null as nil).
	Data []map[string]any `json:"-"`
	// DuckDB holds every row as DuckDB's iceberg extension reads the
	// table's current metadata file, the same way, when the reader was
	// asked for it (ReadIcebergTablesWithDuckDB); DuckDBRows counts them.
	DuckDB     []map[string]any `json:"-"`
	DuckDBRows *int64           `json:"duckdb_rows"`
}

// ReadIcebergTables reads every table of namespace in the SQL catalog
// named catalogName on the SQLite file dbPath, whose warehouse is
// warehouse (a file:// URL), with pyiceberg, independently of the Go code
// that wrote them.
func ReadIcebergTables(t testing.TB, catalogName, dbPath, warehouse, namespace string) map[string]*IcebergTable {
	t.Helper()
	return readIcebergTables(t, catalogName, dbPath, warehouse, namespace, false)
}

// ReadIcebergTablesWithDuckDB is ReadIcebergTables, and in the same
// Python process DuckDB's iceberg extension reads every table too
// (IcebergTable.DuckDB). The extension comes from PyPI's
// duckdb-extension-iceberg package, which scripts/test-tools.sh
// installs beside DuckDB; the reader fails when it can't load it.
func ReadIcebergTablesWithDuckDB(t testing.TB, catalogName, dbPath, warehouse, namespace string) map[string]*IcebergTable {
	t.Helper()
	return readIcebergTables(t, catalogName, dbPath, warehouse, namespace, true)
}

func readIcebergTables(t testing.TB, catalogName, dbPath, warehouse, namespace string, duck bool) map[string]*IcebergTable {
	t.Helper()
	py := Python(t)
	script := filepath.Join(Root(t), "internal", "testutil", "py", "iceberg_read.py")
	out := t.TempDir()
	args := []string{script, catalogName, dbPath, warehouse, namespace, out}
	if duck {
		args = append(args, "--duckdb")
	}
	cmd := exec.Command(py, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg reader: %v", err)
	}
	var res map[string]*IcebergTable
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatalf("pyiceberg reader output %q: %v", stdout, err)
	}
	for name, tbl := range res {
		tbl.Data = readRows(t, filepath.Join(out, name+".jsonl"))
		if duck {
			tbl.DuckDB = readRows(t, filepath.Join(out, name+".duckdb.jsonl"))
		}
	}
	return res
}

// readRows reads a file of JSON objects, one per line.
func readRows(t testing.TB, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var row map[string]any
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		if err := d.Decode(&row); err != nil {
			t.Fatalf("row of %s: %v", path, err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// ReadIcebergWithSpark reads tables of namespace ns through the REST
// catalog at uri with Apache Spark and Iceberg's Spark runtime
// (internal/testutil/py/spark_read.py; scripts/test-tools.sh installs
// pyspark in the virtualenv and the runtime jar beside it), which applies
// the tables' deletes itself. It returns every row by table, in the form
// of IcebergTable.Data, so that the two readers' rows compare as they
// are.
func ReadIcebergWithSpark(t testing.TB, uri, ns string, tables ...string) map[string][]map[string]any {
	t.Helper()
	py := Python(t)
	jar := filepath.Join(filepath.Dir(filepath.Dir(py)), "share", "openetl", "iceberg-spark-runtime.jar")
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("Iceberg's Spark runtime (scripts/test-tools.sh installs it): %v", err)
	}
	out := t.TempDir()
	args := append([]string{filepath.Join(Root(t), "internal", "testutil", "py", "spark_read.py"), jar, uri, ns, out}, tables...)
	cmd := exec.Command(py, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("Spark reader: %v\n%s", err, stderr.Bytes())
	}
	var res map[string]struct {
		Rows int `json:"rows"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatalf("Spark reader output %q: %v\n%s", stdout, err, stderr.Bytes())
	}
	got := map[string][]map[string]any{}
	for _, name := range tables {
		rows := readRows(t, filepath.Join(out, name+".spark.jsonl"))
		if len(rows) != res[name].Rows {
			t.Fatalf("Spark reader: %s: %d rows written, %d counted", name, len(rows), res[name].Rows)
		}
		got[name] = rows
	}
	return got
}
