package holdfast

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/proto/hlc"
)

// Sentinel errors. Every error the package returns wraps at most a few of
// these; branch on them with errors.Is, never on message text.
var (
	// ErrNotAcquired: the key is held by someone else (TryLock), or stayed
	// held for the whole wait (Lock). The error is a *NotAcquiredError that
	// carries the holder's state when the server reported it.
	ErrNotAcquired = errors.New("holdfast: lock not acquired")

	// ErrLeaseLost: the guard no longer holds its lease. The server said so
	// (Extend or Release answered false), or no renewal succeeded before the
	// lease's expiry on the local monotonic clock. The error is a
	// *LeaseLostError. Work done under the guard may overlap with the next
	// holder's: fence your writes.
	ErrLeaseLost = errors.New("holdfast: lease lost")

	// ErrReleased: the guard was unlocked by its owner; it no longer holds.
	ErrReleased = errors.New("holdfast: lease released")

	// ErrStaleToken: a write carried a fencing token older than the
	// resource's watermark. The error is a *StaleTokenError.
	ErrStaleToken = errors.New("holdfast: stale fencing token")

	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("holdfast: client closed")

	// ErrInvalidArgument: the server (or the SDK, before sending) refused a
	// request: bad key, TTL out of the backend's range, stamp too far ahead.
	// The message names the field and the limit.
	ErrInvalidArgument = errors.New("holdfast: invalid argument")
	// ErrUnavailable: the server or its backend could not be reached or is
	// restarting. Retrying later may succeed.
	ErrUnavailable = errors.New("holdfast: unavailable")
	// ErrPermissionDenied: the caller is authenticated but not allowed.
	ErrPermissionDenied = errors.New("holdfast: permission denied")
	// ErrUnauthenticated: the request carried no valid credentials.
	ErrUnauthenticated = errors.New("holdfast: unauthenticated")
	// ErrResourceExhausted: a server limit was hit (too many waiters, keys,
	// requests).
	ErrResourceExhausted = errors.New("holdfast: resource exhausted")
	// ErrServer: any other failure reported by the server or the transport
	// (internal error, unimplemented method, malformed answer).
	ErrServer = errors.New("holdfast: server error")
)

// NotAcquiredError reports contention. errors.Is(err, ErrNotAcquired) holds;
// when Lock gave up because its context ended, errors.Is(err, ctx.Err())
// holds as well.
type NotAcquiredError struct {
	Key string
	// Keys are every key of a multi-key lock (nil for one key).
	Keys []string
	// Current is the holder the server last reported (of one of the keys);
	// nil when the server did not say (for example when the lock was
	// released too late to be retried within the wait).
	Current *LockState
	// Delay is set when a key nobody held was in its lock-delay.
	Delay *KeyDelay
	// cause is the context error when the caller's context ended the wait.
	cause error
}

func (e *NotAcquiredError) Error() string {
	var b strings.Builder
	if e.Keys != nil {
		fmt.Fprintf(&b, "holdfast: lock %q not acquired", e.Keys)
	} else {
		fmt.Fprintf(&b, "holdfast: lock %q not acquired", e.Key)
	}
	switch {
	case e.Current != nil && e.Current.Kind == KindSemaphore:
		fmt.Fprintf(&b, ": semaphore with %d of %d permits in use by %d holders", e.Current.PermitsInUse, e.Current.Limit, len(e.Current.Holders))
	case e.Current != nil && e.Current.Kind == KindRWLock:
		if i := slices.IndexFunc(e.Current.Holders, func(g Grant) bool { return g.Mode == ModeExclusive }); i >= 0 {
			fmt.Fprintf(&b, ": written by %q (fencing token %d)", e.Current.Holders[i].Holder, e.Current.Holders[i].FencingToken)
		} else {
			fmt.Fprintf(&b, ": read by %d holders", len(e.Current.Holders))
		}
	case e.Current != nil && e.Current.Kind == KindElection:
		fmt.Fprintf(&b, ": led by %q (term %d)", e.Current.Holder, e.Current.FencingToken)
	case e.Current != nil && e.Keys != nil:
		fmt.Fprintf(&b, ": %q held by %q (fencing token %d)", e.Current.Key, e.Current.Holder, e.Current.FencingToken)
	case e.Current != nil:
		fmt.Fprintf(&b, ": held by %q (fencing token %d)", e.Current.Holder, e.Current.FencingToken)
	case e.Delay != nil:
		fmt.Fprintf(&b, ": %q is in its lock-delay (%s left)", e.Delay.Key, e.Delay.Remaining)
	}
	if e.cause != nil {
		fmt.Fprintf(&b, ": %v", e.cause)
	}
	return b.String()
}

