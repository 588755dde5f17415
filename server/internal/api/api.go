// Package api is the Connect handler of holdfast.lock.v1.LockService: a thin
// layer that hands each request to the engine and maps the engine's sentinel
// errors to Connect codes. It holds no lock logic of its own.
package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/holdflush"
	"github.com/holdfast/holdfast/server/internal/paging"
)

// Handler serves LockService on an engine.
type Handler struct {
	e     *engine.Engine
	pages *paging.Sealer
}

var _ lockv1connect.LockServiceHandler = (*Handler)(nil)

// New returns a handler for e whose List page tokens pages seals (nil: a
// key of this process only).
func New(e *engine.Engine, pages *paging.Sealer) *Handler {
	if pages == nil {
		pages = paging.RandomSealer()
	}
	return &Handler{e: e, pages: pages}
}

// codes maps the engine's sentinels to Connect codes.
var codes = []struct {
	err  error
	code connect.Code
}{
	{engine.ErrInvalidArgument, connect.CodeInvalidArgument},
	{engine.ErrUnavailable, connect.CodeUnavailable},
	{engine.ErrResourceExhausted, connect.CodeResourceExhausted},
	{engine.ErrDeadlineExceeded, connect.CodeDeadlineExceeded},
	{engine.ErrCanceled, connect.CodeCanceled},
	{engine.ErrUnimplemented, connect.CodeUnimplemented},
	{engine.ErrFailedPrecondition, connect.CodeFailedPrecondition},
}

// Code is the Connect code for an engine error; unknown errors are internal.
func Code(err error) connect.Code {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded
	}
	if errors.Is(err, context.Canceled) {
		return connect.CodeCanceled
	}
	return connect.CodeInternal
}

// toConnect turns an engine error into a Connect error whose message is the
// engine's (e.g. "ttl: 30h exceeds the maximum 24h").
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(Code(err), errors.New(err.Error()))
}

// Acquire implements LockServiceHandler. (What one caller may hold and
// queue is bounded per caller by package limits.)
func (h *Handler) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	resp, err := h.e.Acquire(ctx, req)
	return resp, toConnect(err)
}

// Release implements LockServiceHandler.
func (h *Handler) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	resp, err := h.e.Release(ctx, req)
	return resp, toConnect(err)
}

// Extend implements LockServiceHandler.
func (h *Handler) Extend(ctx context.Context, req *lockv1.ExtendRequest) (*lockv1.ExtendResponse, error) {
	resp, err := h.e.Extend(ctx, req)
	return resp, toConnect(err)
}

// ExtendBatch implements LockServiceHandler.
func (h *Handler) ExtendBatch(ctx context.Context, req *lockv1.ExtendBatchRequest) (*lockv1.ExtendBatchResponse, error) {
	resp, err := h.e.ExtendBatch(ctx, req)
	return resp, toConnect(err)
}

// Inspect implements LockServiceHandler.
func (h *Handler) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	resp, err := h.e.Inspect(ctx, req)
	return resp, toConnect(err)
}

// List implements LockServiceHandler: pages of the caller's view (the
// request's prefix, unless authentication narrowed it to the caller's
// namespaces), with sealed page tokens (package paging).
func (h *Handler) List(ctx context.Context, req *lockv1.ListRequest) (*lockv1.ListResponse, error) {
	view, ok := paging.ViewFrom(ctx)
	if !ok {
		view = paging.View{Prefixes: []string{req.GetPrefix()}}
	}
	resp, err := h.pages.List(ctx, view, req, h.e.List)
	return resp, toConnect(err)
}

// Watch implements LockServiceHandler. The first message is SYNCED. Events
// queued behind one another leave in one flush (package holdflush, when
// the server mounts it).
func (h *Handler) Watch(ctx context.Context, req *lockv1.WatchRequest, stream *connect.ServerStream[lockv1.WatchResponse]) error {
	err := h.e.WatchQueued(ctx, req, func(msg *lockv1.WatchResponse, more bool) error {
		holdflush.Hold(ctx, more)
		return stream.Send(msg)
	})
	holdflush.Hold(ctx, false) // the stream's end is flushed whatever ended it
	if err != nil && ctx.Err() != nil {
		return nil //nolint:nilerr // the client went away; nobody reads the status
	}
	return toConnect(err)
}

// Proclaim implements LockServiceHandler.
func (h *Handler) Proclaim(ctx context.Context, req *lockv1.ProclaimRequest) (*lockv1.ProclaimResponse, error) {
	resp, err := h.e.Proclaim(ctx, req)
	return resp, toConnect(err)
}

// Observe implements LockServiceHandler. The first message is the leader
// once the watch of the key is established.
func (h *Handler) Observe(ctx context.Context, req *lockv1.ObserveRequest, stream *connect.ServerStream[lockv1.ObserveResponse]) error {
	err := h.e.Observe(ctx, req, stream.Send)
	if err != nil && ctx.Err() != nil {
		return nil //nolint:nilerr // the client went away; nobody reads the status
	}
	return toConnect(err)
}

// GetServerInfo implements LockServiceHandler.
func (h *Handler) GetServerInfo(ctx context.Context, req *lockv1.GetServerInfoRequest) (*lockv1.GetServerInfoResponse, error) {
	resp, err := h.e.GetServerInfo(ctx, req)
	return resp, toConnect(err)
}
