package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/proto/hlc"
)

var clock = hlc.NewClock(nil, 0)

func grantReq(key, tok string, kind backend.Kind, limit, permits int, ttl time.Duration) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl, Holder: "h-" + tok[:4], Stamp: clock.Now(),
		Kind: kind, Limit: limit, Permits: permits}
}

func grant(t testing.TB, b backend.Backend, key string, kind backend.Kind, limit, permits int, ttl time.Duration) (string, backend.AcquireResult) {
	t.Helper()
	tok := token()
	res, err := b.Acquire(ctxT(t), grantReq(key, tok, kind, limit, permits, ttl))
	if err != nil {
		t.Fatalf("acquire %d permits of %s %q: %v", permits, kind, key, err)
	}
	return tok, res
}

func release(t testing.TB, b backend.Backend, key, tok string) bool {
	t.Helper()
	ok, err := b.Release(ctxT(t), backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
	if err != nil {
		t.Fatalf("release %q: %v", key, err)
	}
	return ok
}

// Racers through two plugin instances sharing one etcd prefix race for
// permits of a limit-3 semaphore (harness.RacePermits: exactly three
// granted per round, each fencing token once).
func TestGrantRacersNeverExceedLimit(t *testing.T) {
	t.Parallel()
	ep := requireEtcd(t)
	shared := map[string]string{"prefix": testPrefix(t)}
	racePermits(t, []backend.Backend{open(t, ep, shared), open(t, ep, shared)})
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
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	if _, r := grant(t, b, "jobs", backend.KindSemaphore, 3, 1, ttl); !r.Acquired ||
		r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 || r.Record.InUse != 1 || len(r.Record.Holders) != 1 {
		t.Fatalf("first grant: %+v", r)
	}
	if _, r := grant(t, b, "jobs", backend.KindSemaphore, 4, 1, ttl); r.Acquired || r.Record.Kind != backend.KindSemaphore ||
		r.Record.Limit != 3 || len(r.Record.Holders) != 1 {
		t.Fatalf("limit 4 on a semaphore of 3: %+v", r)
	}
	if r := acquire(t, b, "jobs", token(), ttl, clock.Now()); r.Acquired || r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 ||
		len(r.Record.Holders) != 1 {
		t.Fatalf("mutex acquire of a semaphore key: %+v", r)
	}
	set, err := b.AcquireSet(ctx, backend.AcquireSetRequest{Claims: []backend.Claim{{Key: "free"}, {Key: "jobs"}}, OwnerToken: token(), TTL: ttl})
	if err != nil || set.Acquired || set.Blocker.Key != "jobs" || set.Blocker.Kind != backend.KindSemaphore || set.Blocker.Limit != 3 {
		t.Fatalf("set claiming a semaphore key: %+v %v", set, err)
	}
	if _, held, _ := b.Get(ctx, "free"); held {
		t.Fatal("a refused set took a key")
	}
	tok := token()
	acquire(t, b, "m", tok, ttl, clock.Now())
	if _, r := grant(t, b, "m", backend.KindSemaphore, 3, 1, ttl); r.Acquired || r.Record.Kind != backend.KindMutex ||
		r.Record.Limit != 1 || r.Record.FencingToken == 0 {
		t.Fatalf("semaphore acquire of a held mutex key: %+v", r)
	}
	release(t, b, "m", tok)
	if _, r := grant(t, b, "m", backend.KindSemaphore, 3, 1, ttl); r.Acquired || r.Record.Kind != backend.KindMutex {
		t.Fatalf("semaphore acquire of a released mutex key (its stamp is kept): %+v", r)
	}
}

func TestGrantRequestIdentity(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	req := grantReq("q", token(), backend.KindSemaphore, 2, 1, ttl)
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
	// The replay was answered: an abandoning release leaves the grant.
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "q", OwnerToken: req.OwnerToken, Abandon: true}); err != nil || ok {
		t.Fatalf("abandon of a claimed grant: %v %v", ok, err)
	}
	rel := backend.ReleaseRequest{Key: "q", OwnerToken: req.OwnerToken, Request: backend.Request{ID: "id-2", Fingerprint: "fp"}}
	for i := range 2 {
		if ok, err := b.Release(ctx, rel); err != nil || !ok {
			t.Fatalf("release %d: %v %v", i, ok, err)
		}
	}
}

// The fair queue serves grants as it serves a mutex: a caller with no entry
// does not pass queued waiters even when its permits fit, and the head
// takes its grant and leaves the queue in one step.
func TestGrantFairQueue(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	grant(t, b, "f", backend.KindSemaphore, 3, 1, ttl)
	head := "w-" + token()
	if err := b.Enqueue(ctx, "f", head); err != nil {
		t.Fatal(err)
	}
	if _, r := grant(t, b, "f", backend.KindSemaphore, 3, 1, ttl); r.Acquired {
		t.Fatal("a try took a permit ahead of a queued waiter")
	}
	req := grantReq("f", token(), backend.KindSemaphore, 3, 2, ttl)
	req.WaiterID = head
	r, err := b.Acquire(ctx, req)
	if err != nil || !r.Acquired || r.Record.InUse != 3 {
		t.Fatalf("the head's grant: %+v %v", r, err)
	}
	if ok, err := b.WaitTurn(ctx, "f", head); err != nil || ok {
		t.Fatalf("WaitTurn after the head's grant = %v, %v; want gone from the queue", ok, err)
	}
}
