package wire

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// What the plugin side encodes, the host side decodes to the same value.
func TestRoundTrip(t *testing.T) {
	rec := backend.Record{
		Key: "a/1", FencingToken: 7, Holder: "h",
		ExpiresAt: time.Unix(1700000000, 123).UTC(), Remaining: 3 * time.Second,
		Stamp: hlc.Timestamp{WallTime: 42, Logical: 3}, LockDelay: 5 * time.Second,
		Limit: 1, Permits: 1, // a mutex's, as decoded
	}
	same := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", what, got, want)
		}
	}

	idem := backend.Request{ID: "id", Fingerprint: "fp"}
	acq := backend.AcquireRequest{Key: "a/1", OwnerToken: "tok", TTL: time.Minute, Holder: "h", Stamp: rec.Stamp, WaiterID: "w",
		Request: idem, Replay: "sealed", LockDelay: time.Second, ReplayOnly: true, Limit: 1, Permits: 1}
	same("AcquireRequest", FromAcquireRequest(ToAcquireRequest(acq)), acq)
	for _, shape := range []struct {
		kind           backend.Kind
		limit, permits int
	}{{backend.KindSemaphore, 3, 2}, {backend.KindRWLock, backend.RWLockReaders, 1}, {backend.KindRWLock, backend.RWLockReaders, backend.RWLockReaders}} {
		sem := backend.AcquireRequest{Key: "a/1", OwnerToken: "tok", TTL: time.Minute, Kind: shape.kind, Limit: shape.limit, Permits: shape.permits}
		same("AcquireRequest "+shape.kind.String(), FromAcquireRequest(ToAcquireRequest(sem)), sem)
	}
	// A batch carries a grant's kind, limit and permits in each item, and
	// its records' holders.
	items := []backend.AcquireRequest{acq, {Key: "a/2", OwnerToken: "t2", TTL: time.Minute, Kind: backend.KindSemaphore, Limit: 3, Permits: 2}}
	same("AcquireBatchRequest", FromAcquireBatchRequest(ToAcquireBatchRequest(items)), items)
	// A semaphore's record: its grant, its shape and every holder.
	semRec := rec
	semRec.LockDelay = 0
	semRec.Kind, semRec.Limit, semRec.Permits, semRec.InUse = backend.KindSemaphore, 5, 2, 3
	semRec.Holders = []backend.Grant{
		{FencingToken: 6, Holder: "g", ExpiresAt: rec.ExpiresAt, Remaining: time.Second, Stamp: hlc.Timestamp{WallTime: 41}, Permits: 1},
		{FencingToken: 7, Holder: "h", ExpiresAt: rec.ExpiresAt, Remaining: 3 * time.Second, Stamp: rec.Stamp, Permits: 2},
	}
	sg, found, err := FromGetResponse(ToGetResponse(semRec, true), "a/1")
	same("Get semaphore", []any{sg, found, err}, []any{semRec, true, nil})
	bres, err := FromAcquireBatchResponse(ToAcquireBatchResponse([]backend.Outcome[backend.AcquireResult]{{Value: backend.AcquireResult{Acquired: true, Record: semRec}}}),
		[]backend.AcquireRequest{{Key: "a/1"}}, "p")
	same("AcquireBatch semaphore", []any{bres, err}, []any{[]backend.Outcome[backend.AcquireResult]{{Value: backend.AcquireResult{Acquired: true, Record: semRec}}}, nil})
	// InUse left unset by the plugin is the holders' sum.
	unsummed := semRec
	unsummed.InUse = 0
	sg, _, _ = FromGetResponse(ToGetResponse(unsummed, true), "a/1")
	same("Get semaphore without in_use", sg.InUse, 3)
	// A refused Acquire of a key kept with another kind carries the kept
	// kind and limit.
	kept := backend.Record{Key: "a/1", Kind: backend.KindSemaphore, Limit: 3, Permits: 1}
	kres, err := FromAcquireResponse(ToAcquireResponse(backend.AcquireResult{Record: kept}), "a/1")
	same("AcquireResult kind kept", []any{kres, err}, []any{backend.AcquireResult{Record: kept}, nil})
	rel := backend.ReleaseRequest{Key: "a/1", OwnerToken: "tok", Stamp: rec.Stamp, Request: idem, Abandon: true}
	same("ReleaseRequest", FromReleaseRequest(ToReleaseRequest(rel)), rel)
	ext := backend.ExtendRequest{Key: "a/1", OwnerToken: "tok", TTL: time.Hour, Stamp: rec.Stamp, Request: idem}
	same("ExtendRequest", FromExtendRequest(ToExtendRequest(ext)), ext)
	acqSet := backend.AcquireSetRequest{Claims: []backend.Claim{{Key: "a/1"}, {Key: "a/2"}}, OwnerToken: "tok", TTL: time.Minute,
		Holder: "h", Stamp: rec.Stamp, WaiterID: "w", Request: idem, Replay: "sealed", LockDelay: time.Second, ReplayOnly: true}
	same("AcquireSetRequest", FromAcquireSetRequest(ToAcquireSetRequest(acqSet)), acqSet)
	relSet := backend.ReleaseSetRequest{Keys: []string{"a/1", "a/2"}, OwnerToken: "tok", Stamp: rec.Stamp, Request: idem, Abandon: true}
	same("ReleaseSetRequest", FromReleaseSetRequest(ToReleaseSetRequest(relSet)), relSet)
	extSet := backend.ExtendSetRequest{Keys: []string{"a/1", "a/2"}, OwnerToken: "tok", TTL: time.Hour, Stamp: rec.Stamp, Request: idem}
	same("ExtendSetRequest", FromExtendSetRequest(ToExtendSetRequest(extSet)), extSet)
	rec2 := rec
	rec2.Key = "a/2"
	keys := []string{"a/1", "a/2"}
	sres, err := FromAcquireSetResponse(ToAcquireSetResponse(backend.AcquireSetResult{Acquired: true, Records: []backend.Record{rec, rec2}, Replayed: true, Replay: "sealed"}), keys)
	same("AcquireSetResult", []any{sres, err}, []any{backend.AcquireSetResult{Acquired: true, Records: []backend.Record{rec, rec2}, Replayed: true, Replay: "sealed"}, nil})
	sres, err = FromAcquireSetResponse(ToAcquireSetResponse(backend.AcquireSetResult{Blocker: rec2}), keys)
	same("AcquireSetResult blocked", []any{sres, err}, []any{backend.AcquireSetResult{Blocker: rec2}, nil})
	delayed := backend.Record{Key: "a/2", DelayRemaining: 2 * time.Second}
	sres, err = FromAcquireSetResponse(ToAcquireSetResponse(backend.AcquireSetResult{Blocker: delayed}), keys)
	same("AcquireSetResult delayed", []any{sres, err}, []any{backend.AcquireSetResult{Blocker: delayed}, nil})
	xres, err := FromExtendSetResponse(ToExtendSetResponse(backend.ExtendSetResult{Extended: true, Records: []backend.Record{rec, rec2}}), keys)
	same("ExtendSetResult", []any{xres, err}, []any{backend.ExtendSetResult{Extended: true, Records: []backend.Record{rec, rec2}}, nil})
	dres, err := FromAcquireResponse(ToAcquireResponse(backend.AcquireResult{Record: backend.Record{Key: "a/1", DelayRemaining: time.Second}}), "a/1")
	same("AcquireResult delayed", []any{dres, err}, []any{backend.AcquireResult{Record: backend.Record{Key: "a/1", DelayRemaining: time.Second}}, nil})
	rres, err := FromAcquireResponse(ToAcquireResponse(backend.AcquireResult{Acquired: true, Record: rec, Replayed: true, Replay: "sealed"}), rec.Key)
	same("AcquireResult replayed", []any{rres, err}, []any{backend.AcquireResult{Acquired: true, Record: rec, Replayed: true, Replay: "sealed"}, nil})
	gd, found, err := FromGetResponse(ToGetResponse(backend.Record{Key: "a/1", DelayRemaining: time.Second}, false), "a/1")
	same("Get delayed", []any{gd, found, err}, []any{backend.Record{Key: "a/1", DelayRemaining: time.Second}, false, nil})
	list := backend.ListRequest{Prefix: "a/", PageSize: 10, PageToken: "p"}
	pl, err := ToListRequest(list)
	if err != nil {
		t.Fatal(err)
	}
	same("ListRequest", FromListRequest(pl), list)

	res, err := FromAcquireResponse(ToAcquireResponse(backend.AcquireResult{Acquired: true, Record: rec}), rec.Key)
	same("AcquireResult", res, backend.AcquireResult{Acquired: true, Record: rec})
	same("AcquireResult error", err, nil)
	eres, err := FromExtendResponse(ToExtendResponse(backend.ExtendResult{Extended: true, Record: rec}), rec.Key)
	same("ExtendResult", eres, backend.ExtendResult{Extended: true, Record: rec})
	same("ExtendResult error", err, nil)
	got, found, err := FromGetResponse(ToGetResponse(rec, true), rec.Key)
	same("Get", []any{got, found, err}, []any{rec, true, nil})
	page, err := FromListResponse(ToListResponse(backend.ListPage{Records: []backend.Record{rec}, NextPageToken: "n"}), list)
	same("ListPage", page, backend.ListPage{Records: []backend.Record{rec}, NextPageToken: "n"})
	same("ListPage error", err, nil)
	for _, ev := range []backend.Event{{Type: backend.EventSynced}, {Type: backend.EventAcquired, Record: rec}, {Type: backend.EventReleased, Record: rec}, {Type: backend.EventExpired, Record: rec}} {
		got, err := FromWatchResponse(ToWatchResponse(ev), "a/")
		same("Event "+ev.Type.String(), []any{got, err}, []any{ev, nil})
	}
	info := backend.Info{Name: "x", Version: "1", Shared: true, Durable: true, TTLGranularity: time.Millisecond, MinTTL: time.Second, MaxTTL: time.Hour, Fair: true,
		MaxKeys: 16, RequestIDs: true, MaxLockDelay: time.Minute, Kinds: []backend.Kind{backend.KindSemaphore, backend.KindRWLock}}
	gotInfo, err := FromInfoResponse(ToInfoResponse(info, true, true, true))
	same("Info", []any{gotInfo, err}, []any{info, nil})
	if gotInfo, _ := FromInfoResponse(ToInfoResponse(info, false, true, false)); gotInfo.Fair {
		t.Error("a backend without the queue calls was reported fair")
	}
	if gotInfo, _ := FromInfoResponse(ToInfoResponse(info, true, false, false)); gotInfo.MaxKeys != 1 {
		t.Errorf("a backend without the set calls was reported to take %d keys", gotInfo.MaxKeys)
	}
	dup := info
	dup.Kinds = []backend.Kind{backend.KindRWLock, backend.KindMutex, backend.KindSemaphore, backend.KindRWLock}
	if gotInfo, _ := FromInfoResponse(ToInfoResponse(dup, true, true, true)); !reflect.DeepEqual(gotInfo.Kinds, info.Kinds) {
		t.Errorf("kinds %v were reported as %v, want %v", dup.Kinds, gotInfo.Kinds, info.Kinds)
	}
	if ToStamp(hlc.Timestamp{}) != nil {
		t.Error("the zero stamp is not left unset")
	}
	same("unset stamp", FromStamp(nil), hlc.Timestamp{})
}

