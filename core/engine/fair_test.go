package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

var fair = mode{name: "fair", fair: true}

// TestFairFIFOAcrossServers: two engines (two servers) share one fair
// store; waiters arrive alternately at each, and acquire in arrival order,
// across both.
func TestFairFIFOAcrossServers(t *testing.T) {
	a, b := fair.newEngine(t, engine.Config{})
	servers := []*engine.Engine{a, b.newEngine(t, engine.Config{})}
	holder := mustAcquire(t, a, "k", time.Minute)
	const n = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		e := servers[i%2]
		wg.Go(func() {
			resp, err := e.Acquire(context.Background(), acq("k", time.Minute, 10*time.Second))
			if err != nil || !resp.GetAcquired() {
				t.Errorf("waiter %d: %v %v", i, resp, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			release(t, e, resp.GetLease())
		})
		// Arrival order: the next waiter starts once this one is in the
		// store's queue.
		eventually(t, "waiter queued in the store", func() bool { return len(b.fair.Queue("k")) == i+1 })
	}
	release(t, a, holder)
	wg.Wait()
	if len(order) != n {
		t.Fatalf("only %d of %d waiters acquired", len(order), n)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want 0..%d across both servers", order, n-1)
		}
	}
	if q := b.fair.Queue("k"); len(q) != 0 {
		t.Fatalf("entries left in the store's queue: %v", q)
	}
}

// TestFairQueueBlocksNewcomersAndRunsOut: a waiter queued in the store on
// some other server (here, an entry that never leaves: a ghost) has the
// turn, so a free lock is not taken: a try-once answers acquired=false, and
// a waiting acquire, blocked on its turn, answers acquired=false when its
// wait runs out (not an error) and leaves the store's queue. Once the entry
// goes, the next waiter acquires at once.
func TestFairQueueBlocksNewcomersAndRunsOut(t *testing.T) {
	e, b := fair.newEngine(t, engine.Config{})
	ctx := context.Background()
	if err := b.fair.Enqueue(ctx, "k", "ghost"); err != nil {
		t.Fatal(err)
	}
	if resp, err := e.Acquire(ctx, acq("k", time.Minute, 0)); err != nil || resp.GetAcquired() {
		t.Fatalf("try-once past a queued waiter: %v %v", resp, err)
	}
	const wait = 200 * time.Millisecond
	start := time.Now()
	resp, err := e.Acquire(ctx, acq("k", time.Minute, wait))
	took := time.Since(start)
	if err != nil || resp.GetAcquired() {
		t.Fatalf("a wait behind the store's head: %v %v, want acquired=false", resp, err)
	}
	if took < wait || took > wait+lateSlack {
		t.Fatalf("a wait of %s took %s (allowed: %s more)", wait, took, lateSlack)
	}
	if b.waitTurns.Load() == 0 {
		t.Fatal("the waiter never asked the store for its turn")
	}
	if q := b.fair.Queue("k"); len(q) != 1 || q[0] != "ghost" {
		t.Fatalf("store queue %v after the wait ran out, want only the ghost", q)
	}
	if err := b.fair.Dequeue(ctx, "k", "ghost"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	resp, err = e.Acquire(ctx, acq("k", time.Minute, 5*time.Second))
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("after the ghost left: %v %v", resp, err)
	}
	if took := time.Since(start); took > lateSlack {
		t.Fatalf("acquiring a free key with an empty queue took %s", took)
	}
}

