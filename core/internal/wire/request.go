package wire

import (
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// Requests come from the engine, through the host, so the plugin side
// decodes them without checks of its own: the engine validated them.

// ToAcquireRequest encodes an Acquire.
func ToAcquireRequest(req backend.AcquireRequest) *backendv1.AcquireRequest {
	return &backendv1.AcquireRequest{
		Key:        req.Key,
		OwnerToken: req.OwnerToken,
		Ttl:        durationpb.New(req.TTL),
		Holder:     req.Holder,
		Stamp:      ToStamp(req.Stamp),
		WaiterId:   req.WaiterID,
	}
}

// FromAcquireRequest decodes an Acquire.
func FromAcquireRequest(p *backendv1.AcquireRequest) backend.AcquireRequest {
	return backend.AcquireRequest{
		Key:        p.GetKey(),
		OwnerToken: p.GetOwnerToken(),
		TTL:        p.GetTtl().AsDuration(),
		Holder:     p.GetHolder(),
		Stamp:      FromStamp(p.GetStamp()),
		WaiterID:   p.GetWaiterId(),
	}
}

// ToReleaseRequest encodes a Release.
func ToReleaseRequest(req backend.ReleaseRequest) *backendv1.ReleaseRequest {
	return &backendv1.ReleaseRequest{Key: req.Key, OwnerToken: req.OwnerToken, Stamp: ToStamp(req.Stamp)}
}

// FromReleaseRequest decodes a Release.
func FromReleaseRequest(p *backendv1.ReleaseRequest) backend.ReleaseRequest {
	return backend.ReleaseRequest{Key: p.GetKey(), OwnerToken: p.GetOwnerToken(), Stamp: FromStamp(p.GetStamp())}
}

// ToExtendRequest encodes an Extend.
func ToExtendRequest(req backend.ExtendRequest) *backendv1.ExtendRequest {
	return &backendv1.ExtendRequest{
		Key:        req.Key,
		OwnerToken: req.OwnerToken,
		Ttl:        durationpb.New(req.TTL),
		Stamp:      ToStamp(req.Stamp),
	}
}

// FromExtendRequest decodes an Extend.
func FromExtendRequest(p *backendv1.ExtendRequest) backend.ExtendRequest {
	return backend.ExtendRequest{
		Key:        p.GetKey(),
		OwnerToken: p.GetOwnerToken(),
		TTL:        p.GetTtl().AsDuration(),
		Stamp:      FromStamp(p.GetStamp()),
	}
}

// maxPageSize is the largest page size the wire carries (a uint32).
const maxPageSize = int64(^uint32(0))

// ToListRequest encodes a List; a page size the wire cannot carry is
// refused with an error wrapping backend.ErrInvalidArgument.
func ToListRequest(req backend.ListRequest) (*backendv1.ListRequest, error) {
	if req.PageSize < 1 || int64(req.PageSize) > maxPageSize {
		return nil, fmt.Errorf("%w: page_size must be between 1 and %d, got %d",
			backend.ErrInvalidArgument, maxPageSize, req.PageSize)
	}
	return &backendv1.ListRequest{
		Prefix:    req.Prefix,
		PageSize:  uint32(req.PageSize),
		PageToken: req.PageToken,
	}, nil
}

// FromListRequest decodes a List.
func FromListRequest(p *backendv1.ListRequest) backend.ListRequest {
	return backend.ListRequest{Prefix: p.GetPrefix(), PageSize: int(p.GetPageSize()), PageToken: p.GetPageToken()}
}