func TestListRequestPageSizeBounds(t *testing.T) {
	for _, n := range []int{0, -1, int(maxPageSize) + 1} {
		if _, err := ToListRequest(backend.ListRequest{PageSize: n}); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("page size %d: %v, want ErrInvalidArgument", n, err)
		}
	}
}

// A backend's error reaches the host as the sentinel it wraps, with the
// backend's message.
func TestErrorsRoundTrip(t *testing.T) {
	cases := []struct {
		err      error
		code     codes.Code
		sentinel error
	}{
		{fmt.Errorf("%w: ttl too long", backend.ErrInvalidArgument), codes.InvalidArgument, backend.ErrInvalidArgument},
		{fmt.Errorf("%w: store down", backend.ErrUnavailable), codes.Unavailable, backend.ErrUnavailable},
		{fmt.Errorf("a/1: %w", backend.ErrRequestConflict), codes.AlreadyExists, backend.ErrRequestConflict},
		{fmt.Errorf("%w: keys in two slots", backend.ErrFailedPrecondition), codes.FailedPrecondition, backend.ErrFailedPrecondition},
		{errors.New("anything else"), codes.Unavailable, backend.ErrUnavailable},
		{fmt.Errorf("wrapped: %w", context.Canceled), codes.Canceled, backend.ErrUnavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded, backend.ErrUnavailable},
	}
	for _, c := range cases {
		st, _ := status.FromError(ToStatus(c.err))
		if st.Code() != c.code || st.Message() != c.err.Error() {
			t.Errorf("ToStatus(%v) = %v %q, want %v", c.err, st.Code(), st.Message(), c.code)
		}
		back := FromStatus(st, "p")
		if !errors.Is(back, c.sentinel) {
			t.Errorf("FromStatus(%v) = %v, want it to wrap %v", st, back, c.sentinel)
		}
	}
	if got := FromStatus(status.New(codes.InvalidArgument, "ttl: 48h exceeds 24h"), "p").Error(); got != "ttl: 48h exceeds 24h" {
		t.Errorf("invalid argument message %q, want the plugin's own words", got)
	}
	if got := FromStatus(status.New(codes.Unavailable, "down"), "p").Error(); got != "plugin p: down" {
		t.Errorf("unavailable message %q", got)
	}
}

