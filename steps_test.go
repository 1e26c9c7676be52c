package etl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// stepFixture syncs the faker (fakerWant's counts) into Parquet files in
// memory, so that a step can read what the Sync committed.
type stepFixture struct {
	bucket *blob.Bucket
	store  checkpoint.Store
	rec    *recorder
	b      *etl.Builder
}

func newStepFixture(t *testing.T, name string) *stepFixture {
	t.Helper()
	src, err := faker.New(faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	bucket := memblob.OpenBucket(nil)
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	f := &stepFixture{bucket: bucket, store: checkpoint.NewMem(), rec: newRecorder()}
	f.b = etl.NewPipeline(name).From(src).To(dst).Checkpoints(f.store).
		BatchSize(128, 0).EpochEvery(time.Hour, 64<<10).OnEvent(f.rec.on, 0)
	return f
}

// manifestRows counts the rows of stream's committed files.
func (f *stepFixture) manifestRows(t *testing.T, stream string) int64 {
	t.Helper()
	m, err := parquet.ReadManifest(context.Background(), f.bucket, "", stream)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, file := range m.Files {
		n += file.Rows
	}
	return n
}

func build(t *testing.T, b *etl.Builder) *etl.Pipeline {
	t.Helper()
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// A step runs after the final commit: the checkpoint is Final at the
// epoch the step is given, the rows are visible, Status is in
// PhaseSteps and readiness holds; it runs again after a Sync that
// copied nothing.
func TestAfterSyncRunsAfterTheCommit(t *testing.T) {
	f := newStepFixture(t, "steps")
	type seen struct {
		res    etl.Result
		ckpt   etl.Checkpoint
		orders int64
		status etl.Status
		ready  int
	}
	var runs []seen
	var p *etl.Pipeline
	p = build(t, f.b.AfterSync("count", func(ctx context.Context, res etl.Result) error {
		ck, err := p.Inspect(ctx)
		if err != nil {
			return err
		}
		srv := httptest.NewServer(etl.HealthHandler(p))
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		runs = append(runs, seen{res: res, ckpt: ck, orders: f.manifestRows(t, "orders"), status: p.Status(), ready: resp.StatusCode})
		return nil
	}))
	ctx := context.Background()
	res, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("the step ran %d times, want 1", len(runs))
	}
	got := runs[0]
	if got.res.Epoch != res.Epoch || got.res.Epochs != res.Epochs || got.res.Epochs < 2 ||
		fmt.Sprint(got.res.Streams) != fmt.Sprint(fakerWant) {
		t.Errorf("the step got %+v; the Sync returned %+v (want %v, several epochs)", got.res, res, fakerWant)
	}
	if got.ckpt.Epoch != res.Epoch || !got.ckpt.Final {
		t.Errorf("checkpoint when the step ran: epoch %d final %v; want epoch %d, final", got.ckpt.Epoch, got.ckpt.Final, res.Epoch)
	}
	if got.orders != fakerWant["orders"].Written {
		t.Errorf("the step saw %d committed orders rows, want %d", got.orders, fakerWant["orders"].Written)
	}
	if got.status.Phase != etl.PhaseSteps || got.status.Step != "count" || got.ready != 200 {
		t.Errorf("during the step: phase %q step %q readyz %d; want %q, \"count\", 200", got.status.Phase, got.status.Step,
			got.ready, etl.PhaseSteps)
	}
	if st := p.Status(); st.Phase != etl.PhaseSucceeded || st.Step != "count" {
		t.Errorf("after the Sync: phase %q step %q", st.Phase, st.Step)
	}
	events := f.rec.wait(t)
	ks := kinds(events)
	i := slices.Index(ks, etl.EventStepStarted)
	if i < 1 || ks[i-1] != etl.EventEpochCommitted || !slices.Equal(ks[i:], []etl.EventKind{etl.EventStepStarted,
		etl.EventStepSucceeded, etl.EventSyncSucceeded}) {
		t.Fatalf("events %v; want … epoch.committed, step.started, step.succeeded, sync.succeeded", ks)
	}
	if e := events[i+1]; e.Step != "count" || e.Took <= 0 || e.Epoch != res.Epoch || e.Err != nil {
		t.Errorf("step.succeeded = %+v", e)
	}

	res2, err := p.Sync(ctx)
	if err != nil || res2.Epochs != 0 || res2.Epoch != res.Epoch {
		t.Fatalf("second Sync = %+v, %v; want nothing new at epoch %d", res2, err, res.Epoch)
	}
	if len(runs) != 2 || runs[1].res.Epochs != 0 || runs[1].res.Epoch != res.Epoch {
		t.Fatalf("after the second Sync the step ran %d times (last with %+v); want twice, the last with 0 epochs", len(runs), runs[len(runs)-1].res)
	}
}

// A failed step fails the Sync with a *StepError naming it, retryable,
// with what was copied committed; the steps after it don't run; a rerun
// copies nothing and runs the step again.
func TestAfterSyncFailureKeepsTheData(t *testing.T) {
	f := newStepFixture(t, "steps")
	cause := errors.New("model customer_orders: division by zero")
	var broken, later int
	p := build(t, f.b.
		AfterSync("dbt build", func(context.Context, etl.Result) error { broken++; return cause }).
		AfterSync("notify", func(context.Context, etl.Result) error { later++; return nil }))
	ctx := context.Background()
	res, err := p.Sync(ctx)
	var se *etl.StepError
	if !errors.As(err, &se) {
		t.Fatalf("Sync = %v (%T), want a *etl.StepError", err, err)
	}
	if se.Step != "dbt build" || se.Pipeline != "steps" || se.Epoch != res.Epoch || !errors.Is(err, cause) {
		t.Errorf("StepError = %+v; want step \"dbt build\", pipeline \"steps\", epoch %d, wrapping the cause", se, res.Epoch)
	}
	if !etl.IsRetryable(err) || etl.IsPermanent(err) || etl.IsFenced(err) {
		t.Errorf("IsRetryable %v IsPermanent %v IsFenced %v; want retryable only", etl.IsRetryable(err), etl.IsPermanent(err), etl.IsFenced(err))
	}
	for _, want := range []string{`"dbt build"`, "division by zero", fmt.Sprintf("epoch %d", res.Epoch)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if fmt.Sprint(res.Streams) != fmt.Sprint(fakerWant) || res.Epochs < 2 {
		t.Errorf("failed Sync's Result = %+v; want the committed counts %v", res, fakerWant)
	}
	ck, err2 := p.Inspect(ctx)
	if err2 != nil || ck.Epoch != res.Epoch || !ck.Final {
		t.Errorf("checkpoint after the failed step: %+v, %v; want epoch %d, final", ck, err2, res.Epoch)
	}
	if n := f.manifestRows(t, "orders"); n != fakerWant["orders"].Written {
		t.Errorf("committed orders rows %d, want %d", n, fakerWant["orders"].Written)
	}
	if broken != 1 || later != 0 {
		t.Errorf("steps ran %d and %d times; want 1 and 0", broken, later)
	}
	st := p.Status()
	if st.Phase != etl.PhaseFailed || !strings.Contains(st.LastError, "dbt build") || st.Step != "dbt build" {
		t.Errorf("Status: phase %q step %q last error %q", st.Phase, st.Step, st.LastError)
	}
	events := f.rec.wait(t)
	ks := kinds(events)
	if n := len(ks); n < 3 || !slices.Equal(ks[n-3:], []etl.EventKind{etl.EventStepStarted, etl.EventStepFailed, etl.EventSyncFailed}) {
		t.Fatalf("events %v; want … step.started, step.failed, sync.failed", ks)
	}
	if e := events[len(events)-2]; e.Step != "dbt build" || !errors.As(e.Err, &se) || e.Took <= 0 {
		t.Errorf("step.failed = %+v", e)
	}

	res2, err := p.Sync(ctx)
	if !errors.As(err, &se) || res2.Epochs != 0 || len(res2.Streams) != 0 || res2.Epoch != res.Epoch {
		t.Fatalf("rerun = %+v, %v; want nothing copied and the step's error again", res2, err)
	}
	if broken != 2 || later != 0 {
		t.Errorf("after the rerun the steps ran %d and %d times; want 2 and 0", broken, later)
	}
	if n := f.manifestRows(t, "orders"); n != fakerWant["orders"].Written {
		t.Errorf("orders rows after the rerun %d, want %d", n, fakerWant["orders"].Written)
	}
}

// A step's own mark decides permanence; a cancelled Sync's step error
// is neither permanent nor retryable.
func TestAfterSyncErrorClasses(t *testing.T) {
	t.Run("permanent", func(t *testing.T) {
		f := newStepFixture(t, "steps")
		p := build(t, f.b.AfterSync("check", func(context.Context, etl.Result) error {
			return fmt.Errorf("bad project: %w", permanentErr{})
		}))
		_, err := p.Sync(context.Background())
		var se *etl.StepError
		if !errors.As(err, &se) || !etl.IsPermanent(err) || etl.IsRetryable(err) {
			t.Fatalf("Sync = %v: StepError %v, IsPermanent %v; want a permanent StepError", err, se != nil, etl.IsPermanent(err))
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		f := newStepFixture(t, "steps")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := build(t, f.b.AfterSync("sleep", etl.Command(func(ctx context.Context, _ etl.Result) *exec.Cmd {
			time.AfterFunc(200*time.Millisecond, cancel) // the host gives up while the command runs
			return exec.CommandContext(ctx, "sleep", "60")
		})))
		start := time.Now()
		res, err := p.Sync(ctx)
		var se *etl.StepError
		if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || etl.IsRetryable(err) || etl.IsPermanent(err) {
			t.Fatalf("Sync = %v; want a StepError wrapping context.Canceled, neither retryable nor permanent", err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the cancelled step took %v: the command was not stopped", took)
		}
		if res.Epochs == 0 || p.Status().Phase != etl.PhaseStopped {
			t.Errorf("Result %+v, phase %q; want the committed epochs, PhaseStopped", res, p.Status().Phase)
		}
	})
}

// Command keeps the output, interleaved and capped, also when the host
// has its own writers, and puts the exit error in Err.
func TestCommandStep(t *testing.T) {
	sh := func(script string, stdout, stderr *bytes.Buffer) func(context.Context, etl.Result) error {
		return etl.Command(func(ctx context.Context, res etl.Result) *exec.Cmd {
			cmd := exec.CommandContext(ctx, "sh", "-c", script)
			cmd.Env = append(os.Environ(), fmt.Sprintf("EPOCH=%d", res.Epoch))
			if stdout != nil {
				cmd.Stdout = stdout
			}
			if stderr != nil {
				cmd.Stderr = stderr
			}
			return cmd
		})
	}
	res := etl.Result{Epoch: 7}
	var se *etl.StepError

	f := newStepFixture(t, "cmd")
	p := build(t, f.b.AfterSync("script", sh(`echo "epoch $EPOCH"; echo oops >&2; exit 3`, nil, nil)))
	synced, err := p.Sync(context.Background())
	var exit *exec.ExitError
	if !errors.As(err, &se) || !errors.As(se.Err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Sync = %v; want a StepError with exit status 3", err)
	}
	if want := fmt.Sprintf("epoch %d\noops\n", synced.Epoch); se.Output != want {
		t.Errorf("Output = %q, want %q", se.Output, want)
	}
	if !strings.Contains(err.Error(), "exit status 3; output ends:\nepoch") || !strings.HasSuffix(err.Error(), "\noops") {
		t.Errorf("message %q lacks the output's tail", err)
	}

	var out, errOut bytes.Buffer
	err = sh(`echo one; echo two >&2; false`, &out, &errOut)(context.Background(), res)
	if err == nil || out.String() != "one\n" || errOut.String() != "two\n" {
		t.Errorf("with the host's writers: err %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}
	if err := sh(`echo fine`, &out, nil)(context.Background(), res); err != nil {
		t.Errorf("a command that exits 0: %v", err)
	}

	p2 := build(t, newStepFixture(t, "big").b.AfterSync("big", sh(`head -c 100000 /dev/zero | tr '\0' a; echo; echo last line; exit 1`, nil, nil)))
	_, err = p2.Sync(context.Background())
	if !errors.As(err, &se) || len(se.Output) != 64<<10 || !strings.HasSuffix(se.Output, "a\nlast line\n") {
		t.Fatalf("a long output: %d bytes kept (want %d, ending in the last line); err %v", len(se.Output), 64<<10, err)
	}
	if msg := err.Error(); len(msg) > 3000 || !strings.HasSuffix(msg, "last line") {
		t.Errorf("message of a long output is %d bytes, ending %q", len(msg), msg[max(0, len(msg)-40):])
	}
}

// Run never runs the steps; Build refuses a step without a name or func.
func TestAfterSyncOnlyAfterSync(t *testing.T) {
	f := newStepFixture(t, "run")
	ran := 0
	p := build(t, f.b.AfterSync("never", func(context.Context, etl.Result) error { ran++; return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testutil.Until(t, "an epoch committed by Run", func() bool { return p.Status().Epoch > 0 })
	cancel()
	if err := <-done; err != nil || ran != 0 {
		t.Fatalf("Run = %v, step ran %d times; want nil, 0", err, ran)
	}

	ok := func(context.Context, etl.Result) error { return nil }
	for _, tc := range []struct {
		b    *etl.Builder
		want string
	}{
		{newStepFixture(t, "x").b.AfterSync("", ok), `name "" empty or repeated`},
		{newStepFixture(t, "x").b.AfterSync("a", ok).AfterSync("a", ok), `name "a" empty or repeated`},
		{newStepFixture(t, "x").b.AfterSync("a", nil), `step "a": nil func`},
	} {
		_, err := tc.b.Build()
		var be *etl.BuildError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build = %v; want a BuildError saying %s", err, tc.want)
		}
	}
}
