package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
)

func grantReq(key, tok string, kind backend.Kind, limit, permits int, ttl time.Duration) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl, Holder: "h-" + tok[:4], Stamp: clock.Now(),
		Kind: kind, Limit: limit, Permits: permits}
}

func grant(t testing.TB, b backend.Backend, key string, kind backend.Kind, limit, permits int, ttl time.Duration) (string, backend.AcquireResult) {
	t.Helper()
	tok := token()
	res, err := b.Acquire(context.Background(), grantReq(key, tok, kind, limit, permits, ttl))
	if err != nil {
		t.Fatalf("acquire %d permits of %s %q: %v", permits, kind, key, err)
	}
	return tok, res
}

// Racers through two plugin instances sharing the schema (one in each
// notify mode) race for permits of a limit-3 semaphore
// (harness.RacePermits: exactly three granted per round, each fencing token
// once).
func TestGrantRacersNeverExceedLimit(t *testing.T) {
	a := open(t, nil)
	racePermits(t, []backend.Backend{a, open(t, map[string]string{"schema": a.Schema(), "notify": postgres.NotifyContended})})
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
	ctx := context.Background()
	b := open(t, nil)
	if _, r := grant(t, b, "jobs", backend.KindSemaphore, 3, 1, time.Minute); !r.Acquired ||
		r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 || r.Record.InUse != 1 || len(r.Record.Holders) != 1 {
		t.Fatalf("first grant: %+v", r)
	}
	if _, r := grant(t, b, "jobs", backend.KindSemaphore, 4, 1, time.Minute); r.Acquired || r.Record.Kind != backend.KindSemaphore ||
		r.Record.Limit != 3 || len(r.Record.Holders) != 1 {
		t.Fatalf("limit 4 on a semaphore of 3: %+v", r)
	}
	if _, r := grant(t, b, "jobs", backend.KindRWLock, backend.RWLockReaders, 1, time.Minute); r.Acquired || r.Record.Kind != backend.KindSemaphore {
		t.Fatalf("rwlock on a semaphore: %+v", r)
	}
	if _, r := acquire(t, b, "jobs", time.Minute); r.Acquired || r.Record.Kind != backend.KindSemaphore || r.Record.Limit != 3 ||
		len(r.Record.Holders) != 1 {
		t.Fatalf("mutex acquire of a semaphore key: %+v", r)
	}
	set, err := b.AcquireSet(ctx, backend.AcquireSetRequest{Claims: []backend.Claim{{Key: "free"}, {Key: "jobs"}}, OwnerToken: token(), TTL: time.Minute})
	if err != nil || set.Acquired || set.Blocker.Key != "jobs" || set.Blocker.Kind != backend.KindSemaphore || set.Blocker.Limit != 3 {
		t.Fatalf("set claiming a semaphore key: %+v %v", set, err)
	}
	if _, held, _ := b.Get(ctx, "free"); held {
		t.Fatal("a refused set took a key")
	}
	tok, _ := acquire(t, b, "m", time.Minute)
	if _, r := grant(t, b, "m", backend.KindSemaphore, 3, 1, time.Minute); r.Acquired || r.Record.Kind != backend.KindMutex ||
		r.Record.Limit != 1 || r.Record.FencingToken == 0 {
		t.Fatalf("semaphore acquire of a held mutex key: %+v", r)
	}
	release(t, b, "m", tok)
	if _, r := grant(t, b, "m", backend.KindSemaphore, 3, 1, time.Minute); r.Acquired || r.Record.Kind != backend.KindMutex {
		t.Fatalf("semaphore acquire of a released mutex key (its row is kept): %+v", r)
	}
	for _, bad := range []backend.AcquireRequest{
		grantReq("x", token(), backend.KindSemaphore, 0, 1, time.Minute),
		grantReq("x", token(), backend.KindSemaphore, 3, 4, time.Minute),
	} {
		if _, err := b.Acquire(ctx, bad); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Fatalf("limit %d permits %d: %v, want invalid argument", bad.Limit, bad.Permits, err)
		}
	}
}

func TestGrantRequestIdentity(t *testing.T) {
	ctx := context.Background()
	b := open(t, nil)
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

// The cleaner's idle sweep deletes a free mutex row after idle_retention
// but never the row of a key that has grants: that row keeps the key's
// kind and limit.
func TestIdleSweepKeepsKeysWithGrants(t *testing.T) {
	dsn := pgtest.DSN(t)
	b := open(t, map[string]string{"statement_timeout": "100ms", "idle_retention": "200ms", "cleaner_max_sleep": "50ms"})
	tok, _ := acquire(t, b, "witness", time.Minute)
	release(t, b, "witness", tok)
	grant(t, b, "kept", backend.KindSemaphore, 3, 1, time.Minute)
	rows := func(key string) int {
		return query[int](t, dsn, "SELECT count(*)::int FROM "+b.Schema()+".locks WHERE key = $1", key)
	}
	eventually(t, 10*time.Second, "the idle sweep deletes the free witness row", func() bool { return rows("witness") == 0 })
	if rows("kept") != 1 {
		t.Fatal("the idle sweep deleted the row of a key with a grant")
	}
	if _, r := grant(t, b, "kept", backend.KindSemaphore, 4, 1, time.Minute); r.Acquired || r.Record.Limit != 3 {
		t.Fatalf("limit 4 after the sweep: %+v, want refused naming limit 3", r)
	}
}

// A semaphore's grant in a batch is a grant, not a mutex: AcquireBatch
// calls grant_acquire for it, and ReleaseBatch and ExtendBatch find it by
// its token, through a plugin that granted it or another one.
func TestBatchCarriesGrants(t *testing.T) {
	ctx := context.Background()
	b := open(t, nil)
	other := open(t, map[string]string{"schema": b.Schema()})
	sem := grantReq("bs", token(), backend.KindSemaphore, 2, 1, time.Minute)
	mu := backend.AcquireRequest{Key: "bm", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now()}
	got, err := b.AcquireBatch(ctx, []backend.AcquireRequest{mu, sem})
	if err != nil || got[0].Err != nil || got[1].Err != nil || !got[0].Value.Acquired || !got[1].Value.Acquired ||
		got[1].Value.Record.Kind != backend.KindSemaphore || got[0].Value.Record.Kind != backend.KindMutex {
		t.Fatalf("acquire batch: %+v %v", got, err)
	}
	for _, via := range []*postgres.Backend{other, b} {
		ext, err := via.ExtendBatch(ctx, []backend.ExtendRequest{{Key: "bs", OwnerToken: sem.OwnerToken, TTL: time.Hour}})
		if err != nil || ext[0].Err != nil || !ext[0].Value.Extended || ext[0].Value.Record.Remaining < 59*time.Minute {
			t.Fatalf("extend batch of the grant: %+v %v", ext, err)
		}
	}
	rel, err := other.ReleaseBatch(ctx, []backend.ReleaseRequest{{Key: "bs", OwnerToken: sem.OwnerToken}, {Key: "bm", OwnerToken: mu.OwnerToken}})
	if err != nil || rel[0].Err != nil || rel[1].Err != nil || !rel[0].Value || !rel[1].Value {
		t.Fatalf("release batch: %+v %v", rel, err)
	}
	if _, held, err := b.Get(ctx, "bs"); err != nil || held {
		t.Fatalf("the grant after its batched release: held %v, %v", held, err)
	}
}
