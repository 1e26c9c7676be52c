package testutil

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// Tests wait for something to have happened (an event, a status field, a
// count the code keeps, a server's own view), never for a length of time:
// how long a step takes depends on the machine and its load. The helpers
// below wait on such signals with no time limit of their own but the test
// binary's -timeout, so a slow machine never fails a test, and a hang
// still fails it with a message that says what it waited for.

// Context returns a context that ends with the test, or shortly before
// the test binary's -timeout would stop it (a tenth of the time left, at
// most 30s), whichever comes first. Waiting on it, a hung test fails with
// its own message and the goroutines' stacks instead of the binary's
// panic. In a testing/synctest bubble it ends after bubbleWait of the
// bubble's fake clock, which moves only while every goroutine in it is
// blocked: a wait there fails once nothing can happen any more, at no
// cost in real time.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx := t.Context()
	var cancel context.CancelFunc
	switch end, ok, bubble := deadline(t); {
	case bubble:
		ctx, cancel = context.WithTimeout(ctx, bubbleWait)
	case ok:
		ctx, cancel = context.WithDeadline(ctx, end.Add(-min(time.Until(end)/10, 30*time.Second)))
	default:
		return ctx
	}
	t.Cleanup(cancel)
	return ctx
}

// bubbleWait is how long of a synctest bubble's fake clock a wait lasts.
const bubbleWait = time.Hour

// deadline is t's Deadline; bubble says t runs in a synctest bubble,
// where the fake clock makes the deadline meaningless (and Deadline
// panics).
func deadline(t testing.TB) (end time.Time, ok, bubble bool) {
	d, is := t.(interface{ Deadline() (time.Time, bool) })
	if !is {
		return time.Time{}, false, false
	}
	defer func() {
		if recover() != nil {
			end, ok, bubble = time.Time{}, false, true
		}
	}()
	end, ok = d.Deadline()
	return end, ok, false
}

// Until polls cond until it returns true, and fails the test, naming
// what it waited for, if Context(t) ends first. Use it for state the code
// keeps but signals no change of (a counter, a Status, a server's
// catalog); prefer Recv on a channel when the code offers one.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if cond() {
		return
	}
	ctx := Context(t)
	// Polls start fast and back off: a condition that holds soon is seen
	// soon, one that takes long costs little. In a bubble, where waiting
	// is free, they back off to a minute.
	wait, most := 100*time.Microsecond, 20*time.Millisecond
	if _, _, bubble := deadline(t); bubble {
		most = time.Minute
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			hung(t, what)
		case <-timer.C:
		}
		wait = min(2*wait, most)
		timer.Reset(wait)
	}
}

// Recv returns the next value received from ch (the zero value once ch
// is closed), and fails the test, naming what it waited for, if
// Context(t) ends first.
func Recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	default:
	}
	select {
	case v := <-ch:
		return v
	case <-Context(t).Done():
		hung(t, what)
		panic("unreachable")
	}
}

func hung(t testing.TB, what string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Logf("goroutines:\n%s", buf)
	t.Fatalf("still waiting for %s when the test ran out of time", what)
}
