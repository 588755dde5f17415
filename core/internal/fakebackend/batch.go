package fakebackend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/holdfast/holdfast/core/backend"
)

// Batching is a fake that batches (backend.BatchBackend): a batch call
// decides its items one after the other with the single calls, which is
// what a store's one write does for distinct keys. It records every call so
// tests can see how the engine carries its callers' requests.
type Batching struct {
	*Backend

	// Before, when set, runs at the start of every call with the call's
	// name ("Acquire", "AcquireBatch", ...) and its keys; a test holds calls
	// in flight with it. Set it before the engine makes calls.
	Before func(op string, keys []string)
	// ItemErr, when set, is asked for every item of a batch: an item for
	// which it answers an error gets that error as its outcome.
	ItemErr func(key string) error
	// Unsupported makes every batch method answer errors.ErrUnsupported.
	Unsupported bool

	mu    sync.Mutex
	calls []Call
}

var _ backend.BatchBackend = (*Batching)(nil)

// Call is one call the fake received.
type Call struct {
	Op   string
	Keys []string
}

// NewBatching returns a batching fake that is not fair.
func NewBatching() *Batching { return &Batching{Backend: New()} }

// Calls returns the calls made so far, in order.
func (b *Batching) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

func (b *Batching) record(op string, keys ...string) {
	b.mu.Lock()
	b.calls = append(b.calls, Call{Op: op, Keys: keys})
	b.mu.Unlock()
	if b.Before != nil {
		b.Before(op, keys)
	}
}

// Acquire implements backend.Backend.
func (b *Batching) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	b.record("Acquire", req.Key)
	return b.Backend.Acquire(ctx, req)
}

// Release implements backend.Backend.
func (b *Batching) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	b.record("Release", req.Key)
	return b.Backend.Release(ctx, req)
}

// Extend implements backend.Backend.
func (b *Batching) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	b.record("Extend", req.Key)
	return b.Backend.Extend(ctx, req)
}

// AcquireBatch implements backend.BatchBackend.
func (b *Batching) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.Outcome[backend.AcquireResult], error) {
	return batchOf(ctx, b, "AcquireBatch", reqs, func(r backend.AcquireRequest) string { return r.Key }, b.Backend.Acquire)
}

// ReleaseBatch implements backend.BatchBackend.
func (b *Batching) ReleaseBatch(ctx context.Context, reqs []backend.ReleaseRequest) ([]backend.Outcome[bool], error) {
	return batchOf(ctx, b, "ReleaseBatch", reqs, func(r backend.ReleaseRequest) string { return r.Key }, b.Backend.Release)
}

// ExtendBatch implements backend.BatchBackend.
func (b *Batching) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	return batchOf(ctx, b, "ExtendBatch", reqs, func(r backend.ExtendRequest) string { return r.Key }, b.Backend.Extend)
}

func batchOf[Req, Res any](ctx context.Context, b *Batching, op string, reqs []Req, key func(Req) string,
	one func(context.Context, Req) (Res, error),
) ([]backend.Outcome[Res], error) {
	if b.Unsupported {
		return nil, fmt.Errorf("fake: %s: %w", op, errors.ErrUnsupported)
	}
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = key(r)
	}
	b.record(op, keys...)
	seen := map[string]bool{}
	out := make([]backend.Outcome[Res], len(reqs))
	for i, r := range reqs {
		k := keys[i]
		if seen[k] {
			out[i].Err = fmt.Errorf("%w: fake: key %q twice in one batch", backend.ErrInvalidArgument, k)
			continue
		}
		seen[k] = true
		if b.ItemErr != nil {
			if err := b.ItemErr(k); err != nil {
				out[i].Err = err
				continue
			}
		}
		out[i].Value, out[i].Err = one(ctx, r)
	}
	return out, nil
}
