package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/holdfast/holdfast/core/backend"
)

// Sentinel errors. Every error the engine returns wraps exactly one of them;
// the server maps each to a Connect code of the same name. The error's text
// is the message meant for the client (for bad input: the field and the
// limit, e.g. "ttl: 30h exceeds the maximum 24h").
var (
	ErrInvalidArgument   = errors.New("invalid argument")
	ErrUnavailable       = errors.New("unavailable")
	ErrResourceExhausted = errors.New("resource exhausted")
	ErrDeadlineExceeded  = errors.New("deadline exceeded")
	ErrCanceled          = errors.New("canceled")
	// ErrUnimplemented: the request needs a capability the backend lacks
	// (the message names it).
	ErrUnimplemented = errors.New("unimplemented")
	// ErrFailedPrecondition: the backend, as configured, cannot do this
	// request (the message says why).
	ErrFailedPrecondition = errors.New("failed precondition")
)

// Error is an engine error: Kind is one of the sentinels, Msg the message
// for the client.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap lets errors.Is match the sentinel.
func (e *Error) Unwrap() error { return e.Kind }

func newErr(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func invalidf(format string, args ...any) error {
	return newErr(ErrInvalidArgument, format, args...)
}

// ctxErr reports why the caller's ctx ended.
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return newErr(ErrDeadlineExceeded, "%s: the caller's deadline was exceeded", what)
	}
	return newErr(ErrCanceled, "%s: the caller canceled", what)
}

// backendErr maps a backend error: the caller's own cancellation wins, an
// ErrInvalidArgument stays invalid_argument, anything else is unavailable
// (the backend contract).
func backendErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx, what)
	}
	if errors.Is(err, backend.ErrInvalidArgument) {
		// The backend's words, without the sentinel's own text, so the
		// message starts with the field: "page_token: ...".
		msg := strings.Replace(err.Error(), backend.ErrInvalidArgument.Error()+": ", "", 1)
		return newErr(ErrInvalidArgument, "%s", msg)
	}
	if errors.Is(err, backend.ErrRequestConflict) {
		return invalidf("request_id: already used for another %s (a repeat must send the same arguments)", what)
	}
	if errors.Is(err, backend.ErrFailedPrecondition) {
		msg := strings.Replace(err.Error(), backend.ErrFailedPrecondition.Error()+": ", "", 1)
		return newErr(ErrFailedPrecondition, "%s: %s", what, msg)
	}
	// Said once: the plugin host's errors already start with the
	// sentinel's own text.
	msg := strings.Replace(err.Error(), backend.ErrUnavailable.Error()+": ", "", 1)
	return newErr(ErrUnavailable, "%s: backend unavailable: %s", what, msg)
}
