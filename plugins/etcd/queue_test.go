package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// TestFairQueue: the store decides the head. A caller with no entry cannot
// take a free key while anyone is queued; only the head's Acquire wins (and
// leaves the queue in the same step); a waiter's WaitTurn returns when the
// entry before it goes, and false once its own entry is gone.
func TestFairQueue(t *testing.T) {
	b := open(t, requireEtcd(t), nil)
	info, err := b.Info(ctxT(t))
	if err != nil || !info.Fair {
		t.Fatalf("info = %+v, %v; want fair", info, err)
	}
	ctx := ctxT(t)
	key := "fair-" + token()
	a, c := "a-"+token(), "c-"+token()
	if err := b.Enqueue(ctx, key, a); err != nil {
		t.Fatal(err)
	}
	if err := b.Enqueue(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	try := func(waiter string) backend.AcquireResult {
		t.Helper()
		res, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: token(), TTL: ttl, Holder: "h", Stamp: stampAt(time.Now().UnixNano(), 0), WaiterID: waiter})
		if err != nil {
			t.Fatalf("acquire as %q: %v", waiter, err)
		}
		return res
	}
	if res := try(""); res.Acquired {
		t.Fatal("a caller with no entry took a free key ahead of the queue")
	}
	if res := try(c); res.Acquired {
		t.Fatal("the second waiter took the key ahead of the head")
	}
	if ok, err := b.WaitTurn(ctx, key, a); err != nil || !ok {
		t.Fatalf("head's WaitTurn = %v, %v; want true", ok, err)
	}

	// c waits for a's entry to go.
	turn := make(chan error, 1)
	go func() {
		ok, err := b.WaitTurn(ctx, key, c)
		if err == nil && !ok {
			err = context.Canceled
		}
		turn <- err
	}()
	select {
	case err := <-turn:
		t.Fatalf("second waiter's turn came while the head is queued (err %v)", err)
	case <-time.After(200 * time.Millisecond): // proving a non-event: bounded
	}
	start := time.Now()
	res := try(a)
	if !res.Acquired {
		t.Fatalf("the head did not acquire a free key: %+v", res)
	}
	select {
	case err := <-turn:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the next waiter's turn came %v after the head's acquire began", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the second waiter's turn never came")
	}
	if res := try(c); res.Acquired {
		t.Fatal("acquired a held key")
	}
	if err := b.Dequeue(ctx, key, c); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.WaitTurn(ctx, key, c); err != nil || ok {
		t.Fatalf("WaitTurn after Dequeue = %v, %v; want false", ok, err)
	}
	if res := try(c); res.Acquired {
		t.Fatal("a dequeued waiter acquired")
	}
}

// TestWaitTurnSeesAReusedNameAsGone: the engine reuses the waiter ID of a
// waiter that left. When the entry a waiter waits behind goes and its name
// is queued again (now behind the waiter) between WaitTurn's read and its
// watch, WaitTurn tells the new entry from the old one by its create
// revision and answers the turn, instead of waiting for the new entry,
// which waits for it.
func TestWaitTurnSeesAReusedNameAsGone(t *testing.T) {
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	key := "reused-" + token()
	a, c := "a-"+token(), "c-"+token()
	for _, w := range []string{a, c} {
		if err := b.Enqueue(ctx, key, w); err != nil {
			t.Fatal(err)
		}
	}
	var requeued bool
	b.AfterPredecessor(func(k, _ string) {
		if k != key || requeued {
			return
		}
		requeued = true
		if err := b.Dequeue(ctx, key, a); err != nil {
			t.Error(err)
		}
		if err := b.Enqueue(ctx, key, a); err != nil {
			t.Error(err)
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ok, err := b.WaitTurn(wctx, key, c)
	if !requeued {
		t.Fatal("WaitTurn read no predecessor")
	}
	if err != nil || !ok {
		t.Fatalf("WaitTurn = %v, %v; want the turn: the entry waited behind has gone, its name is a later waiter's", ok, err)
	}
}
