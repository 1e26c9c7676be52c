package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/faker"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quickstart-bin")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "quickstart")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building quickstart: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the quickstart to completion and returns its output.
func run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("quickstart %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

var summaryLine = regexp.MustCompile(`(?m)^\s+(\w+)\s+written\s+(\d+)\s+quarantined\s+(\d+)\s+\(read (\d+)\)`)

type counts struct{ written, quarantined, read int64 }

func summary(t *testing.T, out string) map[string]counts {
	t.Helper()
	res := map[string]counts{}
	for _, m := range summaryLine.FindAllStringSubmatch(out, -1) {
		w, _ := strconv.ParseInt(m[2], 10, 64)
		q, _ := strconv.ParseInt(m[3], 10, 64)
		r, _ := strconv.ParseInt(m[4], 10, 64)
		res[m[1]] = counts{w, q, r}
	}
	if len(res) != 2 {
		t.Fatalf("summary lists %d streams, want 2:\n%s", len(res), out)
	}
	return res
}

// expected returns, per stream, the seq of every record the faker
// generates that is a JSON object (the others are malformed).
func expected(t *testing.T, rows int64, malformed float64) map[string][]int64 {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows, MalformedShare: malformed})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int64{}
	var buf []byte
	for _, stream := range []string{faker.Customers, faker.Orders} {
		for i := range rows {
			_, seq, key, payload := src.Generate(stream, i, buf)
			buf = key[:0]
			if json.Valid(payload) && len(payload) > 0 && payload[0] == '{' {
				out[stream] = append(out[stream], seq)
			}
		}
	}
	return out
}

// verify checks the tables with pyarrow: every well-formed generated
// record exactly once, ids unique, files exactly those of the manifests,
// and quarantine files holding exactly the malformed ones.
func verify(t *testing.T, dir string, rows int64, malformed float64, sum map[string]counts) {
	t.Helper()
	want := expected(t, rows, malformed)
	got := testutil.ReadParquetTables(t, filepath.Join(dir, "tables"))
	for stream, seqs := range want {
		st := got[stream]
		if st == nil {
			t.Fatalf("stream %s: no table", stream)
		}
		if st.Rows != int64(len(seqs)) || st.DistinctIDs != st.Rows || st.DistinctSeqs != st.Rows || st.ManifestRows != st.Rows {
			t.Errorf("stream %s: rows %d distinct ids %d distinct seqs %d manifest rows %d; want %d of each",
				stream, st.Rows, st.DistinctIDs, st.DistinctSeqs, st.ManifestRows, len(seqs))
		}
		if len(st.ExtraFiles)+len(st.MissingFiles) > 0 {
			t.Errorf("stream %s: files not in the manifest %v, listed but missing %v", stream, st.ExtraFiles, st.MissingFiles)
		}
		for i := range min(len(seqs), len(st.Seqs)) {
			if seqs[i] != st.Seqs[i] {
				t.Fatalf("stream %s: %d-th seq is %d, want %d", stream, i, st.Seqs[i], seqs[i])
			}
		}
		c := sum[stream]
		if c.written != st.Rows || c.read != rows || c.read != c.written+c.quarantined {
			t.Errorf("stream %s: summary %+v, pyarrow rows %d, generated %d", stream, c, st.Rows, rows)
		}
		lines, reasons := quarantined(t, filepath.Join(dir, "checkpoints", "quickstart", "_quarantine", stream))
		if lines != rows-int64(len(seqs)) || lines != c.quarantined {
			t.Errorf("stream %s: %d quarantined lines, summary says %d, generated %d malformed", stream, lines, c.quarantined, rows-int64(len(seqs)))
		}
		if reasons["parse_error"] != lines {
			t.Errorf("stream %s: quarantine reasons %v", stream, reasons)
		}
	}
}

