package runner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// RetryPolicy is how Run (and Sync, with Sync set) rides out transient
// failures: after an attempt fails with an error Permanent doesn't call
// permanent, a new attempt starts after a capped exponential backoff with
// jitter; it claims the next generation, recovers and reopens the source
// like any attempt. etl.Retry documents the fields for hosts.
type RetryPolicy struct {
	// Budget bounds an outage: once a failure comes Budget or more after
	// the first failure since the last attempt that committed an epoch
	// (or, reading nothing, ran for MaxBackoff or longer; or since the
	// start), its error is returned; 0 or less: no bound.
	Budget time.Duration
	// Backoff is the pause before the first retry after progress,
	// doubling with each retry in a row up to MaxBackoff; each pause is
	// drawn from [d/2, d] (jitter). Defaults 500ms and 30s.
	Backoff, MaxBackoff time.Duration
	// Sync makes Sync retry too; default only Run does.
	Sync bool
	// Permanent tells the errors that end the loop at once (a fence, a
	// configuration error, a position the source no longer has); etl
	// passes etl.IsPermanent. Default: only checkpoint.ErrFenced.
	Permanent func(error) bool
	// Jitter returns a number in [0, 1) for each pause; default
	// math/rand/v2.Float64.
	Jitter func() float64
}

const (
	defaultRetryBackoff    = 500 * time.Millisecond
	defaultRetryMaxBackoff = 30 * time.Second
)

// The causes of a retry (Event.Cause, the openetl.cause attribute of
// openetl.retries): the part of the pipeline the failed attempt's error
// names.
const (
	CauseSource      = "source"      // the source: discover, open, a split's read, its ack
	CauseDestination = "destination" // a writer: open, write, precommit, commit, recover
	CauseCheckpoints = "checkpoints" // the checkpoint store: claim, HEAD, records, side files
	CauseEngine      = "engine"
	CauseTransform   = "transform"
	CauseOther       = "other"
)

// AttrCause is the cause attribute of openetl.retries.
const AttrCause = attribute.Key("openetl.cause")

// CauseOf names the part of the pipeline err comes from, by the prefix
// the runner's own errors carry ("source: ...", "checkpoints: ...",
// "destination: ..."; a split's error is the source's). The runner wraps
// every error of a part it calls so, at one place per call.
func CauseOf(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	word, _, _ := strings.Cut(msg, ":")
	word, _, _ = strings.Cut(word, " ")
	switch word {
	case "source", "split", "streams":
		return CauseSource
	case "destination":
		return CauseDestination
	case "checkpoints":
		return CauseCheckpoints
	case "engine":
		return CauseEngine
	case "transform":
		return CauseTransform
	}
	return CauseOther
}

// BudgetError is returned when the retry budget ran out: Err is the last
// attempt's error, Retries how many attempts were retried in a row, over
// Outage.
type BudgetError struct {
	Err     error
	Retries int
	Outage  time.Duration
	Budget  time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v (retried %d times over %v without committing an epoch; the retry budget is %v)",
		e.Err, e.Retries, e.Outage.Round(time.Millisecond), e.Budget)
}

func (e *BudgetError) Unwrap() error { return e.Err }

func (p *RetryPolicy) maxBackoff() time.Duration {
	if p.MaxBackoff <= 0 {
		return defaultRetryMaxBackoff
	}
	return p.MaxBackoff
}

// pause returns the wait before retry n (1 for the first in a row).
func (p *RetryPolicy) pause(n int) time.Duration {
	d, most := p.Backoff, p.maxBackoff()
	if d <= 0 {
		d = defaultRetryBackoff
	}
	d = min(d, most)
	for i := 1; i < n && d < most; i++ {
		d = min(2*d, most)
	}
	jitter := rand.Float64
	if p.Jitter != nil {
		jitter = p.Jitter
	}
	return d/2 + time.Duration(jitter()*float64(d-d/2))
}

func (p *RetryPolicy) permanent(err error) bool {
	if p.Permanent != nil {
		return p.Permanent(err)
	}
	var pe *PermanentError
	return errors.Is(err, checkpoint.ErrFenced) || errors.As(err, &pe)
}

// PermanentError marks an attempt's error that the pipeline's source or
// destination called permanent (source.Classifier, sink.Classifier): no
// retry will fix it. It reads as the error it wraps.
type PermanentError struct {
	Err error
	By  string // "source" or "destination"
}

func (e *PermanentError) Error() string   { return e.Err.Error() }
func (e *PermanentError) Unwrap() error   { return e.Err }
func (e *PermanentError) Permanent() bool { return true }

