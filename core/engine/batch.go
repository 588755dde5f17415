package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/combine"
)

// Batching: on a backend that batches (backend.BatchBackend), the
// Acquires, Releases and Extends that callers make at the same moment go to
// the backend together, each kind in one call (package combine): a call
// that finds no batch of its kind running is sent at once and alone, so an
// idle server adds no delay; calls that arrive while batches run go in the
// next one. Each caller still gets its own outcome, decided atomically by
// the backend as its single call would be.

// Defaults of BatchConfig.
const (
	DefaultBatchInFlight = 2
	DefaultBatchMaxItems = 256
)

// BatchConfig tunes batching.
type BatchConfig struct {
	// InFlight bounds the batch calls of one kind (Acquire, Release,
	// Extend) running at once (0: DefaultBatchInFlight).
	InFlight int
	// MaxItems bounds the requests in one batch call (0:
	// DefaultBatchMaxItems).
	MaxItems int
	// Off sends every call on its own.
	Off bool
}

// batcher carries the engine's backend calls, batched when the backend can.
type batcher struct {
	e  *Engine
	bb backend.BatchBackend // nil: the backend does not batch
	// off is set when the backend answered errors.ErrUnsupported (a plugin
	// that does not serve batches), and cleared at every resync (the
	// plugin may have been replaced).
	off atomic.Bool

	acquire *combine.Combiner[backend.AcquireRequest, backend.AcquireResult]
	release *combine.Combiner[backend.ReleaseRequest, bool]
	extend  *combine.Combiner[backend.ExtendRequest, backend.ExtendResult]
}

func newBatcher(e *Engine, cfg BatchConfig) *batcher {
	bt := &batcher{e: e}
	if cfg.Off {
		return bt
	}
	bb, ok := e.b.(backend.BatchBackend)
	if !ok {
		return bt
	}
	bt.bb = bb
	inFlight := cfg.InFlight
	if inFlight <= 0 {
		inFlight = DefaultBatchInFlight
	}
	items := cfg.MaxItems
	if items <= 0 {
		items = DefaultBatchMaxItems
	}
	bt.acquire = combine.New(combine.Config[backend.AcquireRequest, backend.AcquireResult]{
		Key:      func(r backend.AcquireRequest) string { return r.Key },
		MaxBatch: items, MaxInFlight: inFlight,
		Run: func(ctx context.Context, reqs []backend.AcquireRequest) []combine.Result[backend.AcquireResult] {
			return runBatch(ctx, bt, reqs, e.b.Acquire, bb.AcquireBatch)
		},
	})
	bt.release = combine.New(combine.Config[backend.ReleaseRequest, bool]{
		Key:      func(r backend.ReleaseRequest) string { return r.Key },
		MaxBatch: items, MaxInFlight: inFlight,
		Run: func(ctx context.Context, reqs []backend.ReleaseRequest) []combine.Result[bool] {
			return runBatch(ctx, bt, reqs, e.b.Release, bb.ReleaseBatch)
		},
	})
	bt.extend = combine.New(combine.Config[backend.ExtendRequest, backend.ExtendResult]{
		Key:      func(r backend.ExtendRequest) string { return r.Key },
		MaxBatch: items, MaxInFlight: inFlight,
		Run: func(ctx context.Context, reqs []backend.ExtendRequest) []combine.Result[backend.ExtendResult] {
			return runBatch(ctx, bt, reqs, e.b.Extend, bb.ExtendBatch)
		},
	})
	return bt
}

// on reports whether calls go through the combiners.
func (bt *batcher) on() bool { return bt.bb != nil && !bt.off.Load() }

// resynced is told that the backend watch was established again.
func (bt *batcher) resynced() { bt.off.Store(false) }

func (bt *batcher) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if !bt.on() {
		return bt.e.b.Acquire(ctx, req)
	}
	return bt.acquire.Do(ctx, req)
}

func (bt *batcher) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	if !bt.on() {
		return bt.e.b.Release(ctx, req)
	}
	return bt.release.Do(ctx, req)
}

func (bt *batcher) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if !bt.on() {
		return bt.e.b.Extend(ctx, req)
	}
	return bt.extend.Do(ctx, req)
}

// ExtendBatch renews reqs (distinct keys, at most MaxItems) in one backend
// call when the backend batches, else one call each, a few at a time. The
// error is for a batch whose outcome is unknown as a whole.
func (bt *batcher) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	if bt.on() {
		outs, err := bt.bb.ExtendBatch(ctx, reqs)
		if err == nil && len(outs) != len(reqs) {
			err = fmt.Errorf("%w: the backend answered %d outcomes for a batch of %d", backend.ErrUnavailable, len(outs), len(reqs))
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return outs, err
		}
		bt.off.Store(true)
	}
	return singles(ctx, reqs, bt.e.b.Extend), nil
}

// runBatch makes one combined call: the single call for one request (the
// common case when idle), else the batch call. A backend that cannot batch
// after all gets the single calls, and no more batches until the next
// resync.
func runBatch[Req, Res any](ctx context.Context, bt *batcher, reqs []Req,
	one func(context.Context, Req) (Res, error),
	many func(context.Context, []Req) ([]backend.Outcome[Res], error),
) []combine.Result[Res] {
	ctx, cancel := context.WithTimeout(ctx, bt.e.cfg.CallTimeout)
	defer cancel()
	stop := context.AfterFunc(bt.e.closing, cancel)
	defer stop()
	if len(reqs) == 1 {
		v, err := one(ctx, reqs[0])
		return []combine.Result[Res]{{Value: v, Err: err}}
	}
	outs, err := many(ctx, reqs)
	if errors.Is(err, errors.ErrUnsupported) {
		bt.off.Store(true)
		outs, err = singles(ctx, reqs, one), nil
	}
	if err == nil && len(outs) != len(reqs) {
		err = fmt.Errorf("%w: the backend answered %d outcomes for a batch of %d", backend.ErrUnavailable, len(outs), len(reqs))
	}
	res := make([]combine.Result[Res], len(reqs))
	for i := range res {
		switch {
		case err != nil:
			res[i].Err = err
		default:
			res[i] = combine.Result[Res]{Value: outs[i].Value, Err: outs[i].Err}
		}
	}
	return res
}

// singleParallel bounds the single calls made at once for one batch on a
// backend that does not batch.
const singleParallel = 16

// singles makes one call per request, at most singleParallel at a time.
func singles[Req, Res any](ctx context.Context, reqs []Req, one func(context.Context, Req) (Res, error)) []backend.Outcome[Res] {
	out := make([]backend.Outcome[Res], len(reqs))
	sem := make(chan struct{}, singleParallel)
	var wg sync.WaitGroup
	for i, r := range reqs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i].Value, out[i].Err = one(ctx, r)
		})
	}
	wg.Wait()
	return out
}
