package holdfast

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// A retry budget that runs out during an attempt (one begun with a sliver
// of it left, on a loaded machine) reports what the server last answered,
// not the SDK's own cut: TestErrorCodesMapToSentinels lost the server's
// message so.
func TestBudgetEndingDuringAnAttemptKeepsTheServersLastAnswer(t *testing.T) {
	c := dialPeer(t, "http://127.0.0.1:1", WithRetryBudget(200*time.Millisecond))
	calls := 0
	err := c.retrying(t.Context(), "Acquire", time.Time{}, func(actx context.Context) error {
		if calls++; calls == 1 {
			return connect.NewError(connect.CodeUnavailable, errors.New("backend restarting"))
		}
		<-actx.Done() // no answer before the budget's end
		return actx.Err()
	})
	if calls != 2 || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "backend restarting") || !strings.Contains(err.Error(), "the retry budget") {
		t.Fatalf("after %d attempts: %v, want the server's unavailable answer, out of budget", calls, err)
	}

	// A server that never answered is reported as such.
	err = c.retrying(t.Context(), "Acquire", time.Time{}, func(actx context.Context) error {
		<-actx.Done()
		return actx.Err()
	})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no answer in time") {
		t.Fatalf("%v, want no answer in time", err)
	}
}
