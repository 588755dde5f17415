package scaleout_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// TestSemaphoreWakeAcrossServers: a semaphore's waiter on one server (in
// etcd's fair queue) is woken by a permit released through the other: the
// holders' TTL is a minute, so only the release's event can wake it within
// its wait.
func TestSemaphoreWakeAcrossServers(t *testing.T) {
	clients, _ := startServers(t, 2, etcdEndpoints(t))
	c1, c2 := clients[0], clients[1]
	ctx := context.Background()
	sem := func(wait time.Duration) *lockv1.AcquireRequest {
		return &lockv1.AcquireRequest{Key: "sem", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(wait),
			Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 2}
	}
	var held []*lockv1.AcquireResponse
	for range 2 {
		r, err := c1.Acquire(ctx, sem(0))
		if err != nil || !r.GetAcquired() {
			t.Fatalf("a permit on server 1: %v %v", r, err)
		}
		held = append(held, r)
	}
	type result struct {
		res *lockv1.AcquireResponse
		err error
		at  time.Time
	}
	waiter := make(chan result, 1)
	go func() {
		r, err := c2.Acquire(ctx, sem(20*time.Second))
		waiter <- result{r, err, time.Now()}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) { // poll until the waiter is queued
		insp, err := c2.Inspect(ctx, &lockv1.InspectRequest{Key: "sem"})
		if err == nil && insp.GetState().GetWaiters() > 0 {
			if insp.GetState().GetPermitsInUse() != 2 || len(insp.GetState().GetHolders()) != 2 {
				t.Fatalf("server 2 sees %v, want both permits held", insp.GetState())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter never queued on server 2: %v %v", insp, err)
		}
	}
	releasedAt := time.Now()
	if rel, err := c1.Release(ctx, &lockv1.ReleaseRequest{Key: "sem", OwnerToken: held[0].GetLease().GetOwnerToken()}); err != nil || !rel.GetReleased() {
		t.Fatalf("release of a permit: %v %v", rel, err)
	}
	w := <-waiter
	if w.err != nil || !w.res.GetAcquired() {
		t.Fatalf("waiter: %v %v", w.res, w.err)
	}
	t.Logf("the semaphore's waiter on server 2 was granted %s after a permit was released on server 1", w.at.Sub(releasedAt))
	if f := w.res.GetLease().GetFencingToken(); f <= held[1].GetLease().GetFencingToken() {
		t.Errorf("the waiter's fencing token %d is not above the earlier grants' (%d)", f, held[1].GetLease().GetFencingToken())
	}
	insp, err := c1.Inspect(ctx, &lockv1.InspectRequest{Key: "sem"})
	if err != nil || insp.GetState().GetPermitsInUse() != 2 || len(insp.GetState().GetHolders()) != 2 {
		t.Fatalf("after the wake, server 1 sees %v %v, want two holders", insp, err)
	}
}
