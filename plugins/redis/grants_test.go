package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
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

// Racers through two backends (two connection pools, as two servers) race
// for permits of a limit-3 semaphore (harness.RacePermits: exactly three
// granted per round, each fencing token once).
func TestGrantRacersNeverExceedLimit(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := "t" + token()[:8] + ":"
	bs := []backend.Backend{open(t, addr, "key_prefix", prefix), open(t, addr, "key_prefix", prefix)}
	racePermits(t, bs)
}

// racePermits races 12 callers, alternating between bs, for one permit each
// of a limit-3 semaphore, for 8 rounds.
func racePermits(t *testing.T, bs []backend.Backend) {
	const limit, racers = 3, 12
	reqs := make([]backend.AcquireRequest, racers)
	harness.RacePermits(t, limit, racers, 8, func(i int) (harness.PermitTry, error) {
		reqs[i] = grantReq("sem", token(), backend.KindSemaphore, limit, 1, time.Minute)
		res, err := bs[i%len(bs)].Acquire(context.Background(), reqs[i])
		return harness.PermitTry{Granted: res.Acquired, Fence: res.Record.FencingToken, InUse: res.Record.InUse}, err
	}, func(i int) error {
		ok, err := bs[i%len(bs)].Release(context.Background(), backend.ReleaseRequest{Key: "sem", OwnerToken: reqs[i].OwnerToken})
		if err == nil && !ok {
			err = errors.New("a granted permit was not released")
		}
		return err
	})
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

// The grants hash and a grant's expiry key live no longer than the key's
// latest grant: nothing of a semaphore is left behind but its meta hash.
func TestGrantKeysExpireWithTheirGrants(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := "x" + token()[:8] + ":"
	b := open(t, addr, "key_prefix", prefix)
	grant(t, b, "k", token(), backend.KindSemaphore, 3, 1, 200*time.Millisecond)
	grant(t, b, "k", token(), backend.KindSemaphore, 3, 1, time.Second)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	ctx := ctxT(t)
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 4 { // meta, grants, two expiry keys
		t.Fatalf("keys %q, %v", keys, err)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || strings.HasSuffix(k, ":grants") && ttl < 900*time.Millisecond {
			t.Fatalf("%s: PTTL %s, %v", k, ttl, err)
		}
	}
}

// A semaphore's grant in a batch is a grant, not a mutex: AcquireBatch runs
// its grant script beside the mutexes' pipeline, and ReleaseBatch and
// ExtendBatch find it by its token.
func TestBatchCarriesGrants(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	sem := grantReq("bs", token(), backend.KindSemaphore, 2, 1, time.Minute)
	mu := backend.AcquireRequest{Key: "bm", OwnerToken: token(), TTL: time.Minute, Stamp: hlc.NewClock(nil, 0).Now()}
	got, err := b.AcquireBatch(ctx, []backend.AcquireRequest{mu, sem})
	if err != nil || got[0].Err != nil || got[1].Err != nil || !got[0].Value.Acquired || !got[1].Value.Acquired ||
		got[1].Value.Record.Kind != backend.KindSemaphore || got[0].Value.Record.Kind != backend.KindMutex {
		t.Fatalf("acquire batch: %+v %v", got, err)
	}
	ext, err := b.ExtendBatch(ctx, []backend.ExtendRequest{{Key: "bs", OwnerToken: sem.OwnerToken, TTL: time.Hour}})
	if err != nil || ext[0].Err != nil || !ext[0].Value.Extended || ext[0].Value.Record.Remaining < 59*time.Minute {
		t.Fatalf("extend batch of the grant: %+v %v", ext, err)
	}
	rel, err := b.ReleaseBatch(ctx, []backend.ReleaseRequest{{Key: "bs", OwnerToken: sem.OwnerToken}, {Key: "bm", OwnerToken: mu.OwnerToken}})
	if err != nil || rel[0].Err != nil || rel[1].Err != nil || !rel[0].Value || !rel[1].Value {
		t.Fatalf("release batch: %+v %v", rel, err)
	}
	if _, held, err := b.Get(ctx, "bs"); err != nil || held {
		t.Fatalf("the grant after its batched release: held %v, %v", held, err)
	}
}
