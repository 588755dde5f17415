package engine

import (
	"context"
	"sync"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/workers"
)

// outcome is one backend acquire's answer, for one key or a set.
type outcome struct {
	acquired bool
	records  []backend.Record // the new locks, one per key in order, when acquired
	blocker  backend.Record   // the holder or a lock-delay, when not
	replayed bool
	replay   string
}

// acquireBackend makes one backend Acquire (or AcquireSet) of s's keys
// under token.
func (e *Engine) acquireBackend(ctx context.Context, s *acquireSpec, token, waiterID string, replayOnly bool) (outcome, error) {
	stamp := e.clock.Now()
	if !s.keys.set() {
		res, err := e.calls.Acquire(ctx, backend.AcquireRequest{
			Key: s.keys.keys[0], OwnerToken: token, TTL: s.ttl, Holder: s.holder, Stamp: stamp, WaiterID: waiterID,
			Request: s.ident, Replay: s.rid.sealFor(s.ident, token), LockDelay: s.lockDelay, ReplayOnly: replayOnly,
			Kind: s.shape.kind, Limit: s.shape.limit, Permits: s.shape.permits, Value: s.value,
		})
		if err != nil {
			return outcome{}, err
		}
		if res.Acquired {
			return outcome{acquired: true, records: []backend.Record{res.Record}, replayed: res.Replayed, replay: res.Replay}, nil
		}
		return outcome{blocker: res.Record}, nil
	}
	sb, _ := e.sets()
	res, err := sb.AcquireSet(ctx, backend.AcquireSetRequest{
		Claims: s.keys.claims(), OwnerToken: token, TTL: s.ttl, Holder: s.holder, Stamp: stamp, WaiterID: waiterID,
		Request: s.ident, Replay: s.rid.sealFor(s.ident, token), LockDelay: s.lockDelay, ReplayOnly: replayOnly,
	})
	if err != nil {
		return outcome{}, err
	}
	return outcome{acquired: res.Acquired, records: res.Records, blocker: res.Blocker, replayed: res.Replayed, replay: res.Replay}, nil
}

// acquireDetached makes one backend Acquire whose outcome the engine must
// learn even when its caller gives up, without making the caller wait past
// ctx. The call runs detached from ctx (bounded by CallTimeout and by
// Close) on a goroutine of the engine's; the caller waits for its answer or
// for ctx's end, whichever comes first. A call the caller stopped waiting
// for goes on in the background, and a lease it wins then is given back at
// once (abandoned: unless a repeat of the request has been answered with
// it meanwhile): nobody will be told of it. A replay is never given back:
// it is the first attempt's lease. So a frozen or slow backend never holds
// a waiter past its wait nor any Acquire past its request deadline.
func (e *Engine) acquireDetached(ctx context.Context, s *acquireSpec, token, waiterID string, replayOnly bool) (outcome, error) {
	type answer struct {
		out outcome
		err error
	}
	out := make(chan answer)
	gaveUp := make(chan struct{})
	callCtx, cancel := e.detached(ctx)
	ok := e.bg.Go(func() {
		defer cancel()
		stop := context.AfterFunc(e.closing, cancel)
		defer stop()
		res, err := e.acquireBackend(callCtx, s, token, waiterID, replayOnly)
		select {
		case out <- answer{res, err}:
		case <-gaveUp:
			if err == nil && res.acquired && !res.replayed {
				e.abandon(callCtx, s.keys, token)
			}
		}
	})
	if !ok {
		cancel()
		return outcome{}, newErr(ErrUnavailable, "acquire: the server is shutting down")
	}
	select {
	case a := <-out:
		return a.out, a.err
	case <-ctx.Done():
		close(gaveUp)
		return outcome{}, ctx.Err()
	}
}

// background owns the goroutines of calls that outlive their callers;
// Close waits for them. They are workers of a pool (package workers), so a
// detached Acquire, which runs down to the plugin's gRPC client, does not
// grow a new goroutine's stack each time.
type background struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	pool   *workers.Pool // made by the first Go
}

// backgroundIdle is how many of the background's workers stay parked
// between calls: above the detached Acquires a busy server has in flight.
const backgroundIdle = 256

// Go runs f on one of the workers, unless Close has begun (false).
func (b *background) Go(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.pool == nil {
		b.pool = workers.New(backgroundIdle)
	}
	b.wg.Add(1)
	b.pool.Go(func() {
		defer b.wg.Done()
		f()
	})
	return true
}

// Close refuses new goroutines, waits for the running ones and lets the
// parked workers go.
func (b *background) Close() {
	b.mu.Lock()
	b.closed = true
	pool := b.pool
	b.mu.Unlock()
	b.wg.Wait()
	if pool != nil {
		pool.Close()
	}
}
