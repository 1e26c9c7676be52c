// Package testutil holds helpers shared by the project's tests: finding
// the module root and the Python interpreter with the independent readers
// (pyarrow) that check what the library wrote.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Root returns the module's root directory.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

var (
	pyOnce sync.Once
	pyPath string
	pyErr  error
)

// Python returns a python3 that can import pyarrow: $OPENETL_PYTHON when
// set, else the one scripts/test-tools.sh installs (idempotently). It
// fails the test when neither works: the independent reader is part of
// the check, never skipped.
func Python(t testing.TB) string {
	t.Helper()
	pyOnce.Do(func() {
		if p := os.Getenv("OPENETL_PYTHON"); p != "" {
			pyPath = p
			return
		}
		out, err := exec.Command(filepath.Join(Root(t), "scripts", "test-tools.sh")).Output()
		if err != nil {
			pyErr = err
			return
		}
		pyPath = strings.TrimSpace(string(out))
	})
	if pyErr != nil {
		t.Fatalf("installing the test tools (scripts/test-tools.sh): %v", pyErr)
	}
	return pyPath
}

// DBT returns the dbt executable (dbt-core with dbt-postgres) of the
// virtualenv scripts/test-tools.sh installs, beside Python's
// interpreter. It fails the test when there is none: set OPENETL_PYTHON
// to that virtualenv's python, or unset it.
func DBT(t testing.TB) string {
	t.Helper()
	dbt := filepath.Join(filepath.Dir(Python(t)), "dbt")
	if _, err := os.Stat(dbt); err != nil {
		t.Fatalf("dbt is not beside the test tools' python (%v): run scripts/test-tools.sh, or unset OPENETL_PYTHON", err)
	}
	return dbt
}
