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
}

// ReadIcebergTables reads every table of namespace in the SQL catalog
// named catalogName on the SQLite file dbPath, whose warehouse is
// warehouse (a file:// URL), with pyiceberg, independently of the Go code
// that wrote them.
func ReadIcebergTables(t testing.TB, catalogName, dbPath, warehouse, namespace string) map[string]*IcebergTable {
	t.Helper()
	py := Python(t)
	script := filepath.Join(Root(t), "internal", "testutil", "py", "iceberg_read.py")
	out := t.TempDir()
	cmd := exec.Command(py, script, catalogName, dbPath, warehouse, namespace, out)
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
		b, err := os.ReadFile(filepath.Join(out, name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var row map[string]any
			d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			d.UseNumber()
			if err := d.Decode(&row); err != nil {
				t.Fatalf("pyiceberg row of %s: %v", name, err)
			}
			tbl.Data = append(tbl.Data, row)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return res
}
