package holdfast

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Lock describes a lock to take: key (or keys), TTL, how long to wait,
// holder label, lock-delay. It is a small value: each setter returns a
// modified copy, so a Lock can be kept and reused as a template. Make one
// with Client.Lock:
//
//	g, err := client.Lock("jobs/nightly").TTL(10 * time.Second).Wait(30 * time.Second).Lock(ctx)
//
// Several keys are taken together, all or none, under one lease:
//
//	g, err := client.Lock("accounts/1", "accounts/2").Lock(ctx)
//
// The zero Lock has no client; every call on it fails.
type Lock struct {
	c         *Client
	key       string
	more      []string // the other keys of a multi-key lock
	ttl       time.Duration
	wait      time.Duration
	waitSet   bool
	holder    string
	lockDelay time.Duration

	// A semaphore or read-write lock grant (primitives.go); the zero
	// values are a lock.
	kind       Kind
	limit      int
	permits    int
	permitsSet bool
	mode       Mode
	// value is a campaign's (KindElection; election.go).
	value string
}

// Lock starts describing a lock on key (and on every key of more, taken
// together with it, all or none, in one atomic step of the server's
// backend) with the client's default TTL and holder label and no wait of
// its own (Lock then queues until it holds the lock or its context ends).
// Waiting sets and single keys are served in arrival order, and
// overlapping sets never deadlock (the server queues a set on all of its
// keys at once). A multi-key lock needs a backend with
// CAPABILITY_MULTI_KEY (ServerInfo's BackendInfo.MaxKeys > 1).
func (c *Client) Lock(key string, more ...string) Lock {
	return Lock{c: c, key: key, more: more, ttl: c.opts.defaultTTL, holder: c.opts.holder}
}

// TTL sets the lease length, at least MinTTL (100ms). The watchdog renews
// at a third of it; a holder that stops renewing (crash, pause, partition)
// keeps others out for at most this long. Keep it well above one renewal
// round trip. It is a time.Duration: TTL(3) is 3 nanoseconds, and refused.
func (l Lock) TTL(ttl time.Duration) Lock { l.ttl = ttl; return l }

// Wait bounds how long Lock queues for the key; Wait(0) makes Lock a single
// attempt. Without Wait, Lock queues until it holds the lock or its context
// ends. TryLock ignores it.
func (l Lock) Wait(wait time.Duration) Lock { l.wait, l.waitSet = wait, true; return l }

// Holder sets the label others see for this lease (default: the client's,
// "hostname:pid" unless WithHolder set one).
func (l Lock) Holder(holder string) Lock { l.holder = holder; return l }

// LockDelay sets the lock-delay: if the lease expires (its holder stopped
// renewing it; not when it is released), its keys refuse new holders for
// d, so that the stalled holder's writes in flight drain before the next
// holder starts. Waiters wait through it. 0 (the default) is none; the
// server caps it (BackendInfo.MaxLockDelay, 1 minute by default) and needs
// CAPABILITY_LOCK_DELAY.
func (l Lock) LockDelay(d time.Duration) Lock { l.lockDelay = d; return l }

// Key is the (first) key the lock is on.
func (l Lock) Key() string { return l.key }

// Keys are every key the lock is on.
func (l Lock) Keys() []string { return append([]string{l.key}, l.more...) }

func (l Lock) check() error {
	if l.c == nil {
		return invalidArgument("lock %q: no client (make locks with Client.Lock)", l.key)
	}
	if l.c.isClosed() {
		return ErrClosed
	}
	if err := checkTTL("ttl", l.ttl, l.c.opts.margin); err != nil {
		return err
	}
	if l.wait < 0 {
		return invalidArgument("wait: %s is negative; Wait(0) is one attempt, and without Wait, Lock queues until acquired or its context ends", l.wait)
	}
	if l.lockDelay < 0 {
		return invalidArgument("lock_delay: %s is negative; 0 is none", l.lockDelay)
	}
	return l.checkKind()
}

// notAcquired is the error for a lock that stayed held.
func (l Lock) notAcquired(current *LockState, delay *KeyDelay, cause error) *NotAcquiredError {
	return &NotAcquiredError{Key: l.key, Keys: l.multiKeys(), Current: current, Delay: delay, cause: cause}
}

// multiKeys are the keys of a multi-key lock (nil for one key).
func (l Lock) multiKeys() []string {
	if len(l.more) == 0 {
		return nil
	}
	return l.Keys()
}

