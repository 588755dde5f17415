package holdfast

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Lock describes a lock to take: key, TTL, how long to wait, holder label.
// It is a small value: each setter returns a modified copy, so a Lock can be
// kept and reused as a template. Make one with Client.Lock:
//
//	g, err := client.Lock("jobs/nightly").TTL(10 * time.Second).Wait(30 * time.Second).Lock(ctx)
//
// The zero Lock has no client; every call on it fails.
type Lock struct {
	c      *Client
	key    string
	ttl    time.Duration
	wait   time.Duration
	holder string
}

// Lock starts describing a lock on key with the client's default TTL and
// holder label and no wait of its own (Lock then waits as long as its
// context allows).
func (c *Client) Lock(key string) Lock {
	return Lock{c: c, key: key, ttl: c.opts.defaultTTL, holder: c.opts.holder}
}

// TTL sets the lease length. The watchdog renews at about a third of it; a
// holder that stops renewing (crash, pause, partition) keeps others out for
// at most this long. Keep it well above one renewal round trip.
func (l Lock) TTL(ttl time.Duration) Lock { l.ttl = ttl; return l }

// Wait bounds how long Lock queues for the key (0: as long as the context
// allows). TryLock ignores it.
func (l Lock) Wait(wait time.Duration) Lock { l.wait = wait; return l }

// Holder sets the label others see for this lease (default: the client's,
// "hostname:pid" unless WithHolder set one).
func (l Lock) Holder(holder string) Lock { l.holder = holder; return l }

// Key is the key the lock is on.
func (l Lock) Key() string { return l.key }

func (l Lock) check() error {
	if l.c == nil {
		return invalidArgument("lock %q: no client (make locks with Client.Lock)", l.key)
	}
	if l.c.isClosed() {
		return ErrClosed
	}
	if l.ttl <= 0 {
		return invalidArgument("ttl %s: must be positive", l.ttl)
	}
	if l.wait < 0 {
		return invalidArgument("wait %s: must not be negative", l.wait)
	}
	return nil
}

// TryLock makes one attempt. When someone else holds the key it returns a
// *NotAcquiredError (errors.Is(err, ErrNotAcquired)) carrying the holder's
// state. It does not retry errors.
func (l Lock) TryLock(ctx context.Context) (*Guard, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	g, current, err := l.attempt(ctx, 0)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, &NotAcquiredError{Key: l.key, Current: current}
	}
	return g, nil
}

// maxServerWait bounds one waiting Acquire when neither Wait nor the context
// sets a deadline; Lock then queues again. Requeuing moves the caller to the
// back of the server's queue, so it is long.
const maxServerWait = 5 * time.Minute

// Lock acquires the lock, queuing on the server until it is free. The wait
// is bounded by Wait (when set) and the context's deadline, whichever is
// sooner; with neither, Lock waits until the context is cancelled. Answers
// of `unavailable` are retried with backoff within that budget. When the
// budget runs out it returns a *NotAcquiredError (errors.Is(err,
// ErrNotAcquired); when the context ended it, errors.Is(err, ctx.Err()) as
// well).
//
// If the context ends while an Acquire is in flight, the server may still
// have granted it; that lease is then held by nobody and frees itself after
// its TTL. Lock asks the server to stop waiting a little before the
// context's deadline so that, normally, the answer still arrives.
func (l Lock) Lock(ctx context.Context) (*Guard, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	var deadline time.Time // zero: until ctx is cancelled
	ctxBound := false
	if l.wait > 0 {
		deadline = time.Now().Add(l.wait)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline, ctxBound = d, true
	}
	var current *LockState
	var lastErr error
	retries := 0
	for {
		if ctx.Err() != nil {
			return nil, &NotAcquiredError{Key: l.key, Current: current, cause: ctx.Err()}
		}
		wait := maxServerWait
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if ctxBound {
				// Leave time for the answer to come back before the
				// context's deadline cuts the call.
				left -= min(left/10, 100*time.Millisecond)
			}
			if left <= 0 {
				// A deadline_exceeded from the server is the caller's own
				// deadline seen a moment early (it travels with the call,
				// in whole milliseconds), not an outage to report.
				if lastErr != nil && !errors.Is(lastErr, context.DeadlineExceeded) {
					return nil, lastErr
				}
				var cause error
				if ctxBound {
					// ctx's deadline has passed even if its timer has not
					// fired yet.
					cause = context.DeadlineExceeded
				}
				return nil, &NotAcquiredError{Key: l.key, Current: current, cause: cause}
			}
			wait = min(wait, left)
		}
		sent := time.Now()
		g, cur, err := l.attempt(ctx, wait)
		switch {
		case g != nil:
			return g, nil
		case err == nil:
			current, lastErr = cur, nil
			if time.Since(sent) >= wait/2 {
				retries = 0
				continue
			}
			// The server answered well before the wait ran out (the key
			// was freed and taken again, or the server caps waits): go
			// again, spaced so as not to spin.
		case ctx.Err() != nil:
			return nil, &NotAcquiredError{Key: l.key, Current: current, cause: ctx.Err()}
		case errors.Is(err, ErrUnavailable):
			lastErr = err
		default:
			return nil, err
		}
		// The loop's top notices an ended budget or context.
		sleep(ctx, l.c.opts.backoff.delay(retries), deadline)
		retries++
	}
}

// attempt sends one Acquire with the given server-side wait. It returns the
// guard when acquired, else the holder's state when the server gave it.
func (l Lock) attempt(ctx context.Context, wait time.Duration) (*Guard, *LockState, error) {
	req := &lockv1.AcquireRequest{
		Key:         l.key,
		Ttl:         durationpb.New(l.ttl),
		Holder:      l.holder,
		ClientStamp: l.c.stamp(),
	}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	ctx, done := l.c.callContext(ctx)
	defer done()
	// The lease starts on the server some time after this moment; counting
	// from here keeps the local expiry on the safe side.
	sent := time.Now()
	resp, err := l.c.rpc.Acquire(ctx, req)
	if err != nil {
		return nil, nil, mapError(ctx, "Acquire", err)
	}
	l.c.merge(resp.GetServerStamp(), resp.GetLease().GetStamp(), resp.GetCurrent().GetStamp())
	if !resp.GetAcquired() {
		var cur *LockState
		if resp.GetCurrent() != nil {
			s := lockStateFromProto(resp.GetCurrent())
			cur = &s
		}
		return nil, cur, nil
	}
	if resp.GetLease().GetOwnerToken() == "" {
		return nil, nil, &rpcError{op: "Acquire", code: "internal", message: "acquired=true without a lease and owner token", kind: ErrServer}
	}
	g := newGuard(l.c, l.holder, resp.GetLease(), sent, l.ttl)
	if ok, err := g.confirm(ctx, sent); !ok {
		return nil, nil, err
	}
	g.start(ctx)
	if !l.c.track(g) {
		// Closed while acquiring: give the lease straight back.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeReleaseTimeout)
		defer cancel()
		_ = g.Unlock(uctx)
		return nil, nil, ErrClosed
	}
	return g, nil, nil
}
