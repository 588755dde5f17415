package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// Count is the live leases in the store, each semaphore grant once, as
// List counts them: a released lease and an expired one leave it.
func TestCountFollowsTheLeases(t *testing.T) {
	b := open(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := func(n int64) {
		t.Helper()
		got, err := b.Count(ctx)
		if err != nil || got != n {
			t.Fatalf("Count = %d, %v; want %d", got, err, n)
		}
		page, err := b.List(ctx, backend.ListRequest{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		listed := int64(0)
		for _, r := range page.Records {
			listed += int64(max(len(r.Holders), 1))
		}
		if listed != n {
			t.Fatalf("List counts %d leases, Count %d", listed, n)
		}
	}
	want(0)
	for _, k := range []string{"m/1", "m/2"} {
		if res, err := b.Acquire(ctx, backend.AcquireRequest{Key: k, OwnerToken: "t-" + k, TTL: time.Minute}); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	short, err := b.Acquire(ctx, backend.AcquireRequest{Key: "m/short", OwnerToken: "short", TTL: 50 * time.Millisecond})
	if err != nil || !short.Acquired {
		t.Fatal(short, err)
	}
	for _, tok := range []string{"s1", "s2"} {
		res, err := b.Acquire(ctx, backend.AcquireRequest{Key: "sem", OwnerToken: tok, TTL: time.Minute, Kind: backend.KindSemaphore, Limit: 2, Permits: 1})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	// The short lease's TTL runs out on the store's clock: poll until it
	// no longer counts (the store decides, whatever the cleaner has done).
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 4 {
			break
		}
		if n != 5 || time.Now().After(deadline) {
			t.Fatalf("Count = %d while the short lease runs out; want 5, then 4", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	want(4)
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "sem", OwnerToken: "s1"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "m/1", OwnerToken: "t-m/1"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	want(2)
}
