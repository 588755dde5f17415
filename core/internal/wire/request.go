package wire

import (
	"fmt"
	"time"

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
		Request:    toRequest(req.Request),
		Replay:     req.Replay,
		LockDelay:  toDelay(req.LockDelay),
		ReplayOnly: req.ReplayOnly,
		Kind:       ToKind(req.Kind),
		Limit:      toCount(req.Limit),
		Permits:    toCount(req.Permits),
		Value:      req.Value,
	}
}

// toCount encodes a limit or a number of permits: 1, what every request
// before kinds meant, is left unset.
func toCount(n int) uint32 {
	if n <= 1 {
		return 0
	}
	return uint32(min(n, int(^uint32(0))))
}

// FromAcquireRequest decodes an Acquire. Limit and Permits are at least 1
// (unset is a mutex's 1); a kind this side does not know stays unknown
// (Kind -1), which no backend keeps.
func FromAcquireRequest(p *backendv1.AcquireRequest) backend.AcquireRequest {
	return backend.AcquireRequest{
		Key:        p.GetKey(),
		OwnerToken: p.GetOwnerToken(),
		TTL:        p.GetTtl().AsDuration(),
		Holder:     p.GetHolder(),
		Stamp:      FromStamp(p.GetStamp()),
		WaiterID:   p.GetWaiterId(),
		Request:    fromRequest(p.GetRequest()),
		Replay:     p.GetReplay(),
		LockDelay:  p.GetLockDelay().AsDuration(),
		ReplayOnly: p.GetReplayOnly(),
		Kind:       requestKind(p.GetKind()),
		Limit:      int(max(p.GetLimit(), 1)),
		Permits:    int(max(p.GetPermits(), 1)),
		Value:      p.GetValue(),
	}
}

func requestKind(k backendv1.Kind) backend.Kind {
	if kind, ok := FromKind(k); ok {
		return kind
	}
	return -1
}

// ToReleaseRequest encodes a Release.
func ToReleaseRequest(req backend.ReleaseRequest) *backendv1.ReleaseRequest {
	return &backendv1.ReleaseRequest{Key: req.Key, OwnerToken: req.OwnerToken, Stamp: ToStamp(req.Stamp),
		Request: toRequest(req.Request), Abandon: req.Abandon}
}

// FromReleaseRequest decodes a Release.
func FromReleaseRequest(p *backendv1.ReleaseRequest) backend.ReleaseRequest {
	return backend.ReleaseRequest{Key: p.GetKey(), OwnerToken: p.GetOwnerToken(), Stamp: FromStamp(p.GetStamp()),
		Request: fromRequest(p.GetRequest()), Abandon: p.GetAbandon()}
}

// ToExtendRequest encodes an Extend.
func ToExtendRequest(req backend.ExtendRequest) *backendv1.ExtendRequest {
	return &backendv1.ExtendRequest{
		Key:        req.Key,
		OwnerToken: req.OwnerToken,
		Ttl:        durationpb.New(req.TTL),
		Stamp:      ToStamp(req.Stamp),
		Request:    toRequest(req.Request),
	}
}

// FromExtendRequest decodes an Extend.
func FromExtendRequest(p *backendv1.ExtendRequest) backend.ExtendRequest {
	return backend.ExtendRequest{
		Key:        p.GetKey(),
		OwnerToken: p.GetOwnerToken(),
		TTL:        p.GetTtl().AsDuration(),
		Stamp:      FromStamp(p.GetStamp()),
		Request:    fromRequest(p.GetRequest()),
	}
}

// ToProclaimRequest encodes a Proclaim.
func ToProclaimRequest(req backend.ProclaimRequest) *backendv1.ProclaimRequest {
	return &backendv1.ProclaimRequest{Key: req.Key, OwnerToken: req.OwnerToken, Value: req.Value, Stamp: ToStamp(req.Stamp)}
}

// FromProclaimRequest decodes a Proclaim.
func FromProclaimRequest(p *backendv1.ProclaimRequest) backend.ProclaimRequest {
	return backend.ProclaimRequest{Key: p.GetKey(), OwnerToken: p.GetOwnerToken(), Value: p.GetValue(), Stamp: FromStamp(p.GetStamp())}
}

