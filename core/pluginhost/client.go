package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// remoteError is an error the plugin returned: its message as the plugin
// wrote it, and the sentinel its gRPC code maps to.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

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
		return fmt.Errorf("%w: plugin %s: %s: %v", backend.ErrUnavailable, h.cfg.Name, op, err)
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return &remoteError{sentinel: backend.ErrInvalidArgument, msg: st.Message()}
	case codes.DeadlineExceeded:
		// Not the caller's deadline (checked above): CallTimeout ran out.
		return fmt.Errorf("%w: plugin %s did not answer %s within %s", backend.ErrUnavailable, h.cfg.Name, op, h.cfg.CallTimeout)
	}
	return &remoteError{sentinel: backend.ErrUnavailable, msg: fmt.Sprintf("plugin %s: %s", h.cfg.Name, st.Message())}
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
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
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
		resp, err = c.Acquire(ctx, &backendv1.AcquireRequest{
			Key:        req.Key,
			OwnerToken: req.OwnerToken,
			Ttl:        durationpb.New(req.TTL),
			Holder:     req.Holder,
			Stamp:      stampToProto(req.Stamp),
			WaiterId:   req.WaiterID,
		})
		return err
	})
	if err != nil {
		return backend.AcquireResult{}, err
	}
	return decodeAcquire(resp, req.Key)
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
	g, err := h.current()
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.exited, cancel)
	defer stop()
	stopLive := context.AfterFunc(g.live.context(), cancel)
	defer stopLive()
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
		resp, err := c.Release(ctx, &backendv1.ReleaseRequest{
			Key:        req.Key,
			OwnerToken: req.OwnerToken,
			Stamp:      stampToProto(req.Stamp),
		})
		released = resp.GetReleased()
		return err
	})
	return released, err
}

// Extend implements backend.Backend.
func (h *Host) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	var resp *backendv1.ExtendResponse
	err := h.unary(ctx, "Extend", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.Extend(ctx, &backendv1.ExtendRequest{
			Key:        req.Key,
			OwnerToken: req.OwnerToken,
			Ttl:        durationpb.New(req.TTL),
			Stamp:      stampToProto(req.Stamp),
		})
		return err
	})
	if err != nil {
		return backend.ExtendResult{}, err
	}
	return decodeExtend(resp, req.Key)
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
	return decodeGet(resp, key)
}

// List implements backend.Backend.
func (h *Host) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	if req.PageSize < 1 || int64(req.PageSize) > int64(^uint32(0)) {
		return backend.ListPage{}, fmt.Errorf("%w: page_size must be between 1 and %d, got %d",
			backend.ErrInvalidArgument, ^uint32(0), req.PageSize)
	}
	var resp *backendv1.ListResponse
	err := h.unary(ctx, "List", func(ctx context.Context, c backendv1.BackendServiceClient) (err error) {
		resp, err = c.List(ctx, &backendv1.ListRequest{
			Prefix:    req.Prefix,
			PageSize:  uint32(req.PageSize),
			PageToken: req.PageToken,
		})
		return err
	})
	if err != nil {
		return backend.ListPage{}, err
	}
	return decodeList(resp, req)
}

// Watch implements backend.Backend. It returns the caller's context error
// when ctx is done, send's error when send fails, and an error wrapping
// backend.ErrUnavailable when the plugin dies or ends the watch; then the
// caller watches again (after Changed, or with backoff) and re-syncs.
func (h *Host) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	g, err := h.current()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.exited, cancel)
	defer stop()
	stopLive := context.AfterFunc(g.live.context(), cancel)
	defer stopLive()
	stream, err := g.rpc.Watch(cctx, &backendv1.WatchRequest{Prefix: prefix})
	if err != nil {
		return h.callError(ctx, g, "Watch", err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if ctx.Err() != nil {
				return fmt.Errorf("pluginhost: Watch: %w", ctx.Err())
			}
			return fmt.Errorf("%w: plugin %s ended the watch", backend.ErrUnavailable, h.cfg.Name)
		}
		if err != nil {
			return h.callError(ctx, g, "Watch", err)
		}
		ev, err := decodeEvent(resp, prefix)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", h.cfg.Name, err)
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}

func eventTypeFromProto(t backendv1.EventType) backend.EventType {
	switch t {
	case backendv1.EventType_EVENT_TYPE_SYNCED:
		return backend.EventSynced
	case backendv1.EventType_EVENT_TYPE_ACQUIRED:
		return backend.EventAcquired
	case backendv1.EventType_EVENT_TYPE_RELEASED:
		return backend.EventReleased
	case backendv1.EventType_EVENT_TYPE_EXPIRED:
		return backend.EventExpired
	}
	return 0
}

func stampToProto(t hlc.Timestamp) *backendv1.Stamp {
	if t.IsZero() {
		return nil
	}
	return &backendv1.Stamp{WallTimeNs: t.WallTime, Logical: t.Logical}
}

func stampFromProto(p *backendv1.Stamp) hlc.Timestamp {
	if p == nil {
		return hlc.Timestamp{}
	}
	return hlc.Timestamp{WallTime: p.GetWallTimeNs(), Logical: p.GetLogical()}
}