// TestFairLostEntryQueuesAgain: when the store loses a waiter's entry (its
// session lapsed, the plugin restarted), WaitTurn answers false, and the
// waiter queues again and gets the lock, within its wait.
func TestFairLostEntryQueuesAgain(t *testing.T) {
	e, b := fair.newEngine(t, engine.Config{})
	ctx := context.Background()
	if err := b.fair.Enqueue(ctx, "k", "ghost"); err != nil {
		t.Fatal(err)
	}
	got := make(chan *lockv1.AcquireResponse, 1)
	go func() {
		resp, err := e.Acquire(ctx, acq("k", time.Minute, 10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	eventually(t, "the waiter waits for its turn", func() bool { return b.waitTurns.Load() >= 1 })
	b.fair.DropQueue("k")
	resp := <-got
	if !resp.GetAcquired() {
		t.Fatalf("the waiter whose entry was lost did not acquire: %v", resp)
	}
	if b.waitTurns.Load() < 2 {
		t.Fatal("the waiter did not ask for its turn again after queueing again")
	}
	if q := b.fair.Queue("k"); len(q) != 0 {
		t.Fatalf("store queue %v, want empty", q)
	}
}

// TestFairEnqueueFailureFailsTheAcquire: a waiter the store cannot queue
// fails at once with unavailable (queueing later would put it behind this
// server's later waiters, which wait for it), and leaves this server's
// queue.
func TestFairEnqueueFailureFailsTheAcquire(t *testing.T) {
	e, b := fair.newEngine(t, engine.Config{})
	mustAcquire(t, e, "k", time.Minute)
	down := errors.Join(backend.ErrUnavailable, errors.New("store down"))
	b.enqueueErr.Store(&down)
	_, err := e.Acquire(context.Background(), acq("k", time.Minute, 5*time.Second))
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if e.Waiters("k") != 0 {
		t.Fatal("the waiter stayed in this server's queue")
	}
}

// TestFairEnqueueOfUnknownOutcomeIsTakenBack: an Enqueue that fails may still
// have queued the entry (the store did it, the answer was lost). The waiter
// fails, and takes its entry back, so that the entry does not hold the key
// for every later caller: a free key is then free for a newcomer.
func TestFairEnqueueOfUnknownOutcomeIsTakenBack(t *testing.T) {
	e, b := fair.newEngine(t, engine.Config{})
	holder := mustAcquire(t, e, "k", time.Minute)
	lost := errors.Join(backend.ErrUnavailable, errors.New("the answer was lost"))
	b.enqueueLost.Store(&lost)
	_, err := e.Acquire(context.Background(), acq("k", time.Minute, 5*time.Second))
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	b.enqueueLost.Store(nil)
	if q := b.fair.Queue("k"); len(q) != 0 {
		t.Fatalf("the failed waiter's entry stayed in the store's queue: %v", q)
	}
	release(t, e, holder)
	mustAcquire(t, e, "k", time.Minute)
}

// TestFairWaiterIDsAreReused: a waiter whose entry is gone (it won, or it
// left and its Dequeue went through) gives its ID to the next waiter, so
// the names under a key's queue in the store stay as few as the waiters at
// once: etcd ranges over every name it ever deleted until compaction.
func TestFairWaiterIDsAreReused(t *testing.T) {
	e, b := fair.newEngine(t, engine.Config{})
	holder := mustAcquire(t, e, "k", time.Minute)
	// Handoffs, one waiter at a time, each won.
	const handoffs = 10
	for range handoffs {
		got := make(chan *lockv1.AcquireResponse, 1)
		go func() {
			resp, err := e.Acquire(context.Background(), acq("k", time.Minute, 10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- resp
		}()
		eventually(t, "waiter queued", func() bool { return e.Waiters("k") == 1 })
		release(t, e, holder)
		resp := <-got
		if !resp.GetAcquired() {
			t.Fatalf("the waiter did not get the released key: %v", resp)
		}
		holder = resp.GetLease()
	}
	// A waiter that gives up (its wait ends) and leaves the queue.
	if resp, err := e.Acquire(context.Background(), acq("k", time.Minute, 50*time.Millisecond)); err != nil || resp.GetAcquired() {
		t.Fatalf("a waiter on a held key: %v %v, want not acquired", resp, err)
	}
	ids := b.enqueuedIDs()
	if len(ids) != handoffs+1 {
		t.Fatalf("%d Enqueue calls, want %d", len(ids), handoffs+1)
	}
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("waiter IDs %v: one waiter at a time, want one ID reused", ids)
		}
	}
}

// TestFairWaiterIDOfAFailedEnqueueIsNotReused: an ID whose Enqueue had an
// unknown outcome may still name an entry in the store (or one that comes
// back); a later waiter queued under it would take that entry's place, so
// it is never handed out again.
func TestFairWaiterIDOfAFailedEnqueueIsNotReused(t *testing.T) {
	e, b := fair.newEngine(t, engine.Config{})
	mustAcquire(t, e, "k", time.Minute)
	lost := errors.Join(backend.ErrUnavailable, errors.New("the answer was lost"))
	b.enqueueLost.Store(&lost)
	if _, err := e.Acquire(context.Background(), acq("k", time.Minute, 5*time.Second)); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	b.enqueueLost.Store(nil)
	for range 3 {
		if resp, err := e.Acquire(context.Background(), acq("k", time.Minute, 20*time.Millisecond)); err != nil || resp.GetAcquired() {
			t.Fatalf("a waiter on a held key: %v %v, want not acquired", resp, err)
		}
	}
	ids := b.enqueuedIDs()
	if len(ids) != 4 {
		t.Fatalf("%d Enqueue calls, want 4", len(ids))
	}
	for _, id := range ids[1:] {
		if id == ids[0] {
			t.Fatalf("waiter IDs %v: the ID of the failed Enqueue was handed out again", ids)
		}
	}
	if ids[1] != ids[2] || ids[2] != ids[3] {
		t.Fatalf("waiter IDs %v: the later waiters, one at a time, should share one ID", ids)
	}
}
