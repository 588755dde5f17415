package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/wire"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// callError maps a failed call on generation g: the plugin's death or the
// host's close to ErrUnavailable, the caller's own context to its error,
// InvalidArgument to backend.ErrInvalidArgument, anything else to
// backend.ErrUnavailable.
func (h *Host) callError(ctx context.Context, g *generation, op string, err error) error {
	since := g.live.silentSince()
	switch {
	case !since.IsZero() && ctx.Err() == nil && g.exited.Err() == nil:
		return h.notAnswering(g, since)
	case g.exited.Err() != nil:
		return fmt.Errorf("%w: plugin %s (pid %d) exited during %s", backend.ErrUnavailable, h.cfg.Name, g.pid, op)
	case h.isClosed():
		return fmt.Errorf("%s: %w", op, ErrClosed)
	case ctx.Err() != nil:
		return fmt.Errorf("pluginhost: %s: %w", op, context.Cause(ctx))
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: plugin %s: %s: %w", backend.ErrUnavailable, h.cfg.Name, op, err)
	}
	if st.Code() == codes.DeadlineExceeded {
		// Not the caller's deadline (checked above): CallTimeout ran out.
		return fmt.Errorf("%w: plugin %s did not answer %s within %s", backend.ErrUnavailable, h.cfg.Name, op, h.cfg.CallTimeout)
	}
	return wire.FromStatus(st, h.cfg.Name)
}

// unary runs one call on the current plugin, bounded by CallTimeout and
// cancelled at once when the plugin exits.
func (h *Host) unary(ctx context.Context, op string, call func(context.Context, backendv1.BackendServiceClient) error) (err error) {
	if h.cfg.OnCall != nil {
		start := time.Now()
		defer func() { h.cfg.OnCall(op, time.Since(start), err) }()
	}
	g, err := h.current()
	if err != nil {
		return err
	}
	cctx, cancel := h.bounded(ctx)
	defer cancel()
	stop := context.AfterFunc(g.exited, cancel)
	defer stop()
	stopLive := context.AfterFunc(g.live.context(), cancel) // it stopped answering
	defer stopLive()
	if err := call(cctx, g.rpc); err != nil {
		return h.callError(ctx, g, op, err)
	}
	return nil
}

// bounded is ctx cut off at CallTimeout from now, with a cancel for the
// plugin's exit. A ctx that ends no later already (the engine bounds its
// own calls by the same timeout) gets no timer of its own: one timer
// fewer per call on the path of every Acquire and Release.
func (h *Host) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= h.cfg.CallTimeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, h.cfg.CallTimeout)
}

// Info returns what the running plugin said at its launch (it is read again
// after every restart), or an error wrapping ErrUnavailable while it is down.
func (h *Host) Info(context.Context) (backend.Info, error) {
	g, err := h.current()
	if err != nil {
		return backend.Info{}, err
	}
	return g.info, nil
}

// Acquire implements backend.Backend.
func (h *Host) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	var resp *backendv1.AcquireResponse
	err := h.unary(ctx, "Acquire", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.Acquire(ctx, wire.ToAcquireRequest(req))
		return err
	})
	if err != nil {
		return backend.AcquireResult{}, err
	}
	return wire.FromAcquireResponse(resp, req.Key)
}

// Enqueue implements backend.FairBackend (a plugin that is not fair
// answers unavailable).
func (h *Host) Enqueue(ctx context.Context, key, waiterID string) error {
	return h.unary(ctx, "Enqueue", func(ctx context.Context, c backendv1.BackendServiceClient) error {
		_, err := c.Enqueue(ctx, &backendv1.EnqueueRequest{Key: key, WaiterId: waiterID})
		return err
	})
}