// checkTTL refuses a lease the watchdog could not keep: shorter than MinTTL,
// or one whose expiry margin eats half of it or more.
func checkTTL(field string, ttl time.Duration, m ExpiryMargin) error {
	if ttl < MinTTL {
		return invalidArgument("%s: %s is below the SDK minimum %s (Go durations are time.Duration: 3 means 3ns; write 3*time.Second)", field, ttl, MinTTL)
	}
	if margin := m.For(ttl); margin >= ttl/2 {
		return invalidArgument("%s: %s is too short for the expiry margin %s (drift factor %v + %s): the margin must stay below half the TTL", field, ttl, margin, m.DriftFactor, m.Fixed)
	}
	return nil
}

// TryLock makes one attempt and never queues; a Wait on the Lock is
// ignored. When someone else holds the key it returns a *NotAcquiredError
// (errors.Is(err, ErrNotAcquired)) carrying the holder's state. Transport
// failures and `unavailable` answers are retried within the retry budget.
func (l Lock) TryLock(ctx context.Context) (*Guard, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	return l.once(ctx)
}

// once is one decisive attempt (TryLock, Wait(0)).
func (l Lock) once(ctx context.Context) (*Guard, error) {
	cctx, done := l.c.callContext(ctx)
	defer done()
	var resp *lockv1.AcquireResponse
	var sent time.Time
	rid := newRequestID() // the same on every retry: a retry of a lost answer gets its lease
	err := l.c.retrying(cctx, "Acquire", time.Time{}, func(actx context.Context) error {
		var err error
		resp, sent, err = l.send(actx, 0, rid)
		return err
	})
	if err != nil {
		return nil, err
	}
	g, current, delay, err := l.take(cctx, resp, sent)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, l.notAcquired(current, delay, nil)
	}
	return g, nil
}

// maxServerWait bounds one waiting Acquire whose wait the SDK chooses (no
// Wait, or a long one): Lock then queues again. Requeuing moves the caller
// to the back of the server's queue, so it is long; a server whose
// --max-wait is shorter refuses it, and the client then asks for at most
// that server's max_wait.
const maxServerWait = 5 * time.Minute

// Lock acquires the lock, queuing on the server until it is free. The wait
// is bounded by Wait (when set; Wait(0) is one attempt) and by the
// context's deadline, whichever is sooner; with neither, Lock queues until
// the context is cancelled. `unavailable` answers and transport failures
// are retried with backoff for at most the retry budget in a row
// (WithRetryBudget, default 5s), then Lock returns that error
// (errors.Is(err, ErrUnavailable)): an unreachable server never makes it
// hang. When the wait runs out it returns a *NotAcquiredError
// (errors.Is(err, ErrNotAcquired); when the context ended it,
// errors.Is(err, ctx.Err()) as well).
//
// If the context ends while an Acquire is in flight, the server may still
// have granted it; that lease is then held by nobody and frees itself after
// its TTL. Lock asks the server to stop waiting a little before the
// context's deadline so that, normally, the answer still arrives.
func (l Lock) Lock(ctx context.Context) (*Guard, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if l.waitSet && l.wait == 0 {
		return l.once(ctx)
	}
	cctx, done := l.c.callContext(ctx)
	defer done()
	var deadline time.Time // zero: until ctx is cancelled
	ctxBound := false
	if l.waitSet {
		deadline = time.Now().Add(l.wait)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline, ctxBound = d, true
	}
	var current *LockState
	var delay *KeyDelay
	var lastErr error
	var failing time.Time // send time of the first failed attempt in a row
	retries := 0
	// One request id for the whole acquisition: an attempt whose answer
	// was lost may have taken the lease, and the next attempt, carrying
	// the same id, is answered with it (not with a wait for its own
	// orphan's TTL).
	rid := newRequestID()
	for {
		if cctx.Err() != nil {
			return nil, l.ended(ctx, cctx, current, delay, lastErr)
		}
		wait := l.c.serverWait()
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
				return nil, l.notAcquired(current, delay, cause)
			}
			wait = min(wait, left)
		}
		sent := time.Now()
		// The server's wait is the attempt's business, not the request
		// timeout's.
		actx, cancel := context.WithTimeout(cctx, wait+l.c.opts.requestTimeout)
		resp, _, err := l.send(actx, wait, rid)
		if err == nil {
			cancel()
			g, cur, del, err := l.take(cctx, resp, sent)
			switch {
			case g != nil:
				return g, nil
			case err != nil:
				return nil, err
			}
			current, delay, lastErr, failing = cur, del, nil, time.Time{}
			if time.Since(sent) >= wait/2 {
				retries = 0
				continue
			}
			// The server answered well before the wait ran out (the key
			// was freed and taken again): go again, spaced so as not to
			// spin.
		} else {
			retry, failed := attemptError(cctx, actx, "Acquire", err)
			cancel()
			switch {
			case cctx.Err() != nil:
				return nil, l.ended(ctx, cctx, current, delay, failed)
			case !retry && errors.Is(failed, ErrInvalidArgument) && l.c.learnMaxWait(cctx, wait):
				// The server refused a wait the SDK chose; it now asks
				// for at most the server's max_wait.
				continue
			case !retry:
				return nil, failed
			}
			lastErr = failed
			if failing.IsZero() {
				failing = sent
			}
			if spent := time.Since(failing); spent >= l.c.opts.retryBudget {
				return nil, outOfBudget(failed, spent)
			}
		}
		var budgetEnd time.Time
		if !failing.IsZero() {
			budgetEnd = failing.Add(l.c.opts.retryBudget)
		}
		// The loop's top notices an ended wait or context.
		if !sleep(cctx, l.c.opts.backoff.delay(retries), earliest(deadline, budgetEnd)) &&
			cctx.Err() == nil && !budgetEnd.IsZero() && !time.Now().Before(budgetEnd) {
			return nil, outOfBudget(lastErr, time.Since(failing))
		}
		retries++
	}
}

