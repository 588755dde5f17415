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
func WithLock(ctx context.Context, l Lock, fn func(ctx context.Context) error) error {
	g, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	return runUnder(ctx, g, fn)
}

// TryWithLock runs fn under l only if the key is free: one attempt, never a
// queue (a Wait on l is ignored). When someone else holds the key it returns
// (false, nil) without calling fn: "skip if held", for work that one
// process doing is enough (a scheduled job, a cache refresh). Otherwise fn
// runs as under WithLock (watchdog on, context cancelled on loss, released
// after), and TryWithLock returns (true, fn's error joined with the
// release's). Any other failure to acquire is (false, err).
func TryWithLock(ctx context.Context, l Lock, fn func(ctx context.Context) error) (ran bool, err error) {
	g, err := l.TryLock(ctx)
	if errors.Is(err, ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, runUnder(ctx, g, fn)
}

// runUnder runs fn under the held guard g and releases it afterwards.
func runUnder(ctx context.Context, g *Guard, fn func(ctx context.Context) error) (err error) {
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

// ScheduledJob is a job that a scheduler on every server triggers and that
// must run on one server at a time (docs/recipes/scheduled-jobs.md).
type ScheduledJob struct {
	// Key names the job's lock; one key per job.
	Key string
	// MaxRuntime is the run's deadline: its context ends then. Required.
	MaxRuntime time.Duration
	// TTL is the lease length; it must be longer than MaxRuntime, so a run
	// that ends in time is never cut short by renewals that could not get
	// through. 0 means MaxRuntime × 1.5. Keep it below the schedule's
	// interval: a crashed run holds the key until its TTL ends.
	TTL time.Duration
	// Holder labels the lease (default: the client's).
	Holder string
	// Run is the job. Its context ends at MaxRuntime, when the lease is lost
	// or when the context given to RunScheduled ends; fencingToken is the
	// lease's: pass it with every write the job makes, and have the resource
	// refuse older tokens (ValidateWrite).
	Run func(ctx context.Context, fencingToken uint64) error
}

// RunScheduled runs job if no other process holds its key, and skips it
// (false, nil) if one does: what each server's scheduler calls on every
// tick so that the job runs once, wherever the tick came first. It takes
// one attempt (TryWithLock), with the watchdog on, a lease longer than the
// job's MaxRuntime and the fencing token handed to the job. The error is
// Run's joined with the release's: a lease lost during the run matches
// ErrLeaseLost.
func (c *Client) RunScheduled(ctx context.Context, job ScheduledJob) (ran bool, err error) {
	if job.Run == nil {
		return false, invalidArgument("scheduled job %q: Run is nil", job.Key)
	}
	if job.MaxRuntime <= 0 {
		return false, invalidArgument("scheduled job %q: max runtime %s: must be positive", job.Key, job.MaxRuntime)
	}
	ttl := job.TTL
	if ttl == 0 {
		ttl = job.MaxRuntime + job.MaxRuntime/2
	}
	if ttl <= job.MaxRuntime {
		return false, invalidArgument("scheduled job %q: ttl %s must be longer than the max runtime %s", job.Key, ttl, job.MaxRuntime)
	}
	l := c.Lock(job.Key).TTL(ttl)
	if job.Holder != "" {
		l = l.Holder(job.Holder)
	}
	return TryWithLock(ctx, l, func(ctx context.Context) error {
		g, _ := GuardFromContext(ctx)
		token, err := g.FencingToken()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, job.MaxRuntime)
		defer cancel()
		return job.Run(ctx, token)
	})
}