// Unwrap lets errors.Is match ErrNotAcquired and, when set, the context
// error that ended the wait.
func (e *NotAcquiredError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrNotAcquired, e.cause}
	}
	return []error{ErrNotAcquired}
}

// LossReason says how a lease was lost.
type LossReason int

const (
	// LossRejected: the server answered extended=false or released=false;
	// the owner token no longer holds the key.
	LossRejected LossReason = iota + 1
	// LossExpired: no renewal succeeded before the lease's expiry, measured
	// on the local monotonic clock from the moment the last successful
	// renewal (or the acquire) was sent.
	LossExpired
	// LossClientClosed: the Client was closed while the guard was held.
	LossClientClosed
	// LossReleaseUnconfirmed: Unlock retried a Release whose first attempt
	// failed in transit, and the retry answered released=false. The token
	// no longer holds the key either way, but the first attempt may well
	// have been the one that released it, so this is not a proven loss
	// during the critical section.
	LossReleaseUnconfirmed
)

// String is the reason's name, the same in every holdfast SDK: "rejected",
// "expired", "client_closed", "release_unconfirmed".
func (r LossReason) String() string {
	switch r {
	case LossRejected:
		return "rejected"
	case LossExpired:
		return "expired"
	case LossClientClosed:
		return "client_closed"
	case LossReleaseUnconfirmed:
		return "release_unconfirmed"
	}
	return fmt.Sprintf("LossReason(%d)", int(r))
}

// describe says what the reason means, for error messages.
func (r LossReason) describe() string {
	switch r {
	case LossRejected:
		return "rejected by the server"
	case LossExpired:
		return "expired before a renewal succeeded"
	case LossClientClosed:
		return "client closed"
	case LossReleaseUnconfirmed:
		return "released=false after a release attempt that may have succeeded"
	}
	return r.String()
}

// LeaseLostError is the cause a guard's context is cancelled with when its
// lease is lost, and what Unlock, Extend and FencingToken return afterwards.
// errors.Is(err, ErrLeaseLost) holds; so does errors.Is(err, X) for the last
// renewal error X (for example ErrUnavailable) when there was one.
type LeaseLostError struct {
	Key string
	// Keys are every key of a multi-key lease (nil for one key).
	Keys         []string
	FencingToken uint64
	Reason       LossReason
	// LastErr is the last renewal error seen before a LossExpired loss, or
	// nil.
	LastErr error
}

func (e *LeaseLostError) Error() string {
	msg := fmt.Sprintf("holdfast: lease on %q (fencing token %d) lost: %s", e.Key, e.FencingToken, e.Reason.describe())
	if e.Keys != nil {
		msg = fmt.Sprintf("holdfast: lease on %q lost: %s", e.Keys, e.Reason.describe())
	}
	if e.LastErr != nil {
		msg += "; last renewal error: " + e.LastErr.Error()
	}
	return msg
}

// Unwrap lets errors.Is match ErrLeaseLost and the last renewal error.
func (e *LeaseLostError) Unwrap() []error {
	if e.LastErr != nil {
		return []error{ErrLeaseLost, e.LastErr}
	}
	return []error{ErrLeaseLost}
}