// WaitTurn implements backend.FairBackend. It blocks until the plugin
// answers, so it is bounded by ctx (and the plugin's exit), not by
// CallTimeout.
func (h *Host) WaitTurn(ctx context.Context, key, waiterID string) (bool, error) {
	g, cctx, cancel, err := h.open(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	resp, err := g.rpc.WaitTurn(cctx, &backendv1.WaitTurnRequest{Key: key, WaiterId: waiterID})
	if err != nil {
		return false, h.callError(ctx, g, "WaitTurn", err)
	}
	return resp.GetQueued(), nil
}

// Dequeue implements backend.FairBackend.
func (h *Host) Dequeue(ctx context.Context, key, waiterID string) error {
	return h.unary(ctx, "Dequeue", func(ctx context.Context, c backendv1.BackendServiceClient) error {
		_, err := c.Dequeue(ctx, &backendv1.DequeueRequest{Key: key, WaiterId: waiterID})
		return err
	})
}

// Release implements backend.Backend.
func (h *Host) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	var released bool
	err := h.unary(ctx, "Release", func(ctx context.Context, c backendv1.BackendServiceClient) error {
		resp, err := c.Release(ctx, wire.ToReleaseRequest(req))
		released = resp.GetReleased()
		return err
	})
	return released, err
}

// Extend implements backend.Backend.
func (h *Host) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	var resp *backendv1.ExtendResponse
	err := h.unary(ctx, "Extend", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.Extend(ctx, wire.ToExtendRequest(req))
		return err
	})
	if err != nil {
		return backend.ExtendResult{}, err
	}
	return wire.FromExtendResponse(resp, req.Key)
}

// Get implements backend.Backend.
func (h *Host) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	var resp *backendv1.GetResponse
	err := h.unary(ctx, "Get", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.Get(ctx, &backendv1.GetRequest{Key: key})
		return err
	})
	if err != nil {
		return backend.Record{}, false, err
	}
	return wire.FromGetResponse(resp, key)
}

// List implements backend.Backend.
func (h *Host) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	preq, err := wire.ToListRequest(req)
	if err != nil {
		return backend.ListPage{}, err
	}
	var resp *backendv1.ListResponse
	err = h.unary(ctx, "List", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.List(ctx, preq)
		return err
	})
	if err != nil {
		return backend.ListPage{}, err
	}
	return wire.FromListResponse(resp, req)
}

// open is the generation for a call that is bounded by ctx (and not by
// CallTimeout: a stream, or a call that blocks until something happens),
// with ctx cut off when that plugin exits or stops answering.
func (h *Host) open(ctx context.Context) (*generation, context.Context, context.CancelFunc, error) {
	g, err := h.current()
	if err != nil {
		return nil, nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.exited, cancel)
	stopLive := context.AfterFunc(g.live.context(), cancel) // it stopped answering
	return g, cctx, func() {
		stopLive()
		stop()
		cancel()
	}, nil
}