// classify marks err permanent when the source or the destination says
// it is (nil stays nil). An error that joins a cancellation (a sibling
// stopped by the first failure) is asked about too: the classifiers
// answer only for errors they recognize.
func classify(cfg Config, err error) error {
	if err == nil {
		return err
	}
	if c, ok := cfg.Source.(source.Classifier); ok && c.Permanent(err) {
		return &PermanentError{Err: err, By: CauseSource}
	}
	if c, ok := cfg.Destination.(sink.Classifier); ok && c.Permanent(err) {
		return &PermanentError{Err: err, By: CauseDestination}
	}
	return err
}

// attempts runs attempts until one ends other than with an error that
// calls for another (a source's source.ErrReopen; a transient failure
// under cfg.Retry) or ctx is done, and returns the counts of all of them
// together: Epochs and Streams summed, the rest from the last.
func attempts(ctx context.Context, cfg Config, bounded bool) (Result, error) {
	var total Result
	fruitless := 0 // reopens in a row that committed nothing
	retry := cfg.Retry
	if bounded && retry != nil && !retry.Sync {
		retry = nil
	}
	var (
		retries     int       // in a row since the last attempt that committed an epoch
		outageStart time.Time // the first failure of those
	)
	for {
		res, sum, err := attempt(ctx, cfg, bounded, total)
		err = classify(cfg, err)
		total = addResults(total, res)
		if err == nil {
			return total, nil
		}
		if ctx.Err() != nil {
			if retry != nil && !retry.permanent(err) && !errors.Is(err, context.Cause(ctx)) {
				// A failure the next attempt would have ridden out, as
				// the caller stopped: a stop, as when it comes during
				// the pause before that attempt (Run returns nil).
				return total, fmt.Errorf("%w (while stopping after: %w)", context.Cause(ctx), err)
			}
			return total, err
		}
		if res.Epochs > 0 {
			fruitless, retries = 0, 0
		} else if retry != nil && sum.read == 0 && sum.reading >= retry.maxBackoff() {
			// Nothing to read, and up for longer than the longest
			// pause: an idle pipeline that was healthy (a connection an
			// idle timeout cut, say), not one failing over and over.
			retries = 0
		}
		log := cfg.withDefaults().Logger.With("pipeline", cfg.Name)
		if errors.Is(err, source.ErrReopen) {
			if res.Epochs == 0 {
				if fruitless++; fruitless > maxFruitlessReopens {
					return total, err
				}
			}
			log.Warn("the source's catalog changed; starting a new attempt", "err", err)
			continue
		}
		if retry == nil || retry.permanent(err) {
			return total, err
		}
		if ferr := overtaken(ctx, cfg, res.Generation, err); ferr != nil {
			return total, ferr
		}
		now := time.Now()
		if retries == 0 {
			outageStart = now
		} else if outage := now.Sub(outageStart); retry.Budget > 0 && outage >= retry.Budget {
			return total, &BudgetError{Err: err, Retries: retries, Outage: outage, Budget: retry.Budget}
		}
		retries++
		wait := retry.pause(retries)
		cause := CauseOf(err)
		log.Warn("attempt failed; retrying", "retry", retries, "wait", wait, "cause", cause, "err", err)
		mon := cfg.Monitor
		if mon != nil {
			mon.retrying(ctx, retries, wait, cause, err)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			if mon != nil {
				mon.retried()
			}
			return total, fmt.Errorf("%w (while waiting to retry after: %w)", context.Cause(ctx), err)
		case <-timer.C:
		}
		if mon != nil {
			mon.retried()
		}
	}
}

// retrying reports a retry: the event, the metric, the status.
func (m *Monitor) retrying(ctx context.Context, n int, wait time.Duration, cause string, err error) {
	m.mu.Lock()
	m.retries, m.waiting = n, true
	m.mu.Unlock()
	m.inst.retries.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(AttrPipeline.String(m.name),
		AttrCause.String(cause)))
	m.emit(Event{Kind: EventSyncRetrying, Retry: n, Wait: wait, Cause: cause, Err: redactErr(err)})
}

// retried marks the wait before a retry over.
func (m *Monitor) retried() {
	m.mu.Lock()
	m.waiting = false
	m.mu.Unlock()
}

// overtaken returns a fenced error when a newer generation than gen (the
// failed attempt's claim; 0: it claimed none) holds the pipeline: the
// attempt failed because another copy took over (its error may say so
// only as a side effect: a staged file the newer copy collected, a lane
// cancelled), and retrying would claim the pipeline back and fence that
// copy in turn. It returns nil when HEAD can't be read (the retry finds
// out) or gen still holds it.
func overtaken(ctx context.Context, cfg Config, gen checkpoint.Generation, err error) error {
	if gen == 0 {
		return nil
	}
	g, _, herr := cfg.Store.Head(ctx, cfg.Name)
	if herr != nil || g <= gen {
		return nil
	}
	return fmt.Errorf("%w: pipeline %q: generation %d claimed it after %d, which failed: %w",
		checkpoint.ErrFenced, cfg.Name, g, gen, err)
}
