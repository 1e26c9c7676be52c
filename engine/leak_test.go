package engine_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

// rss returns the process's resident set in bytes (Linux).
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm:", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestNoLeaks pushes 200,000 tiny batches (JSON and declared rows,
// alternating; 20,000 with -short; OPENETL_LEAK_PUSHES sets the
// count — a million took 29 s here, ~29 µs per push of fixed cgo and C
// Data Interface cost) and checks that Go's heap and the
// process's resident memory (which holds the Rust heap and every Arrow
// buffer the engine exports) stop growing after warm-up. The Rust heap
// itself is counted exactly by the crate's tests/leak.rs.
func TestNoLeaks(t *testing.T) {
	if raceEnabled {
		// It pushes from one goroutine, so the detector has nothing to
		// find, and its own bookkeeping grows the resident memory the
		// test measures (by 10.9 MB over 20,000 pushes here).
		t.Skip("-race: one goroutine, and the detector's memory is in the RSS measured")
	}
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	if v, err := strconv.Atoi(os.Getenv("OPENETL_LEAK_PUSHES")); err == nil && v > 0 {
		n = v
	}
	e := newEngine(t, engine.Config{Lanes: 2, Streams: []engine.StreamSpec{
		rowSpec("r", "", "id", "int8", "n", "numeric(8,2)", "a", "_text"),
	}})
	jb := &engine.RawBatch{Stream: "j"}
	jb.Append(uint8(source.OpInsert), 1, []byte("k"), []byte(`{"a":1,"b":"x\ny"}`))
	jb.Append(uint8(source.OpInsert), 2, nil, []byte(`not json`))
	rb := &engine.RawBatch{Stream: "r"}
	rb.Append(uint8(source.OpInsert), 1, []byte("k"), row("1", "2.50", `{x,"y z"}`))
	rb.Append(uint8(source.OpInsert), 2, nil, row("x", null, null))
	pushOnce := func(b *engine.RawBatch) {
		out, err := e.Push(b, syncedAt)
		if err != nil {
			t.Fatal(err)
		}
		if out.Record == nil || out.Record.NumRows() != 1 || len(out.Quarantined) != 1 {
			t.Fatalf("unexpected output %v %v", out.Record, out.Quarantined)
		}
		out.Record.Release()
	}
	var ms runtime.MemStats
	heap := func() uint64 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for i := 0; i < 1000; i++ {
		pushOnce(jb)
		pushOnce(rb)
	}
	h0, r0 := heap(), rss(t)
	for i := 0; i < n/2; i++ {
		pushOnce(jb)
		pushOnce(rb)
	}
	h1, r1 := heap(), rss(t)
	t.Logf("%d pushes: Go heap %d → %d bytes, RSS %d → %d bytes", n, h0, h1, r0, r1)
	if h1 > h0+1<<20 {
		t.Errorf("Go heap grew by %d bytes over %d pushes", h1-h0, n)
	}
	// A leak of even 16 bytes per push would add 16 MB.
	if r1 > r0+8<<20 {
		t.Errorf("resident memory grew by %d bytes over %d pushes", r1-r0, n)
	}
}