// streamError maps the error that ended a stream of op on generation g:
// the end of the stream is the caller's context error when ctx is done,
// and else the plugin ending a stream that never ends by itself
// (ErrUnavailable); any other error is callError's.
func (h *Host) streamError(ctx context.Context, g *generation, op string, err error) error {
	if !errors.Is(err, io.EOF) {
		return h.callError(ctx, g, op, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("pluginhost: %s: %w", op, ctx.Err())
	}
	return fmt.Errorf("%w: plugin %s ended the %s stream", backend.ErrUnavailable, h.cfg.Name, op)
}

// Watch implements backend.Backend. It returns the caller's context error
// when ctx is done, send's error when send fails, and an error wrapping
// backend.ErrUnavailable when the plugin dies or ends the watch; then the
// caller watches again (after Changed, or with backoff) and re-syncs.
func (h *Host) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	g, cctx, cancel, err := h.open(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	stream, err := g.rpc.Watch(cctx, &backendv1.WatchRequest{Prefix: prefix})
	if err != nil {
		return h.callError(ctx, g, "Watch", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return h.streamError(ctx, g, "Watch", err)
		}
		ev, err := wire.FromWatchResponse(resp, prefix)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", h.cfg.Name, err)
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}

var _ backend.FollowBackend = (*Host)(nil)

// Follow implements backend.FollowBackend over the plugin's Follow stream:
// each change goes to the plugin numbered by a seq when it has an Applied,
// which is called when the plugin acks that seq, in order and never
// concurrently with send (both are called from the one goroutine that
// reads the stream). It returns nil when ctx ends it, send's error when
// send fails, an error wrapping errors.ErrUnsupported when the plugin does
// not serve Follow (an older plugin: the caller watches instead), and one
// wrapping backend.ErrUnavailable when the plugin dies or ends the stream.
func (h *Host) Follow(ctx context.Context, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	g, cctx, cancel, err := h.open(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	stream, err := g.rpc.Follow(cctx)
	if err != nil {
		return h.followError(ctx, g, err)
	}
	var (
		mu      sync.Mutex
		pending []ack // the changes sent and not acked yet, in seq order
	)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		var seq uint64
		for {
			var c backend.FollowChange
			var ok bool
			select {
			case <-cctx.Done():
				return
			case c, ok = <-changes:
			}
			if !ok {
				// No more changes: the plugin's feed goes on. A failed
				// CloseSend shows in Recv.
				_ = stream.CloseSend()
				return
			}
			var n uint64
			if c.Applied != nil {
				seq++
				n = seq
				mu.Lock() // before Send: the ack may come back at once
				pending = append(pending, ack{n, c.Applied})
				mu.Unlock()
			}
			if err := stream.Send(wire.ToFollowRequest(c, n)); err != nil {
				return // the stream is broken: Recv says how
			}
		}
	}()
	// Recv fails once cctx is cancelled, so the sender has ended too when
	// Follow returns.
	defer func() {
		cancel()
		<-sent
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return h.followError(ctx, g, err)
		}
		ev, applied, err := wire.FromFollowResponse(resp)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", h.cfg.Name, err)
		}
		if applied == 0 {
			if err := send(ev); err != nil {
				return err
			}
			continue
		}
		mu.Lock()
		var next ack
		if len(pending) > 0 && pending[0].seq == applied {
			next, pending = pending[0], pending[1:]
		}
		mu.Unlock()
		if next.applied == nil {
			return fmt.Errorf("%w: plugin %s acked Follow change %d out of order", backend.ErrUnavailable, h.cfg.Name, applied)
		}
		next.applied()
	}
}

// ack is a Follow change waiting for the plugin to say it is in force.
type ack struct {
	seq     uint64
	applied func()
}

// followError maps the error that ended a Follow: nil when the caller's
// ctx ended it (the contract), errors.ErrUnsupported for a plugin without
// Follow, and otherwise as for any stream.
func (h *Host) followError(ctx context.Context, g *generation, err error) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // a Follow ended by its caller's context is no failure (the contract)
	}
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("pluginhost: plugin %s: Follow: %w", h.cfg.Name, errors.ErrUnsupported)
	}
	return h.streamError(ctx, g, "Follow", err)
}

// batchCall runs one batch call on the current plugin, or answers
// errors.ErrUnsupported at once when the plugin does not serve batches (its
// Info said so, or it answers Unimplemented): the engine then makes the
// calls one by one.
func (h *Host) batchCall(ctx context.Context, op string, call func(context.Context, backendv1.BackendServiceClient) error) error {
	g, err := h.current()
	if err != nil {
		return err
	}
	if !g.batch {
		return fmt.Errorf("pluginhost: plugin %s: %s: %w", h.cfg.Name, op, errors.ErrUnsupported)
	}
	unimplemented := false
	err = h.unary(ctx, op, func(ctx context.Context, c backendv1.BackendServiceClient) error {
		err := call(ctx, c)
		unimplemented = status.Code(err) == codes.Unimplemented
		return err
	})
	if unimplemented {
		return fmt.Errorf("pluginhost: plugin %s: %s: %w", h.cfg.Name, op, errors.ErrUnsupported)
	}
	return err
}

