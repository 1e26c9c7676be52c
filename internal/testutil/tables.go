package testutil

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TableStats is what the independent reader (pyarrow) found in one
// stream's Parquet table by following its manifest.
type TableStats struct {
	Rows         int64    `json:"rows"`
	DistinctIDs  int64    `json:"distinct_ids"`
	DistinctSeqs int64    `json:"distinct_seqs"`
	ManifestRows int64    `json:"manifest_rows"`
	ExtraFiles   []string `json:"extra_files"`
	MissingFiles []string `json:"missing_files"`
	Columns      []string `json:"columns"`
	// Seqs are the _openetl_seq values of every row, sorted.
	Seqs []int64 `json:"-"`
	// Values are every column's values, by column name, in the files'
	// order (as JSON decodes them; other types as their text).
	Values map[string][]any `json:"-"`
}

// ReadParquetTables reads every stream under a sink/parquet directory
// (prefix "") with pyarrow, independently of the Go code that wrote it.
func ReadParquetTables(t testing.TB, tablesDir string) map[string]*TableStats {
	t.Helper()
	return ReadParquetTablesUnder(t, tablesDir, "")
}

// ReadParquetTablesUnder is ReadParquetTables for a destination with a
// prefix: bucketDir is the bucket's directory (the keys in manifests are
// relative to it), and the tables are under bucketDir/prefix.
func ReadParquetTablesUnder(t testing.TB, bucketDir, prefix string) map[string]*TableStats {
	t.Helper()
	py := Python(t)
	script := filepath.Join(Root(t), "internal", "testutil", "py", "read_parquet_tables.py")
	out := t.TempDir()
	cmd := exec.Command(py, script, filepath.Join(bucketDir, prefix), out, bucketDir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow reader: %v", err)
	}
	var res map[string]*TableStats
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatalf("pyarrow reader output %q: %v", stdout, err)
	}
	for stream, st := range res {
		b, err := os.ReadFile(filepath.Join(out, stream+".seq"))
		if err != nil {
			t.Fatal(err)
		}
		vb, err := os.ReadFile(filepath.Join(out, stream+".values.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(vb, &st.Values); err != nil {
			t.Fatalf("pyarrow reader values: %v", err)
		}
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			st.Seqs = append(st.Seqs, n)
		}
	}
	return res
}
