package holdfast

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
)

// expiringCtx is an attempt's context whose deadline passes right after
// its first Err: what a loaded machine does to an answer that comes back
// just before the attempt's deadline.
type expiringCtx struct {
	context.Context
	calls atomic.Int32
}

func (c *expiringCtx) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.DeadlineExceeded
}

// An answer that came in time is judged by what it says, however soon
// after it the attempt's deadline passes: an `unavailable` is retried and
// matches ErrUnavailable. (Mapped under the attempt's context, it was taken
// for the call's own deadline: a TryLock whose retry budget ended as the
// last `unavailable` came back answered an error with code unavailable
// that matched context.DeadlineExceeded and not ErrUnavailable.)
func TestAttemptAnsweredJustBeforeItsDeadlineIsJudgedByTheAnswer(t *testing.T) {
	actx := &expiringCtx{Context: context.Background()}
	retry, err := attemptError(context.Background(), actx, "Acquire", connect.NewError(connect.CodeUnavailable, errors.New("backend restarting")))
	if !retry || !errors.Is(err, ErrUnavailable) || ErrorCode(err) != CodeUnavailable {
		t.Fatalf("retry=%v err=%v (code %q), want a retried ErrUnavailable", retry, err, ErrorCode(err))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v matches context.DeadlineExceeded: neither the call's context nor the attempt's had ended when it was answered", err)
	}

	// The call's own context ending is still final.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if retry, err := attemptError(ctx, ctx, "Acquire", connect.NewError(connect.CodeUnavailable, errors.New("backend restarting"))); retry || !errors.Is(err, context.Canceled) {
		t.Fatalf("retry=%v err=%v, want the caller's context.Canceled, not retried", retry, err)
	}
}
