package wire

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// The To...Response functions encode a backend's answers, for the plugin
// side.

// ToRecord encodes a held lock.
func ToRecord(r backend.Record) *backendv1.Record {
	var parts recordParts
	return parts.fill(r)
}

// recordParts are the messages of one encoded Record, allocated together
// (a batch's records, in slabs).
type recordParts struct {
	record    backendv1.Record
	remaining durationpb.Duration
	stamp     backendv1.Stamp
	expires   timestamppb.Timestamp
}

// fill encodes r into p's messages and answers p's record.
func (p *recordParts) fill(r backend.Record) *backendv1.Record {
	out := &p.record
	out.Key, out.FencingToken, out.Holder = r.Key, r.FencingToken, r.Holder
	p.remaining.Seconds, p.remaining.Nanos = durationParts(r.Remaining)
	out.Remaining = &p.remaining
	if !r.Stamp.IsZero() {
		p.stamp.WallTimeNs, p.stamp.Logical = r.Stamp.WallTime, r.Stamp.Logical
		out.Stamp = &p.stamp
	}
	out.LockDelay = toDelay(r.LockDelay)
	out.Kind = ToKind(r.Kind)
	out.Limit, out.Permits = toCount(r.Limit), toCount(r.Permits)
	out.InUse = uint32(max(r.InUse, 0))
	out.Value = r.Value
	if !r.ExpiresAt.IsZero() {
		p.expires.Seconds, p.expires.Nanos = r.ExpiresAt.Unix(), int32(r.ExpiresAt.Nanosecond())
		out.ExpiresAt = &p.expires
	}
	if len(r.Holders) > 0 {
		out.Holders = make([]*backendv1.Grant, len(r.Holders))
		for i, g := range r.Holders {
			out.Holders[i] = toGrant(g)
		}
	}
	return out
}

// durationParts are d's seconds and nanoseconds, as durationpb.New splits
// them.
func durationParts(d time.Duration) (int64, int32) {
	nanos := d.Nanoseconds()
	return nanos / 1e9, int32(nanos % 1e9)
}

func toGrant(g backend.Grant) *backendv1.Grant {
	out := &backendv1.Grant{
		FencingToken: g.FencingToken,
		Holder:       g.Holder,
		Remaining:    durationpb.New(g.Remaining),
		Stamp:        ToStamp(g.Stamp),
		Permits:      toCount(g.Permits),
		Value:        g.Value,
	}
	if !g.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(g.ExpiresAt)
	}
	return out
}

// toDelayRecord encodes the record of a key nobody holds that is in its
// lock-delay (nil when it is not).
func toDelayRecord(r backend.Record) *backendv1.Record {
	if r.DelayRemaining <= 0 {
		return nil
	}
	return &backendv1.Record{Key: r.Key, DelayRemaining: durationpb.New(r.DelayRemaining)}
}

// ToInfoResponse encodes what a backend promises (its Kinds beside the
// mutex, each once, in order). fair says whether the backend keeps the
// queue that Info.Fair promises (it implements backend.FairBackend): a
// backend without it is not fair, whatever it says.
// sets says whether it takes sets of keys (backend.SetBackend, and
// backend.FairSetBackend when fair): without them MaxKeys is 1. batch says
// whether it serves the batch calls (backend.BatchBackend).
func ToInfoResponse(info backend.Info, fair, sets, batch bool) *backendv1.InfoResponse {
	maxKeys := uint32(1)
	if sets && info.MaxKeys > 1 {
		maxKeys = uint32(min(info.MaxKeys, maxWireKeys))
	}
	return &backendv1.InfoResponse{
		MaxKeys:        maxKeys,
		RequestIds:     info.RequestIDs,
		MaxLockDelay:   toDelay(info.MaxLockDelay),
		Name:           info.Name,
		Version:        info.Version,
		Shared:         info.Shared,
		Durable:        info.Durable,
		TtlGranularity: durationpb.New(info.TTLGranularity),
		MinTtl:         durationpb.New(info.MinTTL),
		MaxTtl:         durationpb.New(info.MaxTTL),
		Fair:           info.Fair && fair,
		Kinds:          toKinds(info.Kinds),
		Batch:          batch,
	}
}

// toKinds encodes the kinds a backend keeps beside the mutex, each once.
func toKinds(kinds []backend.Kind) []backendv1.Kind {
	var out []backendv1.Kind
	for _, k := range kinds {
		if w := ToKind(k); w != backendv1.Kind_KIND_UNSPECIFIED && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// ToAcquireResponse encodes the outcome of an Acquire.
func ToAcquireResponse(res backend.AcquireResult) *backendv1.AcquireResponse {
	out := &backendv1.AcquireResponse{Acquired: res.Acquired, Record: ToRecord(res.Record), Replayed: res.Replayed, Replay: res.Replay}
	if d := toDelayRecord(res.Record); !res.Acquired && d != nil {
		out.Record = d
	}
	return out
}

// ToAcquireSetResponse encodes the outcome of an AcquireSet.
func ToAcquireSetResponse(res backend.AcquireSetResult) *backendv1.AcquireSetResponse {
	out := &backendv1.AcquireSetResponse{Acquired: res.Acquired, Replayed: res.Replayed, Replay: res.Replay}
	if res.Acquired {
		out.Records = toRecords(res.Records)
		return out
	}
	if d := toDelayRecord(res.Blocker); d != nil {
		out.Blocker = d
	} else if res.Blocker.Key != "" {
		out.Blocker = ToRecord(res.Blocker)
	}
	return out
}

// ToExtendSetResponse encodes the outcome of an ExtendSet.
func ToExtendSetResponse(res backend.ExtendSetResult) *backendv1.ExtendSetResponse {
	out := &backendv1.ExtendSetResponse{Extended: res.Extended}
	if res.Extended {
		out.Records = toRecords(res.Records)
	}
	return out
}

func toRecords(rs []backend.Record) []*backendv1.Record {
	out := make([]*backendv1.Record, len(rs))
	for i, r := range rs {
		out[i] = ToRecord(r)
	}
	return out
}

// ToExtendResponse encodes the outcome of an Extend.
func ToExtendResponse(res backend.ExtendResult) *backendv1.ExtendResponse {
	out := &backendv1.ExtendResponse{Extended: res.Extended}
	if res.Extended {
		out.Record = ToRecord(res.Record)
	}
	return out
}

// ToProclaimResponse encodes the outcome of a Proclaim.
func ToProclaimResponse(res backend.ProclaimResult) *backendv1.ProclaimResponse {
	out := &backendv1.ProclaimResponse{Proclaimed: res.Proclaimed}
	if res.Proclaimed {
		out.Record = ToRecord(res.Record)
	}
	return out
}

// ToGetResponse encodes the outcome of a Get.
func ToGetResponse(rec backend.Record, found bool) *backendv1.GetResponse {
	out := &backendv1.GetResponse{Found: found}
	if found {
		out.Record = ToRecord(rec)
	} else {
		out.Record = toDelayRecord(rec)
	}
	return out
}

// ToListResponse encodes one page of a List.
func ToListResponse(page backend.ListPage) *backendv1.ListResponse {
	return &backendv1.ListResponse{Records: toRecords(page.Records), NextPageToken: page.NextPageToken}
}

// ToWatchResponse encodes one event of a Watch.
func ToWatchResponse(ev backend.Event) *backendv1.WatchResponse {
	out := &backendv1.WatchResponse{Type: toEventType(ev.Type)}
	if ev.Type != backend.EventSynced {
		out.Record = ToRecord(ev.Record)
	}
	return out
}
