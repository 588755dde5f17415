package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/plugins/redis/redistest"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// TestServerWhileRedisGoesAwayAndComesBackEmpty: a holdfast server over a
// Redis that stops and restarts without persistence. While Redis is away,
// calls answer unavailable at once and a guard that cannot renew is
// poisoned within its TTL; after Redis is back (empty), the server recovers
// on its own and fencing tokens keep increasing.
func TestServerWhileRedisGoesAwayAndComesBackEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and restarts Redis")
	}
	rs := redistest.Start(t)
	plugin := binary(t, "holdfast-backend-redis")
	srv := startHoldfast(t, "--backend", plugin, "--backend-opt", "addrs="+rs.Addr)
	raw := lockClient(t, srv)
	sdk, err := holdfast.Dial("http://" + srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ctx := context.Background()

	const ttl = 1500 * time.Millisecond
	g, err := sdk.Lock("guarded").TTL(ttl).TryLock(ctx)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	before, err := g.FencingToken()
	if err != nil {
		t.Fatal(err)
	}

	rs.Stop(t)
	stopped := time.Now()

	start := time.Now()
	_, err = raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "other", Ttl: durationpb.New(time.Second)})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("acquire with Redis away: %v, want unavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("unavailable took %s", d)
	}

	select {
	case <-g.Done():
	case <-time.After(ttl + time.Second):
		t.Fatalf("guard not poisoned %s after Redis stopped (TTL %s)", time.Since(stopped), ttl)
	}
	var lost *holdfast.LeaseLostError
	if cause := context.Cause(g.Context()); !errors.As(cause, &lost) || lost.Reason != holdfast.LossExpired {
		t.Fatalf("guard's cause = %v, want lease lost by expiry", cause)
	}
	if _, err := g.FencingToken(); !errors.Is(err, holdfast.ErrLeaseLost) {
		t.Fatalf("FencingToken after loss = %v", err)
	}
	t.Logf("guard poisoned %s after Redis stopped (TTL %s): %v", time.Since(stopped), ttl, lost)

	rs.Restart(t) // same port, empty: no persistence
	var after uint64
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "guarded", Ttl: durationpb.New(time.Second)})
		if err == nil {
			if !r.GetAcquired() {
				t.Fatalf("key held on an empty Redis: %v", r)
			}
			after = r.GetLease().GetFencingToken()
			break
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("acquire after Redis came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // poll the recovering server, with a deadline
	}
	if after <= before {
		t.Fatalf("fencing token went back across the Redis restart: %d then %d", before, after)
	}
	_ = g.Unlock(ctx) // lost: answers the loss, changes nothing
}