// ToAcquireSetRequest encodes an AcquireSet.
func ToAcquireSetRequest(req backend.AcquireSetRequest) *backendv1.AcquireSetRequest {
	claims := make([]*backendv1.Claim, len(req.Claims))
	for i, c := range req.Claims {
		claims[i] = &backendv1.Claim{Key: c.Key}
	}
	return &backendv1.AcquireSetRequest{
		Claims:     claims,
		OwnerToken: req.OwnerToken,
		Ttl:        durationpb.New(req.TTL),
		Holder:     req.Holder,
		Stamp:      ToStamp(req.Stamp),
		WaiterId:   req.WaiterID,
		Request:    toRequest(req.Request),
		Replay:     req.Replay,
		LockDelay:  toDelay(req.LockDelay),
		ReplayOnly: req.ReplayOnly,
	}
}

// FromAcquireSetRequest decodes an AcquireSet.
func FromAcquireSetRequest(p *backendv1.AcquireSetRequest) backend.AcquireSetRequest {
	claims := make([]backend.Claim, len(p.GetClaims()))
	for i, c := range p.GetClaims() {
		claims[i] = backend.Claim{Key: c.GetKey()}
	}
	return backend.AcquireSetRequest{
		Claims:     claims,
		OwnerToken: p.GetOwnerToken(),
		TTL:        p.GetTtl().AsDuration(),
		Holder:     p.GetHolder(),
		Stamp:      FromStamp(p.GetStamp()),
		WaiterID:   p.GetWaiterId(),
		Request:    fromRequest(p.GetRequest()),
		Replay:     p.GetReplay(),
		LockDelay:  p.GetLockDelay().AsDuration(),
		ReplayOnly: p.GetReplayOnly(),
	}
}

// ToReleaseSetRequest encodes a ReleaseSet.
func ToReleaseSetRequest(req backend.ReleaseSetRequest) *backendv1.ReleaseSetRequest {
	return &backendv1.ReleaseSetRequest{Keys: req.Keys, OwnerToken: req.OwnerToken, Stamp: ToStamp(req.Stamp),
		Request: toRequest(req.Request), Abandon: req.Abandon}
}

// FromReleaseSetRequest decodes a ReleaseSet.
func FromReleaseSetRequest(p *backendv1.ReleaseSetRequest) backend.ReleaseSetRequest {
	return backend.ReleaseSetRequest{Keys: p.GetKeys(), OwnerToken: p.GetOwnerToken(), Stamp: FromStamp(p.GetStamp()),
		Request: fromRequest(p.GetRequest()), Abandon: p.GetAbandon()}
}

// ToExtendSetRequest encodes an ExtendSet.
func ToExtendSetRequest(req backend.ExtendSetRequest) *backendv1.ExtendSetRequest {
	return &backendv1.ExtendSetRequest{Keys: req.Keys, OwnerToken: req.OwnerToken, Ttl: durationpb.New(req.TTL),
		Stamp: ToStamp(req.Stamp), Request: toRequest(req.Request)}
}

// FromExtendSetRequest decodes an ExtendSet.
func FromExtendSetRequest(p *backendv1.ExtendSetRequest) backend.ExtendSetRequest {
	return backend.ExtendSetRequest{Keys: p.GetKeys(), OwnerToken: p.GetOwnerToken(), TTL: p.GetTtl().AsDuration(),
		Stamp: FromStamp(p.GetStamp()), Request: fromRequest(p.GetRequest())}
}

// toRequest encodes a request identity; the zero one is left unset.
func toRequest(r backend.Request) *backendv1.RequestIdentity {
	if r == (backend.Request{}) {
		return nil
	}
	return &backendv1.RequestIdentity{Id: r.ID, Fingerprint: r.Fingerprint}
}

func fromRequest(p *backendv1.RequestIdentity) backend.Request {
	return backend.Request{ID: p.GetId(), Fingerprint: p.GetFingerprint()}
}

// toDelay encodes a lock-delay; none is left unset.
func toDelay(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
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
