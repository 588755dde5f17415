package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

var errStop = errors.New("stop")

// FuzzRequestValidation decodes arbitrary bytes, as a client could send
// them, into each request of the public API and hands them to the engine.
// Whatever the bytes, the engine never panics and either serves the
// request or refuses it with invalid_argument and a message that names a
// field; no other error appears (the backend is up). The committed corpus
// is in testdata/fuzz/FuzzRequestValidation.
func FuzzRequestValidation(f *testing.F) {
	for kind, m := range []proto.Message{
		&lockv1.AcquireRequest{Claims: []*lockv1.Claim{{Key: "k"}, {Key: "j"}}, Ttl: durationpb.New(time.Second), Holder: "h",
			RequestId: "0123456789abcdef", LockDelay: durationpb.New(time.Second)},
		&lockv1.ReleaseRequest{Keys: []string{"k", "j"}, OwnerToken: "t", RequestId: "0123456789abcdef"},
		&lockv1.ExtendRequest{Keys: []string{"k", "j"}, OwnerToken: "t", Ttl: durationpb.New(time.Second), RequestId: "0123456789abcdef"},
		&lockv1.InspectRequest{Key: "k"},
		&lockv1.ListRequest{Prefix: "k", PageSize: 2, PageToken: "x"},
		&lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "k"}},
		&lockv1.ProclaimRequest{Key: "k", OwnerToken: "t", Value: "v"},
		&lockv1.ObserveRequest{Key: "k"},
	} {
		b, _ := proto.Marshal(m)
		f.Add(uint8(kind), b)
	}
	// A fake keeping every kind, so that campaigns, Proclaim and Observe
	// are decided, not refused as unimplemented.
	fake := fakebackend.New().KeepKinds()
	f.Cleanup(func() { fake.Close() })
	e, err := engine.New(context.Background(), fake, engine.Config{MaxWait: time.Minute})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		switch kind % 8 {
		case 0:
			var r lockv1.AcquireRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			if w := r.GetWait(); w.IsValid() && w.AsDuration() > 0 && w.AsDuration() <= time.Minute {
				r.Wait = durationpb.New(time.Millisecond) // valid, and quick
			}
			var resp *lockv1.AcquireResponse
			resp, err = e.Acquire(ctx, &r)
			if err == nil && resp.GetAcquired() {
				l := resp.GetLease()
				if l.GetKey() != r.GetKey() || len(l.GetKeys()) != len(r.GetClaims()) || l.GetOwnerToken() == "" {
					t.Fatalf("lease %v for request %v", l, &r)
				}
				var keys []string
				for _, k := range l.GetKeys() {
					keys = append(keys, k.GetKey())
				}
				_, _ = e.Release(ctx, &lockv1.ReleaseRequest{Key: l.GetKey(), Keys: keys, OwnerToken: l.GetOwnerToken()})
			}
		case 1:
			var r lockv1.ReleaseRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			var resp *lockv1.ReleaseResponse
			if resp, err = e.Release(ctx, &r); err == nil && resp.GetReleased() {
				t.Fatalf("released %q with a made-up token", r.GetKey())
			}
		case 2:
			var r lockv1.ExtendRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			var resp *lockv1.ExtendResponse
			if resp, err = e.Extend(ctx, &r); err == nil && resp.GetExtended() {
				t.Fatalf("extended %q with a made-up token", r.GetKey())
			}
		case 3:
			var r lockv1.InspectRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			_, err = e.Inspect(ctx, &r)
		case 4:
			var r lockv1.ListRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			var resp *lockv1.ListResponse
			if resp, err = e.List(ctx, &r); err == nil && len(resp.GetLocks()) > engine.MaxPageSize {
				t.Fatalf("a page of %d locks", len(resp.GetLocks()))
			}
		case 5:
			var r lockv1.WatchRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			// Stop at the first message (SYNCED).
			err = e.Watch(ctx, &r, func(*lockv1.WatchResponse) error { return errStop })
			if errors.Is(err, errStop) {
				err = nil
			}
		case 6:
			var r lockv1.ProclaimRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			var resp *lockv1.ProclaimResponse
			if resp, err = e.Proclaim(ctx, &r); err == nil && resp.GetProclaimed() {
				t.Fatalf("proclaimed on %q with a made-up token", r.GetKey())
			}
		case 7:
			var r lockv1.ObserveRequest
			if proto.Unmarshal(data, &r) != nil {
				return
			}
			// Stop at the first message (the leader, or none).
			err = e.Observe(ctx, &r, func(*lockv1.ObserveResponse) error { return errStop })
			if errors.Is(err, errStop) {
				err = nil
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrInvalidArgument):
			if !namesField(err.Error()) {
				t.Fatalf("message %q does not start with a field's name", err.Error())
			}
		default:
			t.Fatalf("kind %d: unexpected error %v", kind%8, err)
		}
	})
}

// namesField reports whether msg starts with a request field's name.
func namesField(msg string) bool {
	for _, f := range []string{"key", "ttl", "wait", "holder", "client_stamp", "owner_token", "prefix", "page_size", "page_token",
		"claims", "keys", "request_id", "lock_delay", "kind", "limit", "permits", "mode", "value"} {
		if strings.HasPrefix(msg, f+":") || strings.HasPrefix(msg, f+" ") || strings.HasPrefix(msg, f+"[") {
			return true
		}
	}
	return false
}
