package holdfast

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Every call retries `unavailable` answers and transport failures (a
// refused or reset connection, an attempt that timed out) with the backoff,
// for at most the retry budget counted from the first failure in a row, and
// returns every other error at once (docs/sdk-behaviour.md, "retries").
// Each attempt is bounded by the request timeout and by the budget left, so
// a server that accepts connections and never answers cannot hold a call
// past its budget either.

// retrying runs call until it succeeds, fails with an error that is not
// retried, ctx ends, or the retry budget of consecutive failures runs out
// (then the last failure, which matches ErrUnavailable). until, when not
// zero, ends the retries earlier (a lease's local expiry). call gets the
// attempt's context and returns the RPC's own error.
func (c *Client) retrying(ctx context.Context, op string, until time.Time, call func(actx context.Context) error) error {
	start := time.Now() // the first attempt of the current run of failures
	budgetEnd := start.Add(c.opts.retryBudget)
	if !until.IsZero() && until.Before(budgetEnd) {
		budgetEnd = until
	}
	var answered error // the last failure the server answered
	for attempt := 0; ; attempt++ {
		end := earliest(budgetEnd, time.Now().Add(c.opts.requestTimeout))
		actx, cancel := context.WithDeadline(ctx, end)
		err := call(actx)
		if err == nil {
			cancel()
			return nil
		}
		retry, failed := attemptError(ctx, actx, op, err)
		cut := actx.Err() != nil
		cancel()
		if !retry {
			return failed
		}
		if cut && end.Equal(budgetEnd) && answered != nil {
			// The budget ran out during this attempt, often one begun with
			// a sliver of it left: what the server last answered says more
			// than the cut.
			return outOfBudget(answered, time.Since(start))
		}
		if !cut {
			answered = failed
		}
		if !sleep(ctx, c.opts.backoff.delay(attempt), budgetEnd) {
			if ctx.Err() != nil {
				return ctxError(ctx, op, failed)
			}
			return outOfBudget(failed, time.Since(start))
		}
	}
}

// attemptError maps the failure of one attempt made under actx (derived
// from the call's ctx) and says whether it is worth another attempt. The
// call's own context ending is final; the attempt's deadline (the request
// timeout or the budget) is a transport failure like any other.
func attemptError(ctx, actx context.Context, op string, err error) (retry bool, mapped error) {
	if ctx.Err() != nil {
		return false, mapError(ctx, op, err)
	}
	if actx.Err() != nil {
		// Unavailable, and the deadline that cut it (errors.Is matches
		// context.DeadlineExceeded).
		return true, &rpcError{op: op, code: CodeUnavailable, message: "no answer in time: " + err.Error(), kind: ErrUnavailable, ctxErr: context.DeadlineExceeded}
	}
	// Mapped under the call's ctx, not actx: actx's deadline may pass
	// between the check above and mapError's own, and an answer that came
	// in time (unavailable, say) would then be taken for the call's own
	// deadline: not retried, and matching neither ErrUnavailable nor the
	// caller's context.
	mapped = mapError(ctx, op, err)
	return errors.Is(mapped, ErrUnavailable), mapped
}

// outOfBudget marks the last failure of a call that ran out of retry budget.
func outOfBudget(last error, spent time.Duration) error {
	return fmt.Errorf("%w (gave up after %s of retries: the retry budget)", last, spent.Round(time.Millisecond))
}

// ctxError is the error of a call whose context ended between attempts: it
// matches the context's error (and cause), and says what the last attempt
// met.
func ctxError(ctx context.Context, op string, last error) error {
	e := &rpcError{op: op, code: CodeCanceled, message: "the call's context ended; last attempt: " + last.Error(), kind: ctx.Err()}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e.code = CodeDeadline
	}
	if cause := context.Cause(ctx); cause != ctx.Err() { //nolint:errorlint // identity: a cause other than the bare context error
		e.ctxErr = cause
	}
	return e
}

// earliest is the earliest of ts, ignoring zero times (zero when all are).
func earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}

// sleep waits d, or until ctx ends or the deadline passes. It reports
// whether it waited the full d with time left before the deadline.
func sleep(ctx context.Context, d time.Duration, deadline time.Time) bool {
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		if d > left {
			d = left
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return deadline.IsZero() || time.Now().Before(deadline)
	}
}
