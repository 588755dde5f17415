package redis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	"github.com/holdfast/holdfast/proto/hlc"
)

// grantReq is an Acquire of permits of a key of kind with limit.
func grantReq(key, tok string, kind backend.Kind, limit, permits int, ttl time.Duration) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl, Holder: "h-" + tok[:4], Stamp: hlc.NewClock(nil, 0).Now(),
		Kind: kind, Limit: limit, Permits: permits}
}

func grant(t *testing.T, b backend.Backend, key, tok string, kind backend.Kind, limit, permits int, ttl time.Duration) backend.AcquireResult {
	t.Helper()
	res, err := b.Acquire(ctxT(t), grantReq(key, tok, kind, limit, permits, ttl))
	if err != nil {
		t.Fatalf("acquire %d permits of %s %q: %v", permits, kind, key, err)
	}
	return res
}

// Racers through two backends (two connection pools, as two servers) race for permits of a limit-3 semaphore, round
// after round: nobody releases during a round, so exactly three win it (a
// refusal saw three held), and a resource fenced by the winners' tokens
// sees every token once.
func TestGrantRacersNeverExceedLimit(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := "t" + token()[:8] + ":"
	bs := []backend.Backend{open(t, addr, "key_prefix", prefix), open(t, addr, "key_prefix", prefix)}
	const limit, racers, rounds = 3, 12, 8
	seen := map[uint64]bool{}
	for round := range rounds {
		results := make([]backend.AcquireResult, racers)
		reqs := make([]backend.AcquireRequest, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			reqs[i] = grantReq("sem", token(), backend.KindSemaphore, limit, 1, time.Minute)
			wg.Go(func() { results[i], errs[i] = bs[i%2].Acquire(context.Background(), reqs[i]) })
		}
		wg.Wait()
		won := 0
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("round %d: %v", round, errs[i])
			}
			if !r.Acquired {
				if r.Record.InUse != limit {
					t.Fatalf("round %d: refused with %d permits in use of %d", round, r.Record.InUse, limit)
				}
				continue
			}
			if won++; won > limit || seen[r.Record.FencingToken] {
				t.Fatalf("round %d: winner %d with fencing token %d (seen before: %v)", round, won, r.Record.FencingToken, seen[r.Record.FencingToken])
			}
			seen[r.Record.FencingToken] = true
		}
		if won != limit {
			t.Fatalf("round %d: %d winners of %d racers for %d permits", round, won, racers, limit)
		}
		for i, r := range results {
			if !r.Acquired {
				continue
			}
			if ok, err := bs[i%2].Release(context.Background(), backend.ReleaseRequest{Key: "sem", OwnerToken: reqs[i].OwnerToken}); err != nil || !ok {
				t.Fatalf("round %d: a winner's release: %v %v", round, ok, err)
			}
		}
	}
}

func TestGrantKindAndLimitAreKept(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	if r := grant(t, b, "jobs", token(), backend.KindSemaphore, 3, 1, time.Minute); !r.Acquired ||
		r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 || r.Record.InUse != 1 || len(r.Record.Holders) != 1 {
		t.Fatalf("first grant: %+v", r)
	}
	for _, c := range []struct {
		kind  backend.Kind
		limit int
	}{{backend.KindSemaphore, 4}, {backend.KindRWLock, backend.RWLockReaders}} {
		r := grant(t, b, "jobs", token(), c.kind, c.limit, 1, time.Minute)
		if r.Acquired || r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 || len(r.Record.Holders) != 1 {
			t.Fatalf("%s limit %d on a semaphore of 3: %+v, want refused with the kept kind and limit", c.kind, c.limit, r)
		}
	}
	// A mutex Acquire of the semaphore key, alone or in a set.
	if r := acquire(t, b, "jobs", token(), time.Minute); r.Acquired || r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 ||
		len(r.Record.Holders) != 1 {
		t.Fatalf("mutex acquire of a semaphore key: %+v", r)
	}
	set, err := b.AcquireSet(ctx, backend.AcquireSetRequest{Claims: []backend.Claim{{Key: "free"}, {Key: "jobs"}}, OwnerToken: token(), TTL: time.Minute})
	if err != nil || set.Acquired || set.Blocker.Key != "jobs" || set.Blocker.Kind != backend.KindSemaphore {
		t.Fatalf("set claiming a semaphore key: %+v %v", set, err)
	}
	if _, held, _ := b.Get(ctx, "free"); held {
		t.Fatal("a refused set took a key")
	}
	// A semaphore Acquire of a mutex key, held and then released (its
	// fencing counter, and so its kind, is still kept).
	tok := token()
	acquire(t, b, "m", tok, time.Minute)
	if r := grant(t, b, "m", token(), backend.KindSemaphore, 3, 1, time.Minute); r.Acquired || r.Record.Kind != backend.KindMutex ||
		r.Record.FencingToken == 0 {
		t.Fatalf("semaphore acquire of a held mutex key: %+v", r)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "m", OwnerToken: tok}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if r := grant(t, b, "m", token(), backend.KindSemaphore, 3, 1, time.Minute); r.Acquired || r.Record.Kind != backend.KindMutex || r.Record.Limit != 1 {
		t.Fatalf("semaphore acquire of a released mutex key: %+v", r)
	}
	for _, bad := range []backend.AcquireRequest{
		grantReq("x", token(), backend.KindSemaphore, 0, 1, time.Minute),
		grantReq("x", token(), backend.KindSemaphore, backend.MaxLimit+1, 1, time.Minute),
		grantReq("x", token(), backend.KindSemaphore, 3, 4, time.Minute),
		grantReq("x", token(), backend.KindSemaphore, 3, 0, time.Minute),
	} {
		if _, err := b.Acquire(ctx, bad); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Fatalf("limit %d permits %d: %v, want invalid argument", bad.Limit, bad.Permits, err)
		}
	}
}

