package testutil_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
	"github.com/openetl/etl/source/sourcetest"
)

// TestHoldChild is the child of TestHoldSource: a faker sync through
// HoldSource; it prints the sync's result.
func TestHoldChild(t *testing.T) {
	dir := os.Getenv("TESTUTIL_HOLD_DIR")
	if dir == "" {
		t.Skip("child process of TestHoldSource")
	}
	src, err := faker.New(faker.Config{Seed: 1, Rows: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("hold").From(testutil.HoldSource(src)).To(sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{})).
		Checkpoints(store).EpochEvery(10*time.Millisecond, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SYNCED %d\n", res.Streams[faker.Orders].Read)
}

// TestHoldSource: a child holding the orders split after 500 records says
// so and never finishes (it is killed, not ended); its checkpoints reach
// the hold point; without a hold the same child syncs to the end.
func TestHoldSource(t *testing.T) {
	dir := t.TempDir()
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHoldChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TESTUTIL_HOLD_DIR="+dir)
		return cmd
	}
	c := testutil.StartChild(t, child(), testutil.Hold{After: 500, Splits: "^orders/"})
	select {
	case id := <-c.Held():
		if !strings.HasPrefix(id, "orders/") {
			t.Fatalf("split %q held, want an orders split", id)
		}
	case <-c.Exited():
		t.Fatalf("the child exited without holding: %v\n%s", c.Err(), c.Output())
	}
	// The runner commits up to the held split's resume point.
	testutil.Until(t, "a checkpoint at the hold point", func() bool {
		st, ok := ordersCommitted(t, dir)
		return ok && st >= 500
	})
	if !c.Kill() {
		t.Fatalf("the held child was not ended by the kill: %v\n%s", c.Err(), c.Output())
	}
	c = testutil.StartChild(t, child(), testutil.Hold{})
	if err := c.Wait(); err != nil || !strings.Contains(c.Output(), "SYNCED") {
		t.Fatalf("unheld child: %v\n%s", err, c.Output())
	}
}

// ordersCommitted returns the orders split's position (the index of its
// next record) in the newest checkpoint record under dir.
func ordersCommitted(t *testing.T, dir string) (int64, bool) {
	m, _ := filepath.Glob(filepath.Join(dir, "hold", "_checkpoints", "*-*.json"))
	if len(m) == 0 {
		return 0, false
	}
	slices.Sort(m)
	b, err := os.ReadFile(m[len(m)-1])
	if err != nil {
		return 0, false
	}
	var r checkpoint.Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", m[len(m)-1], err)
	}
	st := r.Resume["orders/0"]
	if len(st) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(st)), true
}

// TestHoldChildOutput is the child of TestBlockOutput: it writes a line,
// waits for one on stdin, and writes another.
func TestHoldChildOutput(t *testing.T) {
	if os.Getenv("TESTUTIL_OUTPUT_CHILD") == "" {
		t.Skip("child process of TestBlockOutput")
	}
	fmt.Println("first")
	bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Println("second")
}

// TestBlockOutput: once the test blocks a child's output, the child's
// next write waits (in pipe_write) until the child is killed.
func TestBlockOutput(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldChildOutput$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTUTIL_OUTPUT_CHILD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := testutil.StartChild(t, cmd, testutil.Hold{})
	for !strings.Contains(c.Output(), "first\n") {
		select {
		case <-c.Wrote():
		case <-c.Exited():
			t.Fatalf("child exited: %v\n%s", c.Err(), c.Output())
		}
	}
	if err := c.BlockOutput(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "go on")
	// A thread of the child waits in its write of "second".
	testutil.Until(t, "the child's write to block", func() bool {
		select {
		case <-c.Exited():
			t.Fatalf("child exited with its output blocked: %v\n%s", c.Err(), c.Output())
		default:
		}
		return inStdoutWrite(cmd.Process.Pid)
	})
	if !c.Kill() {
		t.Fatalf("child not killed: %v", c.Err())
	}
	if out := c.Output(); !strings.Contains(out, "first") || strings.Contains(out, "second") {
		t.Fatalf("output %q: want the first line only", out)
	}
}

// inStdoutWrite reports whether a thread of process pid is in a write(2)
// to its stdout.
func inStdoutWrite(pid int) bool {
	m, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	for _, f := range m {
		if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), "1 0x1 ") {
			return true
		}
	}
	return false
}

// TestHoldSourceForwards: the hold wrapper forwards every optional
// capability of the source contract, so a kill test's source reports
// what the source it wraps reports.
func TestHoldSourceForwards(t *testing.T) {
	_, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	t.Setenv("OPENETL_TEST_HOLD", "1000000 .*") // holds no probe split
	t.Setenv("OPENETL_TEST_HOLD_FD", "")
	sourcetest.CheckWrapper(t, func(src source.Source) source.Source {
		// The wrapper takes the report pipe's descriptor as its own.
		fd, err := syscall.Dup(int(w.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		os.Setenv("OPENETL_TEST_HOLD_FD", strconv.Itoa(fd))
		wrapped := testutil.HoldSource(src)
		if wrapped == src {
			t.Fatal("HoldSource did not wrap the source")
		}
		return wrapped
	})
}
