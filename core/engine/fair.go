package engine

import (
	"context"
	"errors"
	"hash/maphash"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// fair returns the backend's queue when it promises order across servers.
func (e *Engine) fair() (backend.FairBackend, bool) {
	if !e.Info().Fair {
		return nil, false
	}
	f, ok := e.b.(backend.FairBackend)
	return f, ok
}

var enqSeed = maphash.MakeSeed()

// acquireFair waits for key on a fair backend. Every waiter has an entry in
// the store's queue for key (across all servers, in the store's order), and
// the backend's Acquire lets only the head of that queue win, and a
// newcomer only when the queue is empty. Each waiter also joins this
// server's queue, in the same order (enqMu), so the store's head among this
// server's waiters is always the local head: only the local head asks the
// store for its turn, and the others sleep as in acquireWaiting.
//
// The head learns its turn from the backend (WaitTurn, woken by the store
// when the entry before it goes), then tries; while the lock is held it is
// woken as every waiter is (release and expiry events, the holder's expiry
// timer). A waiter that gives up, or whose caller goes away, removes its
// entry at once.
func (e *Engine) acquireFair(ctx context.Context, f backend.FairBackend, key string, ttl, wait time.Duration, holder string) (*lockv1.AcquireResponse, error) {
	if caller, ok := ctx.Value(callerKey{}).(string); ok {
		if err := e.addCaller(caller); err != nil {
			return nil, err
		}
		defer e.removeCaller(caller)
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stopOnClose := context.AfterFunc(e.closing, cancel)
	defer stopOnClose()

	// Nobody waits here: try as a newcomer first. The backend refuses when
	// anyone is queued in the store, so this never jumps the queue, and an
	// uncontended lock costs no queue entry.
	if e.q.Depth(key) == 0 {
		a, err := e.try(ctx, key, ttl, holder)
		if err != nil && !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		if err == nil && a.acquired {
			return e.acquired(a), nil
		}
	}

	id := newOwnerToken()
	mu := &e.enqMu[maphash.String(enqSeed, key)%uint64(len(e.enqMu))]
	mu.Lock()
	w, err := e.q.Join(key)
	if err != nil {
		mu.Unlock()
		return nil, newErr(ErrResourceExhausted, "wait: %v", err)
	}
	defer w.Leave()
	enqErr := e.enqueue(ctx, f, key, id)
	mu.Unlock()
	if enqErr != nil {
		// Fail now rather than queue again later: a later entry would sit
		// behind this server's later waiters, which wait for this one.
		return nil, enqErr
	}
	won := false
	defer func() {
		if !won {
			// Leave the store's queue before the local one, so the next
			// local head finds this entry gone.
			callCtx, cancel := e.detached(ctx)
			defer cancel()
			if err := f.Dequeue(callCtx, key, id); err != nil {
				e.log.Warn("could not leave the fair queue; the backend deletes the entry when it can, or it goes with the backend's session", "key", key, "err", err)
			}
		}
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		current *backend.Record
		lastErr error
		retry   = minRetry
		atHead  bool
		queued  = true
		guessed = true // the first try is made without asking for the turn
	)
	for {
		select {
		case <-w.Wake():
		case <-timer.C:
		case <-waitCtx.Done():
			select {
			case <-e.done:
				return nil, newErr(ErrUnavailable, "acquire: the server is shutting down")
			default:
			}
			if ctx.Err() != nil {
				return nil, ctxErr(ctx, "acquire")
			}
			if lastErr != nil {
				return nil, lastErr
			}
			w.Leave()
			return e.notAcquired(current), nil
		}
		if !w.IsHead() {
			continue
		}
		if until, held := w.HeldUntil(); held {
			if d := time.Until(until) + e.Info().TTLGranularity; d > 0 {
				timer.Reset(d)
				continue
			}
		}
		if !queued {
			// The entry is gone (the plugin restarted, or its session
			// lapsed): queue again, at the tail.
			if err := e.enqueue(ctx, f, key, id); err != nil {
				lastErr = err
				timer.Reset(retry)
				retry = min(2*retry, maxRetry)
				continue
			}
			queued, atHead = true, false
		}
		// A new local head tries at once: the backend's Acquire checks the
		// turn anyway, and on a handoff it usually is ours, so asking
		// first would put a read on every handoff's path. Only when the
		// try finds the lock free but not ours does it wait for its turn.
		verified := false
		if !atHead && guessed {
			atHead, guessed = true, false
		} else if !atHead {
			verified = true
			ok, err := e.waitTurn(waitCtx, f, key, id)
			switch {
			case waitCtx.Err() != nil:
				timer.Reset(0) // the select above reports the timeout
				continue
			case err != nil:
				lastErr = backendErr(ctx, "acquire: wait for turn", err)
				timer.Reset(retry)
				retry = min(2*retry, maxRetry)
				continue
			case !ok:
				queued = false
				timer.Reset(0)
				continue
			}
			atHead = true
		}
		a, err := e.tryAs(waitCtx, key, ttl, holder, id)
		if waitCtx.Err() != nil {
			continue // the wait ended during the try: the select above says how
		}
		switch {
		case err != nil && !errors.Is(err, ErrUnavailable):
			return nil, err
		case err != nil:
			lastErr = err
			atHead = false
			timer.Reset(retry)
			retry = min(2*retry, maxRetry)
		case a.acquired:
			won = true
			w.Won(a.lease.GetFencingToken(), a.lease.GetOwnerToken(), time.Now().Add(ttl))
			return e.acquired(a), nil
		case a.current == nil && !verified:
			// Free, but not our turn yet: wait for it.
			lastErr = nil
			atHead = false
			timer.Reset(0)
		case a.current == nil:
			// Free, but not ours although it was our turn: the entry went,
			// or the lease came back too late (and took the entry with
			// it). Ask again.
			lastErr = nil
			atHead = false
			timer.Reset(retry)
			retry = min(2*retry, maxRetry)
		default:
			lastErr = nil
			d := a.current.Remaining + e.Info().TTLGranularity
			if current != nil && current.FencingToken == a.current.FencingToken && d < retry {
				d = retry
				retry = min(2*retry, maxRetry)
			} else {
				retry = minRetry
			}
			current = a.current
			timer.Reset(max(d, time.Millisecond))
		}
	}
}

func (e *Engine) enqueue(ctx context.Context, f backend.FairBackend, key, id string) error {
	callCtx, cancel := e.detached(ctx)
	defer cancel()
	if err := f.Enqueue(callCtx, key, id); err != nil {
		return backendErr(ctx, "acquire: enqueue", err)
	}
	return nil
}

// waitTurn asks for the turn until waitCtx ends. The call carries no
// deadline (it is cancelled instead), so the end of the wait always reads as
// the end of the wait here, never as a backend's timeout.
func (e *Engine) waitTurn(waitCtx context.Context, f backend.FairBackend, key, id string) (bool, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(waitCtx))
	defer cancel()
	stop := context.AfterFunc(waitCtx, cancel)
	defer stop()
	return f.WaitTurn(ctx, key, id)
}
