package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Count is the held leases under the key prefix, each grant of a
// semaphore or election once, as List counts them (keys whose names look
// like the backend's own suffixes included); a released lease and an
// expired one leave it.
func TestCountFollowsTheLeases(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	clock := hlc.NewClock(nil, 0)
	want := func(n int64) {
		t.Helper()
		got, err := b.Count(ctx)
		if err != nil || got != n {
			t.Fatalf("Count = %d, %v; want %d", got, err, n)
		}
		if listed := listCount(ctx, t, b, 100); listed != n {
			t.Fatalf("List counts %d leases, Count %d", listed, n)
		}
	}
	want(0)
	m1 := token()
	// Names that hold ":lock", ":g:" and ":meta" of their own.
	for _, k := range []string{"m/1", "x:lock", "{tag}a:g:1:2", "y:meta"} {
		tok := token()
		if k == "m/1" {
			tok = m1
		}
		if res := acquire(t, b, k, tok, time.Minute); !res.Acquired {
			t.Fatalf("acquire %q: %+v", k, res)
		}
	}
	if res, err := b.AcquireSet(ctx, backend.AcquireSetRequest{Claims: []backend.Claim{{Key: "set/a"}, {Key: "set/b"}},
		OwnerToken: token(), TTL: time.Minute, Holder: "h", Stamp: clock.Now()}); err != nil || !res.Acquired {
		t.Fatalf("acquire set: %+v, %v", res, err)
	}
	want(6)
	s1, s2 := token(), token()
	if res := grant(t, b, "sem:lo", s1, backend.KindSemaphore, 3, 1, time.Minute); !res.Acquired {
		t.Fatalf("grant s1: %+v", res)
	}
	if res := grant(t, b, "sem:lo", s2, backend.KindSemaphore, 3, 2, time.Minute); !res.Acquired {
		t.Fatalf("grant s2: %+v", res)
	}
	if res := grant(t, b, "elect", token(), backend.KindElection, 1, 1, time.Minute); !res.Acquired {
		t.Fatalf("campaign: %+v", res)
	}
	want(9)
	if ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "sem:lo", OwnerToken: s2, TTL: 2 * time.Minute}); err != nil || !ext.Extended {
		t.Fatalf("extend s2: %+v, %v", ext, err)
	}
	want(9)
	for _, r := range []struct{ key, tok string }{{"sem:lo", s1}, {"sem:lo", s2}, {"m/1", m1}} {
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: r.key, OwnerToken: r.tok, Stamp: clock.Now()}); err != nil || !ok {
			t.Fatalf("release %s: %v, %v", r.key, ok, err)
		}
	}
	want(6)
	// Leases that run out leave the count on Redis's clock.
	if res := grant(t, b, "sem:lo", token(), backend.KindSemaphore, 3, 1, 200*time.Millisecond); !res.Acquired {
		t.Fatalf("short grant: %+v", res)
	}
	if res := acquire(t, b, "m/short", token(), 200*time.Millisecond); !res.Acquired {
		t.Fatalf("short lock: %+v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 6 {
			break
		}
		if n < 6 || n > 8 || time.Now().After(deadline) {
			t.Fatalf("Count = %d while two short leases run out; want 8, then 6", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want(6)
}

// listCount is the leases every List page of pageSize holds, as the
// server's gauge counts them without Count.
func listCount(ctx context.Context, t testing.TB, b *redis.Backend, pageSize int) int64 {
	t.Helper()
	var n int64
	token := ""
	for {
		page, err := b.List(ctx, backend.ListRequest{PageSize: pageSize, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			n += int64(max(len(r.Holders), 1))
		}
		if token = page.NextPageToken; token == "" {
			return n
		}
	}
}
