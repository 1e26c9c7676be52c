package checkpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
)

// The multi-process test re-executes the test binary as children; these
// variables tell a child what to do.
const (
	envDir   = "OPENETL_CHECKPOINT_CHILD_DIR"
	envChild = "OPENETL_CHECKPOINT_CHILD_ID"
)

const (
	procs        = 8
	rounds       = 3  // Claims per child
	commitsRound = 25 // Commits a child tries per Claim
)

// TestMultiProcess runs procs processes against one directory. Each Claims
// the pipeline, commits epochs until fenced or done, and claims again,
// reporting what it did on stdout. Then the log must be one linear chain
// whose records are exactly the reported commits, in generation order, and
// every Claim must have got its own generation.
func TestMultiProcess(t *testing.T) {
	if dir := os.Getenv(envDir); dir != "" {
		child(t, dir, os.Getenv(envChild))
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(testutil.Context(t))
	var cmds []*exec.Cmd
	// On failure, stop the children before TempDir's cleanup removes dir.
	t.Cleanup(func() {
		cancel()
		for _, cmd := range cmds {
			cmd.Wait()
		}
	})
	// Each child says it is ready on a pipe (fd 3) and waits for its
	// stdin to close: closing every child's stdin starts them together.
	outs := make([]*bytes.Buffer, procs)
	readies := make([]*os.File, procs)
	starts := make([]io.WriteCloser, procs)
	for i := range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envDir+"="+dir, envChild+"="+strconv.Itoa(i))
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.ExtraFiles = []*os.File{w}
		if starts[i], err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		readies[i] = r
		cmds = append(cmds, cmd)
	}
	for i, r := range readies {
		b, _ := io.ReadAll(r) // until the child closes fd 3, or dies
		r.Close()
		if string(b) != "ready\n" {
			cancel()
			cmds[i].Wait()
			t.Fatalf("child %d never got ready:\n%s", i, outs[i])
		}
	}
	for _, w := range starts {
		w.Close()
	}

	claims := make(map[checkpoint.Generation]int) // generation -> child
	commits := make(map[checkpoint.Ref]int)       // record -> child
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		sc := bufio.NewScanner(outs[i])
		for sc.Scan() {
			var kind string
			var a, b uint64
			if n, _ := fmt.Sscanf(sc.Text(), "RESULT %s %d %d", &kind, &a, &b); n < 2 {
				continue
			}
			switch kind {
			case "claim":
				if j, dup := claims[checkpoint.Generation(a)]; dup {
					t.Fatalf("generation %d claimed by children %d and %d", a, j, i)
				}
				claims[checkpoint.Generation(a)] = i
			case "commit":
				commits[checkpoint.Ref{Epoch: a, Generation: checkpoint.Generation(b)}] = i
			}
		}
	}
	if len(claims) != procs*rounds {
		t.Fatalf("%d distinct claims, want %d", len(claims), procs*rounds)
	}
	for ref, i := range commits {
		if claims[ref.Generation] != i {
			t.Fatalf("child %d committed %v with generation %d, claimed by child %d", i, ref, ref.Generation, claims[ref.Generation])
		}
	}

	// Walk the chain from HEAD to the first record.
	s := openDir(t, filepath.Join(dir, "store"))
	_, head := claim(t, s, "p")
	if head == nil {
		t.Fatal("nothing committed")
	}
	chain, gens := 0, make(map[checkpoint.Generation]bool)
	for rec := head; ; {
		gens[rec.Generation] = true
		ref := rec.Ref()
		if _, ok := commits[ref]; !ok {
			t.Fatalf("chain holds %v, which no child reported committing", ref)
		}
		if want := fmt.Sprintf("child %d", commits[ref]); string(rec.Engine) != want {
			t.Fatalf("record %v: Engine %q, want %q", ref, rec.Engine, want)
		}
		chain++
		if rec.Prev == nil {
			if rec.Epoch != 1 {
				t.Fatalf("first record of the chain is epoch %d", rec.Epoch)
			}
			break
		}
		// A later record never comes from an older generation: a zombie
		// never committed after a newer Claim.
		if rec.Prev.Epoch != rec.Epoch-1 || rec.Prev.Generation > rec.Generation {
			t.Fatalf("record %v follows %v", ref, rec.Prev)
		}
		prev, err := s.Get(context.Background(), "p", *rec.Prev)
		if err != nil {
			t.Fatal(err)
		}
		rec = prev
	}
	if chain != len(commits) {
		t.Fatalf("chain has %d records, children reported %d commits", chain, len(commits))
	}
	t.Logf("%d processes: %d claims; %d commits in one chain, by %d generations", procs, len(claims), chain, len(gens))
}

// child is one process of TestMultiProcess.
func child(t *testing.T, dir, id string) {
	ctx := context.Background()
	s := openDir(t, filepath.Join(dir, "store"))
	ready := os.NewFile(3, "ready")
	if _, err := ready.WriteString("ready\n"); err != nil {
		t.Fatal(err)
	}
	ready.Close()
	io.Copy(io.Discard, os.Stdin) // until the parent closes it: go

	var out strings.Builder
	defer func() { fmt.Print(out.String()) }()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for range rounds {
		// Spread the Claims out so that generations get to commit for a
		// while, and zombies try to, before the next Claim fences them.
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		gen, prev, err := s.Claim(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "RESULT claim %d\n", gen)
		for range commitsRound {
			rec := next("p", gen, prev)
			rec.Engine = []byte("child " + id)
			err := s.Commit(ctx, gen, rec)
			if errors.Is(err, checkpoint.ErrFenced) {
				break
			}
			if err != nil {
				t.Fatalf("generation %d: %v", gen, err)
			}
			fmt.Fprintf(&out, "RESULT commit %d %d\n", rec.Epoch, gen)
			prev = rec
		}
	}
}