// One grant's expiry frees its permits and nobody else's, and Watch says
// so with that grant's fencing token.
func TestGrantExpiryFreesOnlyItsPermits(t *testing.T) {
	b := open(t, redistest.Addr(t))
	w := watch(t, b, "e/")
	short := grant(t, b, "e/k", token(), backend.KindSemaphore, 3, 2, 150*time.Millisecond)
	long := grant(t, b, "e/k", token(), backend.KindSemaphore, 3, 1, time.Minute)
	if !short.Acquired || !long.Acquired || long.Record.InUse != 3 || long.Record.FencingToken <= short.Record.FencingToken {
		t.Fatalf("grants: %+v / %+v", short, long)
	}
	for _, want := range []backend.Grant{{FencingToken: short.Record.FencingToken, Permits: 2}, {FencingToken: long.Record.FencingToken, Permits: 1}} {
		e := w.next(t)
		if e.Type != backend.EventAcquired || e.Record.FencingToken != want.FencingToken || e.Record.Permits != want.Permits ||
			e.Record.Kind != backend.KindSemaphore || e.Record.Limit != 3 {
			t.Fatalf("event %v %+v, want acquired %+v", e.Type, e.Record, want)
		}
	}
	if r := grant(t, b, "e/k", token(), backend.KindSemaphore, 3, 1, time.Minute); r.Acquired || r.Record.InUse != 3 ||
		r.Record.FencingToken != short.Record.FencingToken {
		t.Fatalf("a fourth permit: %+v, want refused naming the grant that ends first", r)
	}
	e := w.next(t)
	if e.Type != backend.EventExpired || e.Record.Key != "e/k" || e.Record.FencingToken != short.Record.FencingToken ||
		e.Record.Permits != 2 || e.Record.Kind != backend.KindSemaphore {
		t.Fatalf("event %v %+v, want the short grant's expiry", e.Type, e.Record)
	}
	if r := grant(t, b, "e/k", token(), backend.KindSemaphore, 3, 3, time.Minute); r.Acquired {
		t.Fatalf("three permits beside a live one: %+v", r)
	}
	r := grant(t, b, "e/k", token(), backend.KindSemaphore, 3, 2, time.Minute)
	if !r.Acquired || r.Record.InUse != 3 || len(r.Record.Holders) != 2 || r.Record.Holders[0].FencingToken != long.Record.FencingToken {
		t.Fatalf("two permits after the expiry: %+v", r)
	}
}

func TestGrantReleaseAndExtendTouchOnlyTheirGrant(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	ta, tb := token(), token()
	a := grant(t, b, "r", ta, backend.KindSemaphore, 2, 1, time.Minute)
	bb := grant(t, b, "r", tb, backend.KindSemaphore, 2, 1, 2*time.Second)
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "r", OwnerToken: tb, TTL: time.Hour})
	if err != nil || !ext.Extended || ext.Record.FencingToken != bb.Record.FencingToken || ext.Record.Remaining < 59*time.Minute ||
		ext.Record.Stamp != bb.Record.Stamp {
		t.Fatalf("extend b: %+v %v", ext, err)
	}
	rec, held, err := b.Get(ctx, "r")
	if err != nil || !held || len(rec.Holders) != 2 || rec.Holders[0].Remaining > time.Minute || rec.Holders[1].Remaining < 59*time.Minute {
		t.Fatalf("get after extending b: %+v %v", rec, err)
	}
	if rec.FencingToken != a.Record.FencingToken {
		t.Fatalf("get describes fence %d, want a's (%d), which ends first", rec.FencingToken, a.Record.FencingToken)
	}
	for _, stale := range []string{"", token()} {
		if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "r", OwnerToken: stale}); ok {
			t.Fatalf("release with token %q succeeded", stale)
		}
		if r, _ := b.Extend(ctx, backend.ExtendRequest{Key: "r", OwnerToken: stale, TTL: time.Minute}); r.Extended {
			t.Fatalf("extend with token %q succeeded", stale)
		}
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "r", OwnerToken: ta}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "r", OwnerToken: ta}); ok {
		t.Fatal("a second release of a's token succeeded")
	}
	if r, _ := b.Extend(ctx, backend.ExtendRequest{Key: "r", OwnerToken: ta, TTL: time.Minute}); r.Extended {
		t.Fatal("extend after release resurrected a's grant")
	}
	rec, held, err = b.Get(ctx, "r")
	if err != nil || !held || rec.InUse != 1 || len(rec.Holders) != 1 || rec.Holders[0].FencingToken != bb.Record.FencingToken {
		t.Fatalf("get after releasing a: %+v %v", rec, err)
	}
}

