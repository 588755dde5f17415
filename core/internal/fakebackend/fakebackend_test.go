package fakebackend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// The fake keeps the promises the engine's tests rely on.
func TestPromises(t *testing.T) {
	ctx := context.Background()
	b := New()
	defer b.Close()
	events := make(chan backend.Event, 16)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Watch(wctx, "", func(ev backend.Event) error { events <- ev; return nil }) }()
	next := func(want backend.EventType) backend.Event {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Type != want {
				t.Fatalf("event %s, want %s", ev.Type, want)
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", want)
		}
		return backend.Event{}
	}
	next(backend.EventSynced)

	first, _ := b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "a", TTL: 20 * time.Millisecond})
	if !first.Acquired {
		t.Fatal("a free key was not acquired")
	}
	if res, _ := b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "b", TTL: time.Minute}); res.Acquired || res.Record.FencingToken != first.Record.FencingToken {
		t.Fatalf("a held key: %+v", res)
	}
	next(backend.EventAcquired)
	next(backend.EventExpired) // from the timer, with nobody asking
	second, _ := b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "b", TTL: time.Minute})
	if !second.Acquired || second.Record.FencingToken <= first.Record.FencingToken || !second.Record.Stamp.After(first.Record.Stamp) {
		t.Fatalf("takeover after expiry: %+v after %+v", second, first)
	}
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "a"}); ok {
		t.Fatal("a stale token released the lock")
	}
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "b"}); !ok {
		t.Fatal("the holder could not release")
	}
	next(backend.EventAcquired)
	next(backend.EventReleased)
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled watch ended with %v", err)
	}
}

// A fair fake grants a free lock only to the head of its queue.
func TestFairQueue(t *testing.T) {
	ctx := context.Background()
	f := NewFair()
	defer f.Close()
	for _, id := range []string{"w1", "w2"} {
		if err := f.Enqueue(ctx, "k", id); err != nil {
			t.Fatal(err)
		}
	}
	req := func(id string) backend.AcquireRequest {
		return backend.AcquireRequest{Key: "k", OwnerToken: "t-" + id, TTL: time.Minute, WaiterID: id}
	}
	if res, _ := f.Acquire(ctx, req("")); res.Acquired {
		t.Fatal("a newcomer jumped the queue")
	}
	if res, _ := f.Acquire(ctx, req("w2")); res.Acquired {
		t.Fatal("the second waiter jumped the first")
	}
	turn := make(chan bool, 1)
	go func() { ok, _ := f.WaitTurn(ctx, "k", "w2"); turn <- ok }()
	if res, _ := f.Acquire(ctx, req("w1")); !res.Acquired {
		t.Fatal("the head did not get a free lock")
	}
	if ok := <-turn; !ok {
		t.Fatal("w2 was not told its turn once w1 left the queue")
	}
	if q := f.Queue("k"); len(q) != 1 || q[0] != "w2" {
		t.Fatalf("queue %v, want [w2]", q)
	}
	f.DropQueue("k")
	if ok, _ := f.WaitTurn(ctx, "k", "w2"); ok {
		t.Fatal("WaitTurn of a dropped entry answered true")
	}
}
