package wire

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// The To...Response functions encode a backend's answers, for the plugin
// side.

// ToRecord encodes a held lock.
func ToRecord(r backend.Record) *backendv1.Record {
	out := &backendv1.Record{
		Key:          r.Key,
		FencingToken: r.FencingToken,
		Holder:       r.Holder,
		Remaining:    durationpb.New(r.Remaining),
		Stamp:        ToStamp(r.Stamp),
	}
	if !r.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(r.ExpiresAt)
	}
	return out
}

// ToInfoResponse encodes what a backend promises. fair says whether the
// backend keeps the queue that Info.Fair promises (it implements
// backend.FairBackend): a backend without it is not fair, whatever it says.
func ToInfoResponse(info backend.Info, fair bool) *backendv1.InfoResponse {
	return &backendv1.InfoResponse{
		Name:           info.Name,
		Version:        info.Version,
		Shared:         info.Shared,
		Durable:        info.Durable,
		TtlGranularity: durationpb.New(info.TTLGranularity),
		MinTtl:         durationpb.New(info.MinTTL),
		MaxTtl:         durationpb.New(info.MaxTTL),
		Fair:           info.Fair && fair,
	}
}

// ToAcquireResponse encodes the outcome of an Acquire.
func ToAcquireResponse(res backend.AcquireResult) *backendv1.AcquireResponse {
	return &backendv1.AcquireResponse{Acquired: res.Acquired, Record: ToRecord(res.Record)}
}

// ToExtendResponse encodes the outcome of an Extend.
func ToExtendResponse(res backend.ExtendResult) *backendv1.ExtendResponse {
	out := &backendv1.ExtendResponse{Extended: res.Extended}
	if res.Extended {
		out.Record = ToRecord(res.Record)
	}
	return out
}

// ToGetResponse encodes the outcome of a Get.
func ToGetResponse(rec backend.Record, found bool) *backendv1.GetResponse {
	out := &backendv1.GetResponse{Found: found}
	if found {
		out.Record = ToRecord(rec)
	}
	return out
}

// ToListResponse encodes one page of a List.
func ToListResponse(page backend.ListPage) *backendv1.ListResponse {
	out := &backendv1.ListResponse{
		Records:       make([]*backendv1.Record, len(page.Records)),
		NextPageToken: page.NextPageToken,
	}
	for i, r := range page.Records {
		out.Records[i] = ToRecord(r)
	}
	return out
}

// ToWatchResponse encodes one event of a Watch.
func ToWatchResponse(ev backend.Event) *backendv1.WatchResponse {
	out := &backendv1.WatchResponse{Type: toEventType(ev.Type)}
	if ev.Type != backend.EventSynced {
		out.Record = ToRecord(ev.Record)
	}
	return out
}
