package engine

import (
	"context"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
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
// Close waits for them.
//
// Its goroutines are kept for a while after their call, to carry the next
// one: a detached Acquire goes through the plugin client's whole stack
// (gRPC, TLS, protobuf), and a new goroutine for each one spent a tenth of
// the server's CPU growing and copying its stack (runtime.newstack and
// copystack in the bench's profiles of the memory-c1 and -c32 rows); a
// kept one has grown it already. Handing a call to a kept goroutine costs
// what starting one does: it runs next on the same processor.
type background struct {
	mu     sync.Mutex
	closed bool
	work   chan func()   // to an idle kept goroutine; unbuffered
	quit   chan struct{} // closed by Close: the idle ones end
	wg     sync.WaitGroup
}

// backgroundIdle is how long a goroutine waits for another call before it
// ends: bursts reuse it, and an idle server keeps none for long.
const backgroundIdle = 30 * time.Second

// Go runs f on a goroutine of its own, unless Close has begun (false).
func (b *background) Go(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	if b.work == nil {
		b.work, b.quit = make(chan func()), make(chan struct{})
	}
	select {
	case b.work <- f: // an idle one took it
	default:
		b.wg.Go(func() { b.serve(f) })
	}
	return true
}

// serve runs f, then the calls handed to it, until it has been idle for
// backgroundIdle or Close begins.
func (b *background) serve(f func()) {
	idle := time.NewTimer(backgroundIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(backgroundIdle)
		select {
		case f = <-b.work:
		case <-idle.C:
			return
		case <-b.quit:
			return
		}
	}
}

// Close refuses new goroutines and waits for the running ones.
func (b *background) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		if b.quit != nil {
			close(b.quit)
		}
	}
	b.mu.Unlock()
	b.wg.Wait()
}
