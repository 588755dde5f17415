package backend

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/proto/hlc"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// grpcServer serves a Backend as holdfast.backend.v1.BackendService,
// converting between the wire messages and the plain types of this package.
type grpcServer struct {
	backendv1.UnimplementedBackendServiceServer
	b Backend
}

func (s *grpcServer) Info(ctx context.Context, _ *backendv1.InfoRequest) (*backendv1.InfoResponse, error) {
	info, err := s.b.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.InfoResponse{
		Name:           info.Name,
		Version:        info.Version,
		Shared:         info.Shared,
		Durable:        info.Durable,
		TtlGranularity: durationpb.New(info.TTLGranularity),
		MinTtl:         durationpb.New(info.MinTTL),
		MaxTtl:         durationpb.New(info.MaxTTL),
		// Fair promises the queue calls: a backend without them is not.
		Fair: info.Fair && s.isFair(),
	}, nil
}

func (s *grpcServer) Acquire(ctx context.Context, req *backendv1.AcquireRequest) (*backendv1.AcquireResponse, error) {
	res, err := s.b.Acquire(ctx, AcquireRequest{
		Key:        req.GetKey(),
		OwnerToken: req.GetOwnerToken(),
		TTL:        req.GetTtl().AsDuration(),
		Holder:     req.GetHolder(),
		Stamp:      stampFromProto(req.GetStamp()),
		WaiterID:   req.GetWaiterId(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.AcquireResponse{Acquired: res.Acquired, Record: recordToProto(res.Record)}, nil
}

func (s *grpcServer) Release(ctx context.Context, req *backendv1.ReleaseRequest) (*backendv1.ReleaseResponse, error) {
	ok, err := s.b.Release(ctx, ReleaseRequest{
		Key:        req.GetKey(),
		OwnerToken: req.GetOwnerToken(),
		Stamp:      stampFromProto(req.GetStamp()),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.ReleaseResponse{Released: ok}, nil
}

func (s *grpcServer) Extend(ctx context.Context, req *backendv1.ExtendRequest) (*backendv1.ExtendResponse, error) {
	res, err := s.b.Extend(ctx, ExtendRequest{
		Key:        req.GetKey(),
		OwnerToken: req.GetOwnerToken(),
		TTL:        req.GetTtl().AsDuration(),
		Stamp:      stampFromProto(req.GetStamp()),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &backendv1.ExtendResponse{Extended: res.Extended}
	if res.Extended {
		out.Record = recordToProto(res.Record)
	}
	return out, nil
}

func (s *grpcServer) Get(ctx context.Context, req *backendv1.GetRequest) (*backendv1.GetResponse, error) {
	rec, found, err := s.b.Get(ctx, req.GetKey())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &backendv1.GetResponse{Found: found}
	if found {
		out.Record = recordToProto(rec)
	}
	return out, nil
}

func (s *grpcServer) List(ctx context.Context, req *backendv1.ListRequest) (*backendv1.ListResponse, error) {
	page, err := s.b.List(ctx, ListRequest{
		Prefix:    req.GetPrefix(),
		PageSize:  int(req.GetPageSize()),
		PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &backendv1.ListResponse{
		Records:       make([]*backendv1.Record, len(page.Records)),
		NextPageToken: page.NextPageToken,
	}
	for i, r := range page.Records {
		out.Records[i] = recordToProto(r)
	}
	return out, nil
}

func (s *grpcServer) Watch(req *backendv1.WatchRequest, stream backendv1.BackendService_WatchServer) error {
	err := s.b.Watch(stream.Context(), req.GetPrefix(), func(ev Event) error {
		out := &backendv1.WatchResponse{Type: eventTypeToProto(ev.Type)}
		if ev.Type != EventSynced {
			out.Record = recordToProto(ev.Record)
		}
		return stream.Send(out)
	})
	if err == nil {
		return nil
	}
	return toStatus(err)
}

func (s *grpcServer) isFair() bool {
	_, ok := s.b.(FairBackend)
	return ok
}

func (s *grpcServer) fair() (FairBackend, error) {
	f, ok := s.b.(FairBackend)
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
		return nil, toStatus(err)
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
		return nil, toStatus(err)
	}
	return &backendv1.WaitTurnResponse{Queued: queued}, nil
}

func (s *grpcServer) Dequeue(ctx context.Context, req *backendv1.DequeueRequest) (*backendv1.DequeueResponse, error) {
	f, err := s.fair()
	if err != nil {
		return nil, err
	}
	if err := f.Dequeue(ctx, req.GetKey(), req.GetWaiterId()); err != nil {
		return nil, toStatus(err)
	}
	return &backendv1.DequeueResponse{}, nil
}

// toStatus maps an error from a Backend to the gRPC status the host maps
// back: ErrInvalidArgument to InvalidArgument, context errors to Canceled and
// DeadlineExceeded, everything else (ErrUnavailable included) to Unavailable.
// The message is the error's text.
func toStatus(err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	default:
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

func eventTypeToProto(t EventType) backendv1.EventType {
	switch t {
	case EventSynced:
		return backendv1.EventType_EVENT_TYPE_SYNCED
	case EventAcquired:
		return backendv1.EventType_EVENT_TYPE_ACQUIRED
	case EventReleased:
		return backendv1.EventType_EVENT_TYPE_RELEASED
	case EventExpired:
		return backendv1.EventType_EVENT_TYPE_EXPIRED
	}
	return backendv1.EventType_EVENT_TYPE_UNSPECIFIED
}

func recordToProto(r Record) *backendv1.Record {
	out := &backendv1.Record{
		Key:          r.Key,
		FencingToken: r.FencingToken,
		Holder:       r.Holder,
		Remaining:    durationpb.New(r.Remaining),
		Stamp:        stampToProto(r.Stamp),
	}
	if !r.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(r.ExpiresAt)
	}
	return out
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
