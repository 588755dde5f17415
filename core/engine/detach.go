package engine

import (
	"context"
	"sync"

	"github.com/holdfast/holdfast/core/backend"
)

// acquireDetached makes one backend Acquire whose outcome the engine must
// learn even when its caller gives up, without making the caller wait past
// ctx. The call runs detached from ctx (bounded by CallTimeout and by
// Close) on a goroutine of the engine's; the caller waits for its answer or
// for ctx's end, whichever comes first. A call the caller stopped waiting
// for goes on in the background, and a lease it wins then is released at
// once: nobody will be told of it. So a frozen or slow backend never holds
// a waiter past its wait nor any Acquire past its request deadline.
func (e *Engine) acquireDetached(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	type answer struct {
		res backend.AcquireResult
		err error
	}
	out := make(chan answer)
	gaveUp := make(chan struct{})
	callCtx, cancel := e.detached(ctx)
	ok := e.bg.Go(func() {
		defer cancel()
		stop := context.AfterFunc(e.closing, cancel)
		defer stop()
		res, err := e.calls.Acquire(callCtx, req)
		select {
		case out <- answer{res, err}:
		case <-gaveUp:
			if err == nil && res.Acquired {
				e.releaseDetached(callCtx, req.Key, req.OwnerToken)
			}
		}
	})
	if !ok {
		cancel()
		return backend.AcquireResult{}, newErr(ErrUnavailable, "acquire: the server is shutting down")
	}
	select {
	case a := <-out:
		return a.res, a.err
	case <-ctx.Done():
		close(gaveUp)
		return backend.AcquireResult{}, ctx.Err()
	}
}

// background owns the goroutines of calls that outlive their callers;
// Close waits for them.
type background struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f on a goroutine of its own, unless Close has begun (false).
func (b *background) Go(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Go(f)
	return true
}

// Close refuses new goroutines and waits for the running ones.
func (b *background) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
