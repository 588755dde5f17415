package scaleout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// TestEtcdOutagePoisonsGuards: while etcd is down the server answers
// unavailable, so a guard's renewals fail until its lease runs out on the
// client's clock, and the guard is poisoned. When etcd comes back nothing
// recovers into two holders: the old guard stays poisoned, the next holder
// gets a larger fencing token, and a fence admits the new token and refuses
// the old one.
func TestEtcdOutagePoisonsGuards(t *testing.T) {
	cluster := etcdtest.StartT(t, 1)
	_, urls := startServers(t, 2, cluster.EndpointList())
	ctx := t.Context()
	const ttl = 3 * time.Second

	c1, err := holdfast.Dial(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := holdfast.Dial(urls[1])
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	g1, err := c1.Lock("outage/k").TTL(ttl).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t1, err := g1.FencingToken()
	if err != nil {
		t.Fatal(err)
	}

	cluster.Members[0].Kill()
	killed := time.Now()
	select {
	case <-g1.Done():
	case <-time.After(ttl + 2*time.Second):
		t.Fatalf("guard still holds %s after etcd went down (TTL %s)", time.Since(killed), ttl)
	}
	poisonedAfter := time.Since(killed)
	if _, err := g1.FencingToken(); !errors.Is(err, holdfast.ErrLeaseLost) {
		t.Fatalf("fencing token of a poisoned guard: %v, want ErrLeaseLost", err)
	}
	if cause := context.Cause(g1.Context()); !errors.Is(cause, holdfast.ErrLeaseLost) {
		t.Fatalf("guard context cause %v, want ErrLeaseLost", cause)
	}
	// While etcd is down, a new acquire answers unavailable once the SDK's
	// retry budget of unavailable answers has run out, and not later.
	start := time.Now()
	_, err = c2.Lock("outage/k").TTL(ttl).TryLock(ctx)
	if !errors.Is(err, holdfast.ErrUnavailable) {
		t.Fatalf("acquire with etcd down: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > holdfast.DefaultRetryBudget+2*time.Second {
		t.Fatalf("acquire with etcd down took %s (retry budget %s)", took, holdfast.DefaultRetryBudget)
	}

	if err := cluster.Members[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The next holder, through the other server, once etcd has expired the
	// old lease (etcd restarts lease clocks when it comes back).
	g2, err := c2.Lock("outage/k").TTL(ttl).Wait(20 * time.Second).Lock(ctx)
	if err != nil {
		t.Fatalf("acquire after etcd came back: %v", err)
	}
	defer func() {
		if err := g2.Unlock(context.Background()); err != nil {
			t.Errorf("unlock: %v", err)
		}
	}()
	t2, err := g2.FencingToken()
	if err != nil || t2 <= t1 {
		t.Fatalf("new holder's token %d (%v), want above %d", t2, err, t1)
	}
	if err := g1.Err(); !errors.Is(err, holdfast.ErrLeaseLost) {
		t.Fatalf("old guard recovered after etcd came back: %v", err)
	}
	var fence holdfast.Fence
	if err := fence.Admit(t2); err != nil {
		t.Fatal(err)
	}
	if err := fence.Admit(t1); !errors.Is(err, holdfast.ErrStaleToken) {
		t.Fatalf("fence admitted the old token %d after %d: %v", t1, t2, err)
	}
	t.Logf("guard poisoned %s after etcd died (TTL %s); tokens %d then %d", poisonedAfter.Round(time.Millisecond), ttl, t1, t2)
}