// ended is Lock's answer when its context (or Close) ended the wait.
func (l Lock) ended(ctx, cctx context.Context, current *LockState, delay *KeyDelay, last error) error {
	if ctx.Err() == nil {
		// Close ended it, not the caller.
		if last != nil && errors.Is(last, ErrClosed) {
			return last
		}
		return ErrClosed
	}
	return l.notAcquired(current, delay, ctx.Err())
}

// send sends one Acquire with the given server-side wait and request id and
// returns the server's answer and the moment it was sent, or the RPC's own
// error.
func (l Lock) send(ctx context.Context, wait time.Duration, rid string) (*lockv1.AcquireResponse, time.Time, error) {
	req := &lockv1.AcquireRequest{
		Ttl:         durationpb.New(l.ttl),
		Holder:      l.holder,
		ClientStamp: l.c.stamp(),
		RequestId:   rid,
	}
	if len(l.more) == 0 {
		req.Key = l.key
	} else {
		for _, k := range l.Keys() {
			req.Claims = append(req.Claims, &lockv1.Claim{Key: k})
		}
	}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	if l.lockDelay > 0 {
		req.LockDelay = durationpb.New(l.lockDelay)
	}
	l.fill(req)
	// The lease starts on the server some time after this moment; counting
	// from here keeps the local expiry on the safe side.
	sent := time.Now()
	resp, err := l.c.rpc.Acquire(ctx, req)
	return resp, sent, err
}

// take turns an Acquire answer into a guard, or the holder's state (or a
// key's lock-delay) when the key was held.
func (l Lock) take(ctx context.Context, resp *lockv1.AcquireResponse, sent time.Time) (*Guard, *LockState, *KeyDelay, error) {
	l.c.merge(resp.GetServerStamp(), resp.GetLease().GetStamp(), resp.GetCurrent().GetStamp())
	if !resp.GetAcquired() {
		var cur *LockState
		if resp.GetCurrent() != nil {
			s := lockStateFromProto(resp.GetCurrent())
			cur = &s
		}
		return nil, cur, keyDelayFromProto(resp.GetDelayed()), nil
	}
	lease := resp.GetLease()
	if lease.GetOwnerToken() == "" || (len(l.more) > 0) != (len(lease.GetKeys()) > 0) {
		return nil, nil, nil, &rpcError{op: "Acquire", code: "internal", message: "acquired=true without a lease, owner token and its keys", kind: ErrServer}
	}
	gr, err := l.grantOf(lease)
	if err != nil {
		// Not what was asked for: give it straight back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeReleaseTimeout)
		defer cancel()
		_, _ = l.c.rpc.Release(rctx, &lockv1.ReleaseRequest{Key: lease.GetKey(), OwnerToken: lease.GetOwnerToken(), ClientStamp: l.c.stamp(), RequestId: newRequestID()})
		return nil, nil, nil, err
	}
	g := newGuard(l.c, l.holder, lease, gr, sent, l.ttl)
	if ok, err := g.confirm(ctx, sent); !ok {
		return nil, nil, nil, err
	}
	g.start(ctx)
	if !l.c.track(g) {
		// Closed while acquiring: give the lease straight back.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeReleaseTimeout)
		defer cancel()
		_ = g.Unlock(uctx)
		return nil, nil, nil, ErrClosed
	}
	return g, nil, nil, nil
}