// Fencing tokens and stamps strictly increase along a key's grants, even
// when the engine proposes a stamp in the past.
func TestGrantFencingAndStampsChain(t *testing.T) {
	b := open(t, redistest.Addr(t))
	var last backend.Record
	for i := range 6 {
		req := grantReq("c", token(), backend.KindSemaphore, 2, 1, time.Minute)
		if i%2 == 1 {
			req.Stamp = hlc.Timestamp{WallTime: 1}
		}
		r, err := b.Acquire(ctxT(t), req)
		if err != nil || !r.Acquired {
			t.Fatalf("grant %d: %+v %v", i, r, err)
		}
		if r.Record.FencingToken <= last.FencingToken || i > 0 && !last.Stamp.Before(r.Record.Stamp) {
			t.Fatalf("grant %d: fence %d stamp %v after fence %d stamp %v", i, r.Record.FencingToken, r.Record.Stamp, last.FencingToken, last.Stamp)
		}
		last = r.Record
		if ok, err := b.Release(ctxT(t), backend.ReleaseRequest{Key: "c", OwnerToken: req.OwnerToken, Stamp: req.Stamp}); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
}

func TestGrantRequestIdentity(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	req := grantReq("q", token(), backend.KindSemaphore, 2, 1, time.Minute)
	req.Request, req.Replay = backend.Request{ID: "id-1", Fingerprint: "fp"}, "sealed"
	first, err := b.Acquire(ctx, req)
	if err != nil || !first.Acquired || first.Replayed {
		t.Fatalf("first: %+v %v", first, err)
	}
	again := req
	again.OwnerToken = token()
	rep, err := b.Acquire(ctx, again)
	if err != nil || !rep.Acquired || !rep.Replayed || rep.Replay != "sealed" || rep.Record.FencingToken != first.Record.FencingToken ||
		rep.Record.InUse != 1 {
		t.Fatalf("repeat: %+v %v", rep, err)
	}
	again.Request.Fingerprint = "other"
	if _, err := b.Acquire(ctx, again); !errors.Is(err, backend.ErrRequestConflict) {
		t.Fatalf("repeat with another fingerprint: %v", err)
	}
	rel := backend.ReleaseRequest{Key: "q", OwnerToken: req.OwnerToken, Request: backend.Request{ID: "id-2", Fingerprint: "fp"}}
	for i := range 2 {
		if ok, err := b.Release(ctx, rel); err != nil || !ok {
			t.Fatalf("release %d: %v %v", i, ok, err)
		}
	}
}

// An rwlock is a semaphore of RWLockReaders: readers share it, a writer
// takes all of it.
func TestRWLockReadersAndWriter(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	const all = backend.RWLockReaders
	var readers []string
	for range 3 {
		tok := token()
		if r := grant(t, b, "rw", tok, backend.KindRWLock, all, 1, time.Minute); !r.Acquired {
			t.Fatalf("reader: %+v", r)
		}
		readers = append(readers, tok)
	}
	if r := grant(t, b, "rw", token(), backend.KindRWLock, all, all, time.Minute); r.Acquired || len(r.Record.Holders) != 3 {
		t.Fatalf("writer beside readers: %+v", r)
	}
	for _, tok := range readers {
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "rw", OwnerToken: tok}); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	w := grant(t, b, "rw", token(), backend.KindRWLock, all, all, time.Minute)
	if !w.Acquired || w.Record.InUse != all || w.Record.Permits != all {
		t.Fatalf("writer alone: %+v", w)
	}
	if r := grant(t, b, "rw", token(), backend.KindRWLock, all, 1, time.Minute); r.Acquired || r.Record.FencingToken != w.Record.FencingToken {
		t.Fatalf("reader beside a writer: %+v", r)
	}
}

// List shows every grant; a page counts grants, never splitting a key's.
func TestListCountsGrants(t *testing.T) {
	b := open(t, redistest.Addr(t))
	acquire(t, b, "l/a", token(), time.Minute)
	for range 3 {
		grant(t, b, "l/b", token(), backend.KindSemaphore, 5, 1, time.Minute)
	}
	acquire(t, b, "l/c", token(), time.Minute)
	page, err := b.List(ctxT(t), backend.ListRequest{Prefix: "l/", PageSize: 2})
	if err != nil || len(page.Records) != 2 || page.Records[1].Key != "l/b" || len(page.Records[1].Holders) != 3 ||
		page.Records[1].InUse != 3 || page.NextPageToken == "" {
		t.Fatalf("first page: %+v %v", page, err)
	}
	page, err = b.List(ctxT(t), backend.ListRequest{Prefix: "l/", PageSize: 2, PageToken: page.NextPageToken})
	if err != nil || len(page.Records) != 1 || page.Records[0].Key != "l/c" || page.NextPageToken != "" {
		t.Fatalf("second page: %+v %v", page, err)
	}
}
