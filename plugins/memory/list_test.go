package memory

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// The index's items point at the key's current lock or pool: after a
// takeover, an Extend and a pool's growth, a page shows what Get shows.
func TestListShowsTheCurrentHolder(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	acquire(t, b, "k/lock", "old", time.Minute)
	if !b.Expire("k/lock") {
		t.Fatal("k/lock was not held")
	}
	acquire(t, b, "k/lock", "new", time.Minute)
	if res, err := b.Extend(ctx, backend.ExtendRequest{Key: "k/lock", OwnerToken: "new", TTL: time.Hour}); err != nil || !res.Extended {
		t.Fatal(res, err)
	}
	for _, tok := range []string{"s1", "s2"} {
		if res, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k/sem", OwnerToken: tok, TTL: time.Minute, Kind: backend.KindSemaphore, Limit: 2, Permits: 1}); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	page, err := b.List(ctx, backend.ListRequest{Prefix: "k/", PageSize: 10})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("List = %+v, %v; want k/lock and k/sem", page, err)
	}
	for _, r := range page.Records {
		got, held, err := b.Get(ctx, r.Key)
		if err != nil || !held {
			t.Fatal(r.Key, held, err)
		}
		if r.FencingToken != got.FencingToken || r.Holder != got.Holder || !r.ExpiresAt.Equal(got.ExpiresAt) || len(r.Holders) != len(got.Holders) {
			t.Fatalf("listed %s as %+v; Get answers %+v", r.Key, r, got)
		}
	}
	if r := page.Records[0]; r.Holder != "h-new" || r.Remaining <= time.Minute {
		t.Fatalf("k/lock listed as %+v: not the extended lease of its new holder", r)
	}
}

// Pages listed while other callers acquire and release keys in the range
// are each consistent: keys in order, none twice, every record a lease
// that was held, and the keys held throughout on every full walk.
func TestListBesideAcquireAndRelease(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	const stable = 200
	for i := range stable {
		acquire(t, b, fmt.Sprintf("k/%04d/stable", i), "stable", time.Hour)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k/%04d/churn-%d", i%stable, w)
				tok := fmt.Sprint("churn-", w, "-", i)
				res, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: time.Hour})
				if err != nil || !res.Acquired {
					t.Error(res, err)
					return
				}
				if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok}); err != nil || !ok {
					t.Error(ok, err)
					return
				}
			}
		})
	}
	for range 20 {
		seen, last := 0, ""
		for tok := ""; ; {
			page, err := b.List(ctx, backend.ListRequest{Prefix: "k/", PageSize: 7, PageToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Records {
				if r.Key <= last {
					t.Fatalf("listed %s after %s: out of order or twice", r.Key, last)
				}
				last = r.Key
				if r.FencingToken == 0 || r.Remaining <= 0 {
					t.Fatalf("listed %+v: not a held lease", r)
				}
				if len(r.Key) > len("k/0000/") && r.Key[len("k/0000/"):] == "stable" {
					seen++
				}
			}
			if tok = page.NextPageToken; tok == "" {
				break
			}
		}
		if seen != stable {
			t.Fatalf("a walk saw %d of the %d keys held throughout", seen, stable)
		}
	}
	close(stop)
	wg.Wait()
}
