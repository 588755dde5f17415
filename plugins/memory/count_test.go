package memory

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// Count is the leases held, each grant of a pool once, through acquire,
// release and expiry of mutexes and semaphore grants; it agrees with what
// List counts.
func TestCountFollowsTheLeases(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	want := func(n int64) {
		t.Helper()
		got, err := b.Count(ctx)
		if err != nil || got != n {
			t.Fatalf("Count = %d, %v; want %d", got, err, n)
		}
		listed := int64(0)
		for tok := ""; ; {
			page, err := b.List(ctx, backend.ListRequest{PageSize: 2, PageToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Records {
				listed += int64(max(len(r.Holders), 1))
			}
			if tok = page.NextPageToken; tok == "" {
				break
			}
		}
		if listed != n {
			t.Fatalf("List counts %d leases, Count %d", listed, n)
		}
	}
	want(0)
	acquire(t, b, "m/1", "t1", time.Minute)
	acquire(t, b, "m/2", "t2", time.Minute)
	for _, tok := range []string{"s1", "s2", "s3"} {
		res, err := b.Acquire(ctx, backend.AcquireRequest{Key: "sem", OwnerToken: tok, TTL: time.Minute, Kind: backend.KindSemaphore, Limit: 3, Permits: 1})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	want(5)
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "sem", OwnerToken: "s2"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "m/1", OwnerToken: "t1"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	want(3)
	if !b.Expire("sem") { // both remaining grants
		t.Fatal("sem was not held")
	}
	want(1)
	if !b.Expire("m/2") {
		t.Fatal("m/2 was not held")
	}
	want(0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Count(ctx); err == nil {
		t.Fatal("Count on a closed backend answered")
	}
}
