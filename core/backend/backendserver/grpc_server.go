package backendserver

import (
	"context"
	"errors"
	"io"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/wire"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// grpcServer serves a Backend as holdfast.backend.v1.BackendService; package
// wire converts between the messages and the plain types.
type grpcServer struct {
	backendv1.UnimplementedBackendServiceServer
	b backend.Backend
}

func (s *grpcServer) Info(ctx context.Context, _ *backendv1.InfoRequest) (*backendv1.InfoResponse, error) {
	info, err := s.b.Info(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	// Fair promises the queue calls, and sets promise the set calls (and,
	// on a fair backend, the set queue call): a backend without them does
	// not keep those promises, whatever its Info says.
	_, fair := s.b.(backend.FairBackend)
	_, sets := s.b.(backend.SetBackend)
	if fair && info.Fair {
		_, sets = s.b.(backend.FairSetBackend)
	}
	_, batch := s.b.(backend.BatchBackend)
	if _, ok := s.b.(backend.ElectionBackend); !ok {
		info.Kinds = slices.DeleteFunc(slices.Clone(info.Kinds), func(k backend.Kind) bool { return k == backend.KindElection })
	}
	return wire.ToInfoResponse(info, fair, sets, batch), nil
}

func (s *grpcServer) Acquire(ctx context.Context, req *backendv1.AcquireRequest) (*backendv1.AcquireResponse, error) {
	res, err := s.b.Acquire(ctx, wire.FromAcquireRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToAcquireResponse(res), nil
}

func (s *grpcServer) Release(ctx context.Context, req *backendv1.ReleaseRequest) (*backendv1.ReleaseResponse, error) {
	ok, err := s.b.Release(ctx, wire.FromReleaseRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.ReleaseResponse{Released: ok}, nil
}

func (s *grpcServer) Extend(ctx context.Context, req *backendv1.ExtendRequest) (*backendv1.ExtendResponse, error) {
	res, err := s.b.Extend(ctx, wire.FromExtendRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToExtendResponse(res), nil
}

func (s *grpcServer) Get(ctx context.Context, req *backendv1.GetRequest) (*backendv1.GetResponse, error) {
	rec, found, err := s.b.Get(ctx, req.GetKey())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToGetResponse(rec, found), nil
}

func (s *grpcServer) List(ctx context.Context, req *backendv1.ListRequest) (*backendv1.ListResponse, error) {
	page, err := s.b.List(ctx, wire.FromListRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToListResponse(page), nil
}

func (s *grpcServer) Watch(req *backendv1.WatchRequest, stream backendv1.BackendService_WatchServer) error {
	err := s.b.Watch(stream.Context(), req.GetPrefix(), func(ev backend.Event) error {
		return stream.Send(wire.ToWatchResponse(ev))
	})
	if err == nil {
		return nil
	}
	return wire.ToStatus(err)
}

// Follow serves Follow for every backend: natively for a FollowBackend,
// and for any other through backend.Following, which filters its Watch ""
// here in the plugin, so that the events nobody follows stop before the
// plugin hop. send and Applied are never called concurrently (the
// contract), so both write the one stream.
func (s *grpcServer) Follow(stream backendv1.BackendService_FollowServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	changes := make(chan backend.FollowChange)
	go func() {
		// It ends when the stream does: Recv fails once the host goes or
		// the handler has returned.
		defer close(changes)
		for {
			req, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return // the host sends no more changes; the feed goes on
			}
			if err != nil {
				cancel(err)
				return
			}
			c, seq := wire.FromFollowRequest(req)
			if seq != 0 {
				c.Applied = func() {
					if err := stream.Send(wire.ToFollowApplied(seq)); err != nil {
						cancel(err) // Applied cannot fail: end the feed instead
					}
				}
			}
			select {
			case changes <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	err := backend.Following(s.b).Follow(ctx, changes, func(ev backend.Event) error {
		return stream.Send(wire.ToFollowEvent(ev))
	})
	if err == nil {
		if cause := context.Cause(ctx); stream.Context().Err() == nil && cause != nil {
			err = cause // an ack that could not be sent or a broken request stream
		}
	}
	if err == nil {
		return nil
	}
	return wire.ToStatus(err)
}

func (s *grpcServer) Proclaim(ctx context.Context, req *backendv1.ProclaimRequest) (*backendv1.ProclaimResponse, error) {
	e, ok := s.b.(backend.ElectionBackend)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend keeps no elections (Info.kinds lacks KIND_ELECTION)")
	}
	res, err := e.Proclaim(ctx, wire.FromProclaimRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToProclaimResponse(res), nil
}

func (s *grpcServer) fair() (backend.FairBackend, error) {
	f, ok := s.b.(backend.FairBackend)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend keeps no fair queue (Info.fair is false)")
	}
	return f, nil
}

func (s *grpcServer) Enqueue(ctx context.Context, req *backendv1.EnqueueRequest) (*backendv1.EnqueueResponse, error) {
	f, err := s.fair()
	if err != nil {
		return nil, err
	}
	if err := f.Enqueue(ctx, req.GetKey(), req.GetWaiterId()); err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.EnqueueResponse{}, nil
}

func (s *grpcServer) WaitTurn(ctx context.Context, req *backendv1.WaitTurnRequest) (*backendv1.WaitTurnResponse, error) {
	f, err := s.fair()
	if err != nil {
		return nil, err
	}
	queued, err := f.WaitTurn(ctx, req.GetKey(), req.GetWaiterId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.WaitTurnResponse{Queued: queued}, nil
}

func (s *grpcServer) Dequeue(ctx context.Context, req *backendv1.DequeueRequest) (*backendv1.DequeueResponse, error) {
	f, err := s.fair()
	if err != nil {
		return nil, err
	}
	if err := f.Dequeue(ctx, req.GetKey(), req.GetWaiterId()); err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.DequeueResponse{}, nil
}

func (s *grpcServer) batch() (backend.BatchBackend, error) {
	b, ok := s.b.(backend.BatchBackend)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend does not batch (Info.batch is false)")
	}
	return b, nil
}

// batchStatus maps a batch method's error: errors.ErrUnsupported (the
// backend cannot batch after all) is Unimplemented, which the host reads as
// the same.
func batchStatus(err error) error {
	if errors.Is(err, errors.ErrUnsupported) {
		return status.Error(codes.Unimplemented, err.Error())
	}
	return wire.ToStatus(err)
}

func (s *grpcServer) AcquireBatch(ctx context.Context, req *backendv1.AcquireBatchRequest) (*backendv1.AcquireBatchResponse, error) {
	b, err := s.batch()
	if err != nil {
		return nil, err
	}
	outs, err := b.AcquireBatch(ctx, wire.FromAcquireBatchRequest(req))
	if err != nil {
		return nil, batchStatus(err)
	}
	return wire.ToAcquireBatchResponse(outs), nil
}

func (s *grpcServer) ReleaseBatch(ctx context.Context, req *backendv1.ReleaseBatchRequest) (*backendv1.ReleaseBatchResponse, error) {
	b, err := s.batch()
	if err != nil {
		return nil, err
	}
	outs, err := b.ReleaseBatch(ctx, wire.FromReleaseBatchRequest(req))
	if err != nil {
		return nil, batchStatus(err)
	}
	return wire.ToReleaseBatchResponse(outs), nil
}

func (s *grpcServer) ExtendBatch(ctx context.Context, req *backendv1.ExtendBatchRequest) (*backendv1.ExtendBatchResponse, error) {
	b, err := s.batch()
	if err != nil {
		return nil, err
	}
	outs, err := b.ExtendBatch(ctx, wire.FromExtendBatchRequest(req))
	if err != nil {
		return nil, batchStatus(err)
	}
	return wire.ToExtendBatchResponse(outs), nil
}

func (s *grpcServer) sets() (backend.SetBackend, error) {
	sb, ok := s.b.(backend.SetBackend)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend takes one key per call (Info.max_keys is 1)")
	}
	return sb, nil
}

func (s *grpcServer) AcquireSet(ctx context.Context, req *backendv1.AcquireSetRequest) (*backendv1.AcquireSetResponse, error) {
	sb, err := s.sets()
	if err != nil {
		return nil, err
	}
	res, err := sb.AcquireSet(ctx, wire.FromAcquireSetRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToAcquireSetResponse(res), nil
}

func (s *grpcServer) ReleaseSet(ctx context.Context, req *backendv1.ReleaseSetRequest) (*backendv1.ReleaseSetResponse, error) {
	sb, err := s.sets()
	if err != nil {
		return nil, err
	}
	ok, err := sb.ReleaseSet(ctx, wire.FromReleaseSetRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.ReleaseSetResponse{Released: ok}, nil
}

func (s *grpcServer) ExtendSet(ctx context.Context, req *backendv1.ExtendSetRequest) (*backendv1.ExtendSetResponse, error) {
	sb, err := s.sets()
	if err != nil {
		return nil, err
	}
	res, err := sb.ExtendSet(ctx, wire.FromExtendSetRequest(req))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ToExtendSetResponse(res), nil
}

func (s *grpcServer) EnqueueSet(ctx context.Context, req *backendv1.EnqueueSetRequest) (*backendv1.EnqueueSetResponse, error) {
	f, ok := s.b.(backend.FairSetBackend)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend keeps no fair queue for sets of keys")
	}
	if err := f.EnqueueSet(ctx, req.GetKeys(), req.GetWaiterId()); err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.EnqueueSetResponse{}, nil
}
