package sinktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// modesDest is a user's destination over sinktest's fake that declares
// every write mode and, with bug set, mishandles one the way a user's
// writer might:
//
//	ignores-modes        appends every stream, whatever its spec says
//	soft-as-hard         removes a merged key's row on delete with soft deletes
//	hard-as-soft         keeps it with hard deletes
//	last-write-wins      merges by the order rows arrive, not _openetl_seq
//	recover-skips-final  Recover leaves a Final head's refresh unfinished
type modesDest struct {
	*sinktest.FakeDestination
	bug string
}

func (d *modesDest) Capabilities() sink.Capabilities {
	return sink.Capabilities{Merge: true, HardDeletes: true, Overwrite: true}
}

func (d *modesDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	cfg.Streams = slices.Clone(cfg.Streams)
	for i, s := range cfg.Streams {
		switch {
		case d.bug == "ignores-modes":
			cfg.Streams[i].Mode = sink.Append
		case d.bug == "soft-as-hard" && s.Mode == sink.Merge:
			cfg.Streams[i].Deletes = sink.HardDeletes
		case d.bug == "hard-as-soft" && s.Mode == sink.Merge:
			cfg.Streams[i].Deletes = sink.SoftDeletes
		}
	}
	w, err := d.FakeDestination.Writer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &modesWriter{Writer: w, bug: d.bug, cfg: cfg}, nil
}

type modesWriter struct {
	sink.Writer
	bug  string
	cfg  sink.WriterConfig
	next int64 // last-write-wins: the seq the next row of a merged stream gets
}

func (w *modesWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if spec, _ := w.cfg.Spec(stream); w.bug != "last-write-wins" || spec.Mode != sink.Merge {
		return w.Writer.Write(ctx, stream, rec)
	}
	idx := rec.Schema().FieldIndices(sink.ColumnSeq)[0]
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	for range rec.NumRows() {
		w.next++
		b.Append(w.next)
	}
	seqs := b.NewArray()
	defer seqs.Release()
	cols := slices.Clone(rec.Columns())
	cols[idx] = seqs
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	defer out.Release()
	return w.Writer.Write(ctx, stream, out)
}

func (w *modesWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if w.bug == "recover-skips-final" && head != nil && head.Final {
		h := *head
		h.Final = false
		head = &h
	}
	return w.Writer.Recover(ctx, gen, head)
}

const envModesBug = "SINKTEST_MODES_BROKEN"

// TestModesDest runs the suite against modesDest with the bug named by
// $SINKTEST_MODES_BROKEN; TestSuiteFailsModes runs it in a child process.
func TestModesDest(t *testing.T) {
	bug, ok := os.LookupEnv(envModesBug)
	if !ok {
		t.Skip("run by TestSuiteFailsModes in a child process")
	}
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	sinktest.Run(t, func(*testing.T) sink.Destination { return &modesDest{FakeDestination: fake, bug: bug} }, sinktest.Options{
		Visible: func(_ context.Context, stream string) ([]sinktest.Row, error) {
			var out []sinktest.Row
			for _, r := range fake.Rows(stream) {
				out = append(out, sinktest.Row{ID: r.ID, Seq: r.Seq, Op: r.Op, Values: r.Values})
			}
			return out, nil
		},
	})
}

// TestSuiteFailsModes: the suite fails a writer that declares a write
// mode and mishandles it, in the checks of that mode, saying what is
// wrong; and passes the same writer without the bug.
func TestSuiteFailsModes(t *testing.T) {
	if _, ok := os.LookupEnv(envModesBug); ok {
		t.Skip("in the child process")
	}
	for _, c := range []struct {
		bug  string
		fail []string // checks that must fail
		says []string // what the failures must say
	}{
		{"", nil, nil},
		{"ignores-modes", []string{"Merge", "MergeReplay", "HardDeletes", "Overwrite", "OverwriteEmpty"},
			[]string{"merge keeps one row per key", "after Commit(1) of a refresh: the table keeps its contents (none yet) until Finish"}},
		{"soft-as-hard", []string{"Merge", "MergeReplay"},
			[]string{"soft deletes keep a deleted key's row, marked _openetl_deleted"}},
		{"hard-as-soft", []string{"HardDeletes"}, []string{"hard deletes remove the key's row"}},
		{"last-write-wins", []string{"Merge", "MergeReplay", "HardDeletes"},
			[]string{"key 2 shows seq 250 (update), want the latest version, seq 300 (update): merge keeps each key's version with the highest _openetl_seq",
				"a lower _openetl_seq than the table's must never replace its row"}},
		{"recover-skips-final", []string{"Overwrite"},
			[]string{"whose Finish never ran: Recover must finish it"}},
	} {
		name := c.bug
		if name == "" {
			name = "correct"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestModesDest$", "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), envModesBug+"="+c.bug)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("running the child: %v", err)
			}
			switch {
			case len(c.fail) == 0 && err != nil:
				t.Fatalf("the suite fails the correct writer:\n%s", out)
			case len(c.fail) > 0 && err == nil:
				t.Fatalf("the suite passes a writer with bug %s:\n%s", c.bug, out)
			}
			var failed []string
			for _, line := range strings.Split(string(out), "\n") {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: TestModesDest/"); ok {
					failed = append(failed, strings.Fields(rest)[0])
				}
			}
			slices.Sort(failed)
			want := slices.Sorted(slices.Values(c.fail))
			if !slices.Equal(failed, want) {
				t.Errorf("bug %s: checks %v failed, want exactly %v:\n%s", c.bug, failed, want, out)
			}
			for _, msg := range c.says {
				if !strings.Contains(string(out), msg) {
					t.Errorf("bug %s: no failure says %q:\n%s", c.bug, msg, out)
				}
			}
		})
	}
}
