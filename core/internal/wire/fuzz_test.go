package wire

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// FuzzDecodeResponses feeds arbitrary bytes, as a plugin could send them,
// through the decoder of each backend.v1 answer. Whatever the bytes, a
// decoder never panics, refuses only with backend.ErrUnavailable, and what
// it accepts is coherent: an acquired, extended or found answer has a
// record for the key asked about, list entries and events lie under the
// prefix, durations are not negative. The committed corpus is in
// testdata/fuzz/FuzzDecodeResponses.
func FuzzDecodeResponses(f *testing.F) {
	rec := &backendv1.Record{Key: "k", FencingToken: 7, Holder: "h", Stamp: &backendv1.Stamp{WallTimeNs: 1, Logical: 2}}
	for kind, m := range []proto.Message{
		&backendv1.AcquireResponse{Acquired: true, Record: rec},
		&backendv1.ExtendResponse{Extended: true, Record: rec},
		&backendv1.GetResponse{Found: true, Record: rec},
		&backendv1.ListResponse{Records: []*backendv1.Record{rec}},
		&backendv1.WatchResponse{Type: backendv1.EventType_EVENT_TYPE_ACQUIRED, Record: rec},
		&backendv1.InfoResponse{Name: "x"},
		&backendv1.AcquireBatchResponse{Items: []*backendv1.AcquireOutcome{{Result: &backendv1.AcquireResponse{Acquired: true, Record: rec}}}},
		&backendv1.ExtendBatchResponse{Items: []*backendv1.ExtendOutcome{{Error: &backendv1.ItemError{Code: backendv1.ItemErrorCode_ITEM_ERROR_CODE_UNAVAILABLE}}}},
		&backendv1.AcquireSetResponse{Acquired: true, Records: []*backendv1.Record{rec, {Key: "k/2", FencingToken: 8}}},
		&backendv1.ExtendSetResponse{Extended: true, Records: []*backendv1.Record{rec, {Key: "k/2", FencingToken: 8}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(uint8(kind), b, "k", "", uint16(10))
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte, key, prefix string, pageSize uint16) {
		refused := func(err error) bool {
			if err != nil && !errors.Is(err, backend.ErrUnavailable) {
				t.Fatalf("refusal %v does not wrap ErrUnavailable", err)
			}
			return err != nil
		}
		check := func(r backend.Record, wantKey string) {
			if r.Key == "" || (wantKey != "" && r.Key != wantKey) || r.Remaining < 0 {
				t.Fatalf("accepted record %+v (asked about %q)", r, wantKey)
			}
		}
		switch kind % 10 {
		case 0:
			var m backendv1.AcquireResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			res, err := FromAcquireResponse(&m, key)
			if refused(err) {
				return
			}
			if m.GetAcquired() != res.Acquired {
				t.Fatalf("acquired %t decoded as %t", m.GetAcquired(), res.Acquired)
			}
			if res.Acquired || res.Record.Key != "" {
				check(res.Record, key)
			}
		case 1:
			var m backendv1.ExtendResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			res, err := FromExtendResponse(&m, key)
			if !refused(err) && res.Extended {
				check(res.Record, key)
			}
		case 2:
			var m backendv1.GetResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			rec, found, err := FromGetResponse(&m, key)
			if !refused(err) && found {
				check(rec, key)
			}
		case 3:
			var m backendv1.ListResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			req := backend.ListRequest{Prefix: prefix, PageSize: int(pageSize)}
			page, err := FromListResponse(&m, req)
			if refused(err) {
				return
			}
			if len(page.Records) > req.PageSize {
				t.Fatalf("accepted %d records for a page of %d", len(page.Records), req.PageSize)
			}
			for _, r := range page.Records {
				check(r, "")
				if !strings.HasPrefix(r.Key, prefix) {
					t.Fatalf("accepted %q under prefix %q", r.Key, prefix)
				}
			}
		case 4:
			var m backendv1.WatchResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			ev, err := FromWatchResponse(&m, prefix)
			if refused(err) {
				return
			}
			if ev.Type == 0 {
				t.Fatal("accepted an event without a type")
			}
			if ev.Type != backend.EventSynced {
				check(ev.Record, "")
				if !strings.HasPrefix(ev.Record.Key, prefix) {
					t.Fatalf("accepted an event on %q under prefix %q", ev.Record.Key, prefix)
				}
			}
		case 5:
			var m backendv1.InfoResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			info, err := FromInfoResponse(&m)
			if refused(err) {
				return
			}
			if info.MinTTL < 0 || info.MaxTTL < 0 || info.TTLGranularity < 0 || (info.MaxTTL > 0 && info.MinTTL > info.MaxTTL) ||
				info.MaxKeys < 1 || info.MaxLockDelay < 0 {
				t.Fatalf("accepted info %+v", info)
			}
		case 6:
			var m backendv1.AcquireBatchResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			// As many requests as the page size says, all for key.
			reqs := make([]backend.AcquireRequest, pageSize%8)
			for i := range reqs {
				reqs[i].Key = key
			}
			outs, err := FromAcquireBatchResponse(&m, reqs, "p")
			if refused(err) {
				return
			}
			if len(outs) != len(reqs) {
				t.Fatalf("accepted %d outcomes for %d requests", len(outs), len(reqs))
			}
			for _, o := range outs {
				if o.Err == nil && (o.Value.Acquired || o.Value.Record.Key != "") {
					check(o.Value.Record, key)
				}
			}
		case 7:
			var m backendv1.ExtendBatchResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			reqs := make([]backend.ExtendRequest, pageSize%8)
			for i := range reqs {
				reqs[i].Key = key
			}
			outs, err := FromExtendBatchResponse(&m, reqs, "p")
			if refused(err) {
				return
			}
			if len(outs) != len(reqs) {
				t.Fatalf("accepted %d outcomes for %d requests", len(outs), len(reqs))
			}
			for _, o := range outs {
				if o.Err != nil && !errors.Is(o.Err, backend.ErrUnavailable) && !errors.Is(o.Err, backend.ErrInvalidArgument) &&
					!errors.Is(o.Err, backend.ErrRequestConflict) && !errors.Is(o.Err, backend.ErrFailedPrecondition) {
					t.Fatalf("item error %v is not a single call's error", o.Err)
				}
				if o.Err == nil && o.Value.Extended {
					check(o.Value.Record, key)
				}
			}
		case 8:
			var m backendv1.AcquireSetResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			keys := []string{key, key + "/2"}
			res, err := FromAcquireSetResponse(&m, keys)
			if refused(err) {
				return
			}
			if res.Acquired {
				if len(res.Records) != len(keys) {
					t.Fatalf("accepted %d records for %d keys", len(res.Records), len(keys))
				}
				for i, r := range res.Records {
					check(r, keys[i])
				}
			} else if res.Blocker.Key != "" && res.Blocker.Key != keys[0] && res.Blocker.Key != keys[1] {
				t.Fatalf("accepted a blocker on %q for %q", res.Blocker.Key, keys)
			}
		case 9:
			var m backendv1.ExtendSetResponse
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			keys := []string{key, key + "/2"}
			res, err := FromExtendSetResponse(&m, keys)
			if !refused(err) && res.Extended {
				for i, r := range res.Records {
					check(r, keys[i])
				}
			}
		}
	})
}

// The decoders refuse the nonsense the fuzz test looks for, by name.
func TestDecodeRefusesNonsense(t *testing.T) {
	rec := func(key string) *backendv1.Record { return &backendv1.Record{Key: key, FencingToken: 1} }
	for name, err := range map[string]error{
		"acquired without a record": func() error {
			_, err := FromAcquireResponse(&backendv1.AcquireResponse{Acquired: true}, "k")
			return err
		}(),
		"acquired another key": func() error {
			_, err := FromAcquireResponse(&backendv1.AcquireResponse{Acquired: true, Record: rec("x")}, "k")
			return err
		}(),
		"extended without a record": func() error { _, err := FromExtendResponse(&backendv1.ExtendResponse{Extended: true}, "k"); return err }(),
		"found without a record":    func() error { _, _, err := FromGetResponse(&backendv1.GetResponse{Found: true}, "k"); return err }(),
		"list outside the prefix": func() error {
			_, err := FromListResponse(&backendv1.ListResponse{Records: []*backendv1.Record{rec("b/1")}}, backend.ListRequest{Prefix: "a/", PageSize: 10})
			return err
		}(),
		"list over the page size": func() error {
			_, err := FromListResponse(&backendv1.ListResponse{Records: []*backendv1.Record{rec("a"), rec("b")}}, backend.ListRequest{PageSize: 1})
			return err
		}(),
		"list entry without a record": func() error {
			_, err := FromListResponse(&backendv1.ListResponse{Records: []*backendv1.Record{nil}}, backend.ListRequest{PageSize: 1})
			return err
		}(),
		"event without a record": func() error {
			_, err := FromWatchResponse(&backendv1.WatchResponse{Type: backendv1.EventType_EVENT_TYPE_RELEASED}, "")
			return err
		}(),
		"event of no type": func() error { _, err := FromWatchResponse(&backendv1.WatchResponse{}, ""); return err }(),
		"batch with too few outcomes": func() error {
			_, err := FromReleaseBatchResponse(&backendv1.ReleaseBatchResponse{}, []backend.ReleaseRequest{{Key: "k"}}, "p")
			return err
		}(),
		"batch item with neither result nor error": func() error {
			_, err := FromAcquireBatchResponse(&backendv1.AcquireBatchResponse{Items: []*backendv1.AcquireOutcome{{}}}, []backend.AcquireRequest{{Key: "k"}}, "p")
			return err
		}(),
		"batch item for another key": func() error {
			_, err := FromExtendBatchResponse(&backendv1.ExtendBatchResponse{Items: []*backendv1.ExtendOutcome{{Result: &backendv1.ExtendResponse{Extended: true, Record: rec("x")}}}}, []backend.ExtendRequest{{Key: "k"}}, "p")
			return err
		}(),
		"a set acquired with too few records": func() error {
			_, err := FromAcquireSetResponse(&backendv1.AcquireSetResponse{Acquired: true, Records: []*backendv1.Record{rec("a")}}, []string{"a", "b"})
			return err
		}(),
		"a set acquired out of order": func() error {
			_, err := FromAcquireSetResponse(&backendv1.AcquireSetResponse{Acquired: true, Records: []*backendv1.Record{rec("b"), rec("a")}}, []string{"a", "b"})
			return err
		}(),
		"a set blocked by another key": func() error {
			_, err := FromAcquireSetResponse(&backendv1.AcquireSetResponse{Blocker: rec("c")}, []string{"a", "b"})
			return err
		}(),
		"a replay not acquired": func() error {
			_, err := FromAcquireResponse(&backendv1.AcquireResponse{Replayed: true}, "k")
			return err
		}(),
		"a lock-delay of another key": func() error {
			_, err := FromAcquireResponse(&backendv1.AcquireResponse{Record: &backendv1.Record{Key: "x", DelayRemaining: durationpb.New(time.Second)}}, "k")
			return err
		}(),
		"a negative lock-delay": func() error {
			_, _, err := FromGetResponse(&backendv1.GetResponse{Record: &backendv1.Record{Key: "k", DelayRemaining: durationpb.New(-time.Second)}}, "k")
			return err
		}(),
		"extended set without records": func() error {
			_, err := FromExtendSetResponse(&backendv1.ExtendSetResponse{Extended: true}, []string{"a", "b"})
			return err
		}(),
	} {
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("%s: %v, want a malformed-answer error wrapping ErrUnavailable", name, err)
		}
	}
	// A busy key whose holder the plugin does not know is not nonsense.
	if res, err := FromAcquireResponse(&backendv1.AcquireResponse{Record: &backendv1.Record{}}, "k"); err != nil || res.Acquired {
		t.Errorf("not acquired, holder unknown: %+v %v", res, err)
	}
}
