package backendserver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/wire"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

func (s *grpcServer) Count(ctx context.Context, _ *backendv1.CountRequest) (*backendv1.CountResponse, error) {
	c, ok := s.b.(backend.CountBackend)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this backend does not count its leases (the server lists them)")
	}
	n, err := c.Count(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, status.Error(codes.Unimplemented, "this backend does not count its leases (the server lists them)")
	}
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &backendv1.CountResponse{Leases: n}, nil
}
