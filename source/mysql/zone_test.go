package mysql_test

import (
	"os"
	"testing"
	"time"
)

// zoneOffset is the machine's zone (time.Local) the package's tests run
// in: values read must not depend on it.
const zoneOffset = 5*3600 + 1800

// TestMain sets time.Local to +05:30 before any goroutine reads it. Tests
// that set it themselves raced (under -race) with timers an earlier
// test's pipeline left running, which read it.
func TestMain(m *testing.M) {
	time.Local = time.FixedZone("test+0530", zoneOffset)
	os.Exit(m.Run())
}

// localZone fails t unless time.Local is the zone TestMain sets, so that
// a test relying on a zone other than UTC says so.
func localZone(t *testing.T) {
	t.Helper()
	if _, off := time.Now().Zone(); off != zoneOffset {
		t.Fatalf("time.Local is at %+ds, want +05:30 (TestMain sets it)", off)
	}
}