// An ExtendBatch's items and outcomes, encoded in slabs with shared stamp
// and ttl messages, decode after the wire to what was sent: each item its
// own key, token, ttl, stamp and request identity, each outcome its own
// record, refusal or error.
func TestExtendBatchRoundTrip(t *testing.T) {
	s1, s2 := hlc.Timestamp{WallTime: 42, Logical: 3}, hlc.Timestamp{WallTime: 43}
	reqs := []backend.ExtendRequest{
		{Key: "b/1", OwnerToken: "t1", TTL: time.Minute, Stamp: s1},
		{Key: "b/2", OwnerToken: "t2", TTL: time.Minute, Stamp: s1, Request: backend.Request{ID: "id", Fingerprint: "fp"}},
		{Key: "b/3", OwnerToken: "t3", TTL: 1500 * time.Millisecond, Stamp: s2},
		{Key: "b/4", OwnerToken: "t4", TTL: time.Hour},
	}
	var wireReq backendv1.ExtendBatchRequest
	roundTrip(t, ToExtendBatchRequest(reqs), &wireReq)
	if got := FromExtendBatchRequest(&wireReq); !reflect.DeepEqual(got, reqs) {
		t.Errorf("ExtendBatchRequest: got %+v, want %+v", got, reqs)
	}

	rec := func(key string, stamp hlc.Timestamp, expires time.Time) backend.Record {
		return backend.Record{Key: key, FencingToken: 9, Holder: "h", ExpiresAt: expires, Remaining: 59 * time.Second, Stamp: stamp, Limit: 1, Permits: 1}
	}
	outs := []backend.Outcome[backend.ExtendResult]{
		{Value: backend.ExtendResult{Extended: true, Record: rec("b/1", s1, time.Unix(1700000000, 5).UTC())}},
		{Value: backend.ExtendResult{}},
		{Err: fmt.Errorf("%w: that part of the store is down", backend.ErrUnavailable)},
		{Value: backend.ExtendResult{Extended: true, Record: rec("b/4", hlc.Timestamp{}, time.Time{})}},
	}
	var wireResp backendv1.ExtendBatchResponse
	roundTrip(t, ToExtendBatchResponse(outs), &wireResp)
	got, err := FromExtendBatchResponse(&wireResp, reqs, "p")
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range got {
		if (o.Err == nil) != (outs[i].Err == nil) || o.Err != nil && !errors.Is(o.Err, backend.ErrUnavailable) {
			t.Errorf("outcome %d: error %v, want %v", i, o.Err, outs[i].Err)
		}
		if !reflect.DeepEqual(o.Value, outs[i].Value) {
			t.Errorf("outcome %d: got %+v, want %+v", i, o.Value, outs[i].Value)
		}
	}
}

