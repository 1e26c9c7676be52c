package etl

import (
	"errors"
	"time"

	"github.com/openetl/etl/internal/runner"
)

// Retry is how a Pipeline rides out transient failures by itself
// (Builder.Retry): an object store, a network or a database on either
// side that is briefly away, a server restart. When an attempt fails with
// an error that IsPermanent doesn't call permanent, Run starts a new
// attempt after a pause: it claims the next generation, recovers the
// destination and reopens the source, resuming from the last checkpoint,
// so a retry never loses or repeats data. Run returns only when its
// context is cancelled, on a permanent error (fenced, configuration, a
// source position that is gone, or an error the source or destination
// calls permanent, such as refused credentials or a missing privilege:
// source.Classifier; each stops Run at once, never retried), or when an
// outage outlasts Budget. Each retry is an
// EventSyncRetrying event, a Warn log line and a count of the
// openetl.retries metric, with its cause; Status().Phase is
// PhaseRetrying during the pause.
//
// The zero value is the default, which Run uses unless the Builder says
// otherwise: retry for up to 15 minutes of outage, pauses from 500ms
// doubling to 30s, Sync not retried.
type Retry struct {
	// Budget bounds an outage: once an attempt fails Budget or more
	// after the first failure since the pipeline was last healthy, Run
	// returns its error (a *RetryBudgetError wrapping it). Healthy is an
	// attempt that committed an epoch or, with nothing to read, ran for
	// MaxBackoff or longer before it failed (an idle connection cut by a
	// timeout is no outage); or Run's start. Default 15m; negative: no
	// retries at all, Run and Sync return the first error, for a host
	// that runs its own restart loop.
	Budget time.Duration
	// Backoff is the pause before the first retry after a committed
	// epoch (default 500ms), doubling with each retry in a row up to
	// MaxBackoff (default 30s). Each pause is drawn at random from
	// [d/2, d], so copies that failed together don't retry together.
	Backoff, MaxBackoff time.Duration
	// Sync makes Sync retry as Run does (default false: Sync returns its
	// first error, for the host's scheduler to decide). Each attempt of
	// a retried Sync reads to the source's end as of its own start, and
	// the Result counts every attempt. A failed AfterSync step is never
	// retried: Sync returns its *StepError.
	Sync bool
}

// The default retry budget (Retry.Budget).
const defaultRetryBudget = 15 * time.Minute

// RetryBudgetError is returned by Run (and a retrying Sync) when an
// outage outlasted Retry.Budget: Err is the last attempt's error
// (errors.Is and errors.As see through it, and IsRetryable says what it
// says of Err), Retries how many attempts were retried in a row, over
// Outage.
type RetryBudgetError struct {
	Err     error
	Retries int
	Outage  time.Duration
	Budget  time.Duration
}

func (e *RetryBudgetError) Error() string { return (*runner.BudgetError)(e).Error() }

func (e *RetryBudgetError) Unwrap() error { return e.Err }

// budgetError turns the runner's budget error into a *RetryBudgetError.
func budgetError(err error) error {
	var be *runner.BudgetError
	if errors.As(err, &be) {
		return (*RetryBudgetError)(be)
	}
	return err
}

// Retry sets how Run (and, with r.Sync, Sync) retries transient failures;
// see Retry for the defaults, which apply without a call. Build fails for
// a negative backoff.
func (b *Builder) Retry(r Retry) *Builder {
	b.retry = &r
	return b
}

// retryPolicy is the runner's policy for r (nil: the default), or nil
// when retries are off.
func retryPolicy(r *Retry) *runner.RetryPolicy {
	if r == nil {
		r = &Retry{}
	}
	if r.Budget < 0 {
		return nil
	}
	budget := r.Budget
	if budget == 0 {
		budget = defaultRetryBudget
	}
	return &runner.RetryPolicy{Budget: budget, Backoff: r.Backoff, MaxBackoff: r.MaxBackoff, Sync: r.Sync,
		Permanent: noRetry}
}

// noRetry tells the errors a retrying Run or Sync returns at once: the
// permanent ones, and a failed AfterSync step, which is the host's own
// program (its data is committed; the host decides whether to run the
// Sync, and so the step, again).
func noRetry(err error) bool {
	var se *StepError
	return IsPermanent(err) || errors.As(err, &se)
}
