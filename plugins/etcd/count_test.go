package etcd_test

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/etcd"
)

// Count is the held leases under the prefix, each grant of a semaphore,
// rwlock or election once, as List counts them; a grant extended onto a new
// lease stays counted once and leaves the count when released (its count
// key moves with it, not left on the old lease, which goes to the pool), and
// a lease that runs out leaves it.
func TestCountFollowsTheLeases(t *testing.T) {
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	want := func(n int64) {
		t.Helper()
		got, err := b.Count(ctx)
		if err != nil || got != n {
			t.Fatalf("Count = %d, %v; want %d", got, err, n)
		}
		if listed := listCount(t, b, 100); listed != n {
			t.Fatalf("List counts %d leases, Count %d", listed, n)
		}
	}
	want(0)
	m1 := token()
	if res := acquire(t, b, "m/1", m1, time.Minute, clock.Now()); !res.Acquired {
		t.Fatalf("acquire m/1: %+v", res)
	}
	if res, err := b.AcquireSet(ctx, backend.AcquireSetRequest{Claims: []backend.Claim{{Key: "set/a"}, {Key: "set/b"}},
		OwnerToken: token(), TTL: time.Minute, Holder: "h", Stamp: clock.Now()}); err != nil || !res.Acquired {
		t.Fatalf("acquire set: %+v, %v", res, err)
	}
	outs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{
		{Key: "batch/1", OwnerToken: token(), TTL: time.Minute, Holder: "h", Stamp: clock.Now()},
		{Key: "batch/2", OwnerToken: token(), TTL: time.Minute, Holder: "h", Stamp: clock.Now()},
	})
	if err != nil || len(outs) != 2 || !outs[0].Value.Acquired || !outs[1].Value.Acquired {
		t.Fatalf("acquire batch: %+v, %v", outs, err)
	}
	want(5)
	s1, res := grant(t, b, "sem", backend.KindSemaphore, 3, 1, time.Minute)
	if !res.Acquired {
		t.Fatalf("grant s1: %+v", res)
	}
	s2, res := grant(t, b, "sem", backend.KindSemaphore, 3, 2, time.Minute)
	if !res.Acquired {
		t.Fatalf("grant s2: %+v", res)
	}
	if _, res := grant(t, b, "elect", backend.KindElection, 1, 1, time.Minute); !res.Acquired {
		t.Fatalf("campaign: %+v", res)
	}
	want(8)
	// Extend moves s2 onto a new lease: still one lease.
	if ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "sem", OwnerToken: s2, TTL: 2 * time.Minute}); err != nil || !ext.Extended {
		t.Fatalf("extend s2: %+v, %v", ext, err)
	}
	want(8)
	for _, r := range []struct{ key, tok string }{{"sem", s1}, {"sem", s2}, {"m/1", m1}} {
		if !release(t, b, r.key, r.tok) {
			t.Fatalf("release %s: not held", r.key)
		}
	}
	want(5)
	// A grant extended off a short lease: when the short lease ends (etcd
	// revokes it, unused in the pool), the grant still counts once.
	s3, res := grant(t, b, "sem", backend.KindSemaphore, 3, 1, 2*time.Second)
	if !res.Acquired {
		t.Fatalf("grant s3: %+v", res)
	}
	if ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "sem", OwnerToken: s3, TTL: time.Minute}); err != nil || !ext.Extended {
		t.Fatalf("extend s3: %+v, %v", ext, err)
	}
	for end := res.Record.ExpiresAt.Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n, err := b.Count(ctx); err != nil || n != 6 {
			t.Fatalf("Count = %d, %v after s3's first lease; want 6", n, err)
		}
	}
	want(6)
	if !release(t, b, "sem", s3) {
		t.Fatal("release s3: not held")
	}
	want(5)
	// A lease that runs out leaves the count when etcd revokes it.
	if _, res := grant(t, b, "sem", backend.KindSemaphore, 3, 1, 2*time.Second); !res.Acquired {
		t.Fatalf("short grant: %+v", res)
	}
	want(6)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 5 {
			break
		}
		if n != 6 || time.Now().After(deadline) {
			t.Fatalf("Count = %d while the short grant runs out; want 6, then 5", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	want(5)
}

// listCount is the leases every List page of pageSize holds, as the
// server's gauge counts them without Count.
func listCount(t testing.TB, b *etcd.Backend, pageSize int) int64 {
	t.Helper()
	var n int64
	token := ""
	for {
		page, err := b.List(ctxT(t), backend.ListRequest{PageSize: pageSize, PageToken: token})
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