// rpcError is an RPC failure with connect's types stripped off, so that the
// public API never exposes them. It wraps one of the sentinels above and,
// when the caller's context ended the call, that context's error.
type rpcError struct {
	op      string
	code    string
	message string
	kind    error
	ctxErr  error
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("holdfast: %s: %s: %s", e.op, e.code, e.message)
}

func (e *rpcError) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{e.kind, e.ctxErr}
	}
	return []error{e.kind}
}

// mapError turns an error from a generated client into an SDK error. op
// names the RPC ("Acquire"). ctx is the call's context: when it has ended,
// its error is wrapped too so that errors.Is(err, context.DeadlineExceeded)
// works for callers.
func mapError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	code := connect.CodeOf(err)
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	e := &rpcError{op: op, code: code.String(), message: msg, kind: ErrServer}
	switch code {
	case connect.CodeInvalidArgument:
		e.kind = ErrInvalidArgument
	case connect.CodeUnavailable:
		e.kind = ErrUnavailable
	case connect.CodePermissionDenied:
		e.kind = ErrPermissionDenied
	case connect.CodeUnauthenticated:
		e.kind = ErrUnauthenticated
	case connect.CodeResourceExhausted:
		e.kind = ErrResourceExhausted
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		// Without an ended context of ours, a deadline came from somewhere
		// on the way (a proxy, the server): worth a retry.
		e.kind = ErrUnavailable
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller's own context (or a per-attempt deadline the SDK set,
		// or Close) ended the call: that is the whole story, not a server
		// failure. The cause (ErrClosed, say) is kept too.
		e.kind = ctxErr
		if cause := context.Cause(ctx); cause != ctxErr { //nolint:errorlint // identity: a cause other than the bare context error
			e.ctxErr = cause
		}
	} else if code == connect.CodeDeadlineExceeded {
		e.ctxErr = context.DeadlineExceeded
	}
	return e
}

// invalidArgument is an SDK-side refusal, before anything is sent.
func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Error codes, the same names in every holdfast SDK (docs/sdk-behaviour.md):
// Connect's codes for what the server answered, and the SDK's own for what
// the SDK decides.
const (
	CodeNotAcquired  = "not_acquired"
	CodeLeaseLost    = "lease_lost"
	CodeLockReleased = "lock_released"
	CodeClientClosed = "client_closed"
	CodeStaleToken   = "stale_token"
	CodeClockOffset  = "clock_offset"
	// CodeInvalidArgument is also the code of the SDK's own validation.
	CodeInvalidArgument = "invalid_argument"
	CodeUnavailable     = "unavailable"
	CodeCanceled        = "canceled"
	CodeDeadline        = "deadline_exceeded"
	CodeUnknown         = "unknown"
)

// ErrorCode is the code of an error returned by this package: one of the
// Code constants, or a Connect code the server answered ("unauthenticated",
// "permission_denied", "resource_exhausted", "internal", ...). It is "" for
// nil and "unknown" for an error that is not the SDK's. Codes are for
// logs, metrics and cross-language tooling; branch with errors.Is on the
// sentinels.
func ErrorCode(err error) string {
	var (
		na  *NotAcquiredError
		rpc *rpcError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &na):
		return CodeNotAcquired
	case errors.Is(err, ErrLeaseLost):
		return CodeLeaseLost
	case errors.Is(err, ErrReleased):
		return CodeLockReleased
	case errors.Is(err, ErrStaleToken):
		return CodeStaleToken
	case errors.Is(err, ErrClosed):
		return CodeClientClosed
	case errors.Is(err, hlc.ErrTooFarAhead):
		return CodeClockOffset
	case errors.As(err, &rpc):
		return rpc.code
	case errors.Is(err, ErrInvalidArgument):
		return CodeInvalidArgument
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadline
	}
	return CodeUnknown
}
