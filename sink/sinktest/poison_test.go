package sinktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// holdDest is memDest whose writers hold each batch from Write until the
// next PreCommit, and only then stage its rows, in one of several ways
// (how):
//   - "retains": Retain in Write, Release once staged (correct);
//   - "retains-forever": Retain in Write, never Release (a leak);
//   - "keeps-batch": the arrow.RecordBatch, without Retain;
//   - "keeps-columns": its column arrays, without Retain;
//   - "keeps-views": its strings and int64 values, read zero-copy in
//     Write (as array.String.Value and Int64Values return them).
type holdDest struct {
	*memDest
	how string
}

func (d *holdDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.memDest.Writer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &holdWriter{memWriter: w.(*memWriter), how: d.how}, nil
}

type holdWriter struct {
	*memWriter
	how  string
	held []func(context.Context) error // stages a held batch
	kept []arrow.RecordBatch           // Retained, to Release
}

func (w *holdWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	var stage func(context.Context) error
	switch w.how {
	case "retains", "retains-forever":
		rec.Retain()
		if w.how == "retains" {
			w.kept = append(w.kept, rec)
		}
		stage = func(ctx context.Context) error { return w.memWriter.Write(ctx, stream, rec) }
	case "keeps-batch":
		stage = func(ctx context.Context) error { return w.memWriter.Write(ctx, stream, rec) }
	case "keeps-columns":
		sc, cols, n := rec.Schema(), append([]arrow.Array(nil), rec.Columns()...), rec.NumRows()
		stage = func(ctx context.Context) error {
			r := array.NewRecordBatch(sc, cols, n)
			defer r.Release()
			return w.memWriter.Write(ctx, stream, r)
		}
	case "keeps-views":
		col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
		ids, seqs := col(sink.ColumnID).(*array.String), col(sink.ColumnSeq).(*array.Int64).Int64Values()
		vals := col("value").(*array.String)
		rows := make([]stagedRow, rec.NumRows())
		for i := range rows {
			r := sinktest.Row{ID: ids.Value(i), Seq: seqs[i], Values: map[string]any{"value": nil}}
			if vals.IsValid(i) {
				r.Values["value"] = vals.Value(i)
			}
			rows[i] = stagedRow{stream, r}
		}
		stage = func(context.Context) error {
			w.pending = append(w.pending, rows...)
			return nil
		}
	default:
		return errors.New("holdDest: unknown way to hold a batch: " + w.how)
	}
	w.held = append(w.held, stage)
	return nil
}

func (w *holdWriter) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	for _, stage := range w.held {
		if err := stage(ctx); err != nil {
			return nil, err
		}
	}
	w.release()
	return w.memWriter.PreCommit(ctx, epoch)
}

func (w *holdWriter) Close(ctx context.Context) error {
	w.release()
	return w.memWriter.Close(ctx)
}

func (w *holdWriter) release() {
	for _, rec := range w.kept {
		rec.Release()
	}
	w.held, w.kept = nil, nil
}

const envHold = "SINKTEST_HOLD"

// TestHoldDest runs the suite against holdDest holding batches the way
// $SINKTEST_HOLD names; TestSuiteCatchesHeldBatches runs it in a child
// process.
func TestHoldDest(t *testing.T) {
	how, ok := os.LookupEnv(envHold)
	if !ok {
		t.Skip("run by TestSuiteCatchesHeldBatches in a child process")
	}
	st := newStore()
	sinktest.Run(t, func(t *testing.T) sink.Destination { return &holdDest{memDest: &memDest{st: st}, how: how} }, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) { return st.rows(stream), nil },
	})
}

// A writer that keeps references into a batch after Write returns,
// without Retain, fails the suite with a message that says so, however it
// keeps them; one that Retains and Releases passes; one that Retains and
// never Releases fails with a message that says that.
func TestSuiteCatchesHeldBatches(t *testing.T) {
	if _, ok := os.LookupEnv(envHold); ok {
		t.Skip("in the child process")
	}
	const kept = "kept references into a batch after Write returned, without Retain"
	for _, c := range []struct {
		how  string
		want string // in the failing child's output; "" passes
	}{
		{"retains", ""},
		{"retains-forever", "never released"},
		{"keeps-batch", kept},
		{"keeps-columns", kept},
		{"keeps-views", kept},
	} {
		t.Run(c.how, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHoldDest$", "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), envHold+"="+c.how)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			switch {
			case err != nil && !errors.As(err, &exit):
				t.Fatalf("running the child: %v", err)
			case c.want == "" && err != nil:
				t.Fatalf("the suite fails a writer that holds batches by Retain and Release:\n%s", out)
			case c.want == "":
			case err == nil:
				t.Fatalf("the suite passes a writer that holds batches %s:\n%s", c.how, out)
			case strings.Contains(string(out), "panic:"):
				t.Fatalf("the suite panics, where it should fail saying why:\n%s", out)
			case !strings.Contains(string(out), c.want):
				t.Fatalf("the suite fails, but without saying %q:\n%s", c.want, out)
			}
		})
	}
}