// AcquireBatch implements backend.BatchBackend.
func (h *Host) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.Outcome[backend.AcquireResult], error) {
	var resp *backendv1.AcquireBatchResponse
	err := h.batchCall(ctx, "AcquireBatch", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.AcquireBatch(ctx, wire.ToAcquireBatchRequest(reqs))
		return err
	})
	if err != nil {
		return nil, err
	}
	return wire.FromAcquireBatchResponse(resp, reqs, h.cfg.Name)
}

// ReleaseBatch implements backend.BatchBackend.
func (h *Host) ReleaseBatch(ctx context.Context, reqs []backend.ReleaseRequest) ([]backend.Outcome[bool], error) {
	var resp *backendv1.ReleaseBatchResponse
	err := h.batchCall(ctx, "ReleaseBatch", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.ReleaseBatch(ctx, wire.ToReleaseBatchRequest(reqs))
		return err
	})
	if err != nil {
		return nil, err
	}
	return wire.FromReleaseBatchResponse(resp, reqs, h.cfg.Name)
}

// ExtendBatch implements backend.BatchBackend.
func (h *Host) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	var resp *backendv1.ExtendBatchResponse
	err := h.batchCall(ctx, "ExtendBatch", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.ExtendBatch(ctx, wire.ToExtendBatchRequest(reqs))
		return err
	})
	if err != nil {
		return nil, err
	}
	return wire.FromExtendBatchResponse(resp, reqs, h.cfg.Name)
}

// Proclaim implements backend.ElectionBackend (a plugin without elections
// answers unimplemented; the engine calls it only when Info.Kinds lists
// KindElection).
func (h *Host) Proclaim(ctx context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	var resp *backendv1.ProclaimResponse
	err := h.unary(ctx, "Proclaim", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.Proclaim(ctx, wire.ToProclaimRequest(req))
		return err
	})
	if err != nil {
		return backend.ProclaimResult{}, err
	}
	return wire.FromProclaimResponse(resp, req)
}

// AcquireSet implements backend.SetBackend (a plugin without sets answers
// unavailable; the engine calls it only when Info.MaxKeys > 1).
func (h *Host) AcquireSet(ctx context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	var resp *backendv1.AcquireSetResponse
	err := h.unary(ctx, "AcquireSet", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.AcquireSet(ctx, wire.ToAcquireSetRequest(req))
		return err
	})
	if err != nil {
		return backend.AcquireSetResult{}, err
	}
	keys := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		keys[i] = c.Key
	}
	return wire.FromAcquireSetResponse(resp, keys)
}

// ReleaseSet implements backend.SetBackend.
func (h *Host) ReleaseSet(ctx context.Context, req backend.ReleaseSetRequest) (bool, error) {
	var released bool
	err := h.unary(ctx, "ReleaseSet", func(ctx context.Context, c backendv1.BackendServiceClient) error {
		resp, err := c.ReleaseSet(ctx, wire.ToReleaseSetRequest(req))
		released = resp.GetReleased()
		return err
	})
	return released, err
}

// ExtendSet implements backend.SetBackend.
func (h *Host) ExtendSet(ctx context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	var resp *backendv1.ExtendSetResponse
	err := h.unary(ctx, "ExtendSet", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.ExtendSet(ctx, wire.ToExtendSetRequest(req))
		return err
	})
	if err != nil {
		return backend.ExtendSetResult{}, err
	}
	return wire.FromExtendSetResponse(resp, req.Keys)
}

// EnqueueSet implements backend.FairSetBackend.
func (h *Host) EnqueueSet(ctx context.Context, keys []string, waiterID string) error {
	return h.unary(ctx, "EnqueueSet", func(ctx context.Context, c backendv1.BackendServiceClient) error {
		_, err := c.EnqueueSet(ctx, &backendv1.EnqueueSetRequest{Keys: keys, WaiterId: waiterID})
		return err
	})
}
