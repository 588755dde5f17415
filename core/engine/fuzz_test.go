package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// FuzzAcquireValidation: whatever the input, Acquire either refuses it with
// invalid_argument (and holds nothing) or grants a lease on a valid key; it
// never panics and never answers another error.
func FuzzAcquireValidation(f *testing.F) {
	f.Add("k", "holder", int64(time.Second), int64(0), int32(0))
	f.Add("", "", int64(0), int64(0), int32(0))
	f.Add("a\x00b", "h", int64(time.Second), int64(0), int32(0))
	f.Add("\xff", "h", int64(time.Second), int64(0), int32(0))
	f.Add(strings.Repeat("k", 513), "h", int64(time.Second), int64(0), int32(0))
	f.Add("k", strings.Repeat("h", 257), int64(-1), int64(-1), int32(-1))
	f.Add("k", "h", int64(30*time.Hour), int64(time.Hour), int32(1e9))
	e, _ := newEngine(f, engine.Config{})
	f.Fuzz(func(t *testing.T, key, holder string, ttlNs, waitNs int64, nanos int32) {
		ttl := durationpb.New(time.Duration(ttlNs))
		ttl.Nanos += nanos % 2e9 // sometimes an invalid Duration
		// A positive wait would queue behind nobody and try at once, but
		// keep the run fast: only zero or negative (invalid) waits.
		req := &lockv1.AcquireRequest{Key: key, Holder: holder, Ttl: ttl,
			Wait: durationpb.New(min(time.Duration(waitNs), 0))}
		resp, err := e.Acquire(context.Background(), req)
		validKey := key != "" && len(key) <= 512 && utf8.ValidString(key) && !strings.Contains(key, "\x00")
		switch {
		case err == nil:
			if !validKey {
				t.Fatalf("accepted invalid key %q", key)
			}
			if resp.GetAcquired() {
				_, _ = e.Release(context.Background(), &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()})
			}
		case errors.Is(err, engine.ErrInvalidArgument):
			if msg := err.Error(); !strings.Contains(msg, ":") {
				t.Fatalf("message %q does not name a field", msg)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}