func quarantined(t *testing.T, dir string) (int64, map[string]int64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var n int64
	reasons := map[string]int64{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var l struct {
				Reason  string `json:"reason"`
				Payload string `json:"payload"`
				B64     string `json:"payload_base64"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if l.Payload == "" && l.B64 == "" {
				t.Fatalf("%s: quarantined record without its raw bytes", f)
			}
			reasons[l.Reason]++
			n++
		}
	}
	return n, reasons
}

func TestQuickstartOutputReadByPyarrow(t *testing.T) {
	dir := t.TempDir()
	const rows, malformed = 30_000, 0.01
	args := []string{"-dir", dir, "-rows", strconv.Itoa(rows), "-malformed", "0.01", "-epoch", "100ms"}
	out := run(t, args...)
	sum := summary(t, out)
	verify(t, dir, rows, malformed, sum)
	if !strings.Contains(out, "query them:") {
		t.Errorf("summary has no query command:\n%s", out)
	}
	// Running it again continues from the checkpoint and adds nothing.
	out2 := run(t, args...)
	if !strings.Contains(out2, "nothing new") {
		t.Errorf("second run:\n%s", out2)
	}
	verify(t, dir, rows, malformed, summary(t, out2))
}

// seededRNG returns a random source from $OPENETL_SEED, or from the clock,
// and logs the command that replays the test with it.
func seededRNG(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("OPENETL_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^%s$' ./examples/quickstart)", seed, seed, t.Name())
	return rand.New(rand.NewPCG(seed, stream))
}

// TestQuickstartSurvivesSIGKILL kills the quickstart at random points,
// reruns it to completion and checks every generated record landed
// exactly once. OPENETL_SEED replays a failing seed.
func TestQuickstartSurvivesSIGKILL(t *testing.T) {
	rng := seededRNG(t, 0)
	dir := t.TempDir()
	const rows, malformed = 200_000, 0.002
	args := []string{"-dir", dir, "-rows", strconv.Itoa(rows), "-malformed", "0.002", "-epoch", "150ms"}
	killed := 0
	for range 5 {
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		if err != nil {
			killed++
		} else if !strings.Contains(out.String(), "committed") && !strings.Contains(out.String(), "nothing new") {
			t.Fatalf("run exited 0 without a summary:\n%s", out.String())
		}
	}
	if killed == 0 {
		t.Fatal("no run was killed before it finished: raise rows")
	}
	t.Logf("%d of 5 runs killed mid-way", killed)
	out := run(t, args...)
	verify(t, dir, rows, malformed, summary(t, out))
}

// TestChaosTwoCopies runs two copies of the quickstart on the same
// directory at once, again and again, SIGKILLing each at a random moment
// (epochs every 20ms, so kills land in every protocol step, Commit
// included); the younger copy fences the older. A final run completes and
// every generated record must be there exactly once. OPENETL_SEED replays.
func TestChaosTwoCopies(t *testing.T) {
	rng := seededRNG(t, 1)
	dir := t.TempDir()
	const rows, malformed = 150_000, 0.002
	args := []string{"-dir", dir, "-rows", strconv.Itoa(rows), "-malformed", "0.002", "-epoch", "20ms"}
	fenced, killed := 0, 0
	for round := range 8 {
		var cmds [2]*exec.Cmd
		var outs [2]bytes.Buffer
		for i := range cmds {
			if i == 1 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			}
			cmds[i] = exec.Command(bin, args...)
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		kill := [2]time.Duration{time.Duration(50+rng.IntN(700)) * time.Millisecond, time.Duration(50+rng.IntN(700)) * time.Millisecond}
		done := make(chan int, 2)
		for i := range cmds {
			go func() {
				time.Sleep(kill[i])
				_ = cmds[i].Process.Signal(syscall.SIGKILL)
				done <- i
			}()
		}
		for i := range cmds {
			err := cmds[i].Wait()
			out := outs[i].String()
			switch {
			case err == nil:
			case strings.Contains(out, "fenced"):
				fenced++
			case strings.Contains(err.Error(), "killed"):
				killed++
			default:
				t.Fatalf("round %d copy %d: %v\n%s", round, i, err, out)
			}
		}
		<-done
		<-done
	}
	t.Logf("%d copies killed, %d fenced", killed, fenced)
	if killed == 0 {
		t.Fatal("no copy was killed mid-run: raise rows")
	}
	out := run(t, args...)
	verify(t, dir, rows, malformed, summary(t, out))
}
