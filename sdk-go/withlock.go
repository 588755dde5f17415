package holdfast

import (
	"context"
	"errors"
	"time"
)

// WithLock takes l (waiting as Lock does), runs fn under it and releases it.
//
// fn receives a context that is cancelled when the lease is lost (cause: a
// *LeaseLostError) or when ctx ends; stop the work when it is.
// GuardFromContext(ctx) gives fn the guard, for its fencing token. The lease is
// released after fn returns, even if ctx has ended by then, and even if fn
// panics (the panic then goes on).
//
// WithLock returns fn's error joined with the release's: a lease lost while
// fn ran makes the result match ErrLeaseLost even when fn returned nil, so a
// caller never mistakes overrun work for work done under the lock. Failing to
// acquire returns Lock's error (errors.Is(err, ErrNotAcquired) on timeout).
func WithLock(ctx context.Context, l Lock, fn func(ctx context.Context) error) (err error) {
	g, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(g.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer func() {
		stop()
		cancel(nil)
		// Release even when ctx has ended; bound it by the lease itself.
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), g.TTL()+time.Second)
		defer ucancel()
		if uerr := g.Unlock(uctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	return fn(fctx)
}
