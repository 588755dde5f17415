// Package brokenbackends holds deliberately wrong backends that prove the
// conformance suite catches each bug: every one wraps the real memory backend
// and breaks exactly one promise. Each is built as a real plugin binary from
// a subdirectory (one main per bug) and run through the plugin host like any
// third-party backend. They exist for the suite's own tests only.
package brokenbackends

import (
	"context"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/memory"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Serve runs the memory backend with one bug as a plugin process.
func Serve(bug func(backend.Backend) backend.Backend) {
	backendserver.Serve(func(ctx context.Context, opts map[string]string) (backend.Backend, error) {
		b, err := memory.Open(ctx, opts)
		if err != nil {
			return nil, err
		}
		return bug(b), nil
	})
}

// ReleaseWithoutCompare deletes whatever lock is on the key, whoever asks:
// it remembers each key's latest owner token and releases with that one.
func ReleaseWithoutCompare(b backend.Backend) backend.Backend {
	return &releaseWithoutCompare{Backend: b, tokens: map[string]string{}}
}

type releaseWithoutCompare struct {
	backend.Backend
	mu     sync.Mutex
	tokens map[string]string
}

func (r *releaseWithoutCompare) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	res, err := r.Backend.Acquire(ctx, req)
	if err == nil && res.Acquired {
		r.mu.Lock()
		r.tokens[req.Key] = req.OwnerToken
		r.mu.Unlock()
	}
	return res, err
}

func (r *releaseWithoutCompare) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	r.mu.Lock()
	if tok, ok := r.tokens[req.Key]; ok {
		req.OwnerToken = tok // the bug: no compare
	}
	r.mu.Unlock()
	return r.Backend.Release(ctx, req)
}

// ReadThenWrite decides Acquire by a read followed by a write: every caller
// that saw the key free believes it won.
func ReadThenWrite(b backend.Backend) backend.Backend { return &readThenWrite{b} }

type readThenWrite struct{ backend.Backend }

func (r *readThenWrite) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	rec, held, err := r.Get(ctx, req.Key)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if held {
		return backend.AcquireResult{Record: rec}, nil
	}
	// The round trip to the store between the read and the write.
	time.Sleep(2 * time.Millisecond)
	res, err := r.Backend.Acquire(ctx, req)
	if err != nil {
		return res, err
	}
	res.Acquired = true // the bug: the write does not check again
	return res, nil
}

// NeverExpires stores every lock for the backend's longest TTL, whatever the
// caller asked for.
func NeverExpires(b backend.Backend) backend.Backend { return &neverExpires{Backend: b} }

type neverExpires struct {
	backend.Backend
}

func (n *neverExpires) long(ctx context.Context) time.Duration {
	if info, err := n.Info(ctx); err == nil && info.MaxTTL > 0 {
		return info.MaxTTL
	}
	return 24 * time.Hour
}

func (n *neverExpires) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	req.TTL = n.long(ctx)
	return n.Backend.Acquire(ctx, req)
}

func (n *neverExpires) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	req.TTL = n.long(ctx)
	return n.Backend.Extend(ctx, req)
}

// IgnoresStamps drops the engine's proposed stamp.
func IgnoresStamps(b backend.Backend) backend.Backend { return &ignoresStamps{b} }

type ignoresStamps struct{ backend.Backend }

func (i *ignoresStamps) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	req.Stamp = hlc.Timestamp{} // the bug
	return i.Backend.Acquire(ctx, req)
}

// FencingFromOne numbers fencing tokens from 1 in every plugin process, so
// they go back after a restart (the in-memory INCR mistake).
func FencingFromOne(b backend.Backend) backend.Backend { return &fencingFromOne{Backend: b} }

type fencingFromOne struct {
	backend.Backend
	once   sync.Once
	offset uint64
}

// renumber maps the memory backend's clock-floored tokens to a count from 1,
// keeping their order within this process.
func (f *fencingFromOne) renumber(r backend.Record) backend.Record {
	if r.FencingToken == 0 {
		return r
	}
	f.once.Do(func() { f.offset = r.FencingToken - 1 })
	r.FencingToken -= f.offset
	return r
}

func (f *fencingFromOne) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	res, err := f.Backend.Acquire(ctx, req)
	res.Record = f.renumber(res.Record)
	return res, err
}

func (f *fencingFromOne) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	res, err := f.Backend.Extend(ctx, req)
	res.Record = f.renumber(res.Record)
	return res, err
}

func (f *fencingFromOne) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	r, ok, err := f.Backend.Get(ctx, key)
	return f.renumber(r), ok, err
}

func (f *fencingFromOne) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	p, err := f.Backend.List(ctx, req)
	for i := range p.Records {
		p.Records[i] = f.renumber(p.Records[i])
	}
	return p, err
}

func (f *fencingFromOne) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	return f.Backend.Watch(ctx, prefix, func(e backend.Event) error {
		e.Record = f.renumber(e.Record)
		return send(e)
	})
}