// roundTrip marshals m and unmarshals it into into.
func roundTrip(t *testing.T, m, into proto.Message) {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

// A Follow's change, events and acks cross the wire unchanged, and an
// answer that is neither an event nor an ack is an error, not nothing.
func TestFollowRoundTrip(t *testing.T) {
	c := backend.FollowChange{Keys: []string{"a"}, Prefixes: []string{"p/"}, DropKeys: []string{"b"}, DropPrefixes: []string{"q/"}}
	got, seq := FromFollowRequest(ToFollowRequest(c, 7))
	if !reflect.DeepEqual(got, c) || seq != 7 {
		t.Fatalf("FollowRequest: got %+v seq %d, want %+v seq 7", got, seq, c)
	}

	rec := backend.Record{Key: "a", FencingToken: 3, Holder: "h", Limit: 1, Permits: 1}
	for _, want := range []backend.Event{{Type: backend.EventSynced}, {Type: backend.EventReleased, Record: rec}} {
		ev, applied, err := FromFollowResponse(ToFollowEvent(want))
		if err != nil || applied != 0 || ev.Type != want.Type || ev.Record.Key != want.Record.Key || ev.Record.FencingToken != want.Record.FencingToken {
			t.Errorf("event %v: got %+v, applied %d, %v", want.Type, ev, applied, err)
		}
	}
	if _, applied, err := FromFollowResponse(ToFollowApplied(9)); err != nil || applied != 9 {
		t.Errorf("ack: applied %d, %v; want 9", applied, err)
	}

	for name, resp := range map[string]*backendv1.FollowResponse{
		"empty":            {},
		"ack of seq 0":     ToFollowApplied(0),
		"event unset":      {Kind: &backendv1.FollowResponse_Event{}},
		"event no record":  {Kind: &backendv1.FollowResponse_Event{Event: &backendv1.WatchResponse{Type: backendv1.EventType_EVENT_TYPE_ACQUIRED}}},
		"event of no type": {Kind: &backendv1.FollowResponse_Event{Event: &backendv1.WatchResponse{}}},
	} {
		if _, _, err := FromFollowResponse(resp); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "Follow") {
			t.Errorf("%s: err = %v, want a malformed Follow answer (ErrUnavailable)", name, err)
		}
	}
}
