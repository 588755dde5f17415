package scaleout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// TestFIFOAcrossServers: waiters queued in a known order across three
// servers over one etcd acquire in exactly that order; a waiter that gives
// up leaves the queue and the next one is served; a try-once caller never
// jumps the queue; and each handoff is event-driven (well under etcd's
// 100ms unsynced-watch loop, which is what concurrency.Mutex waits on).
func TestFIFOAcrossServers(t *testing.T) {
	endpoints := etcdEndpoints(t)
	prefix := fmt.Sprintf("/holdfast-fifo/%d/", time.Now().UnixNano())
	clients, _ := startServersAt(t, 3, endpoints, prefix)
	for i, c := range clients {
		info, err := c.GetServerInfo(t.Context(), &lockv1.GetServerInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !info.GetBackend().GetFair() {
			t.Fatalf("server %d: backend fair=false, want true", i)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	const key = "fifo/hot"
	queue := prefix + "queue/" + key + "\x00"
	queued := func() int64 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("read the queue: %v", err)
		}
		return resp.Count
	}
	ttl := durationpb.New(30 * time.Second)

	first, err := clients[0].Acquire(t.Context(), &lockv1.AcquireRequest{Key: key, Ttl: ttl, Holder: "first"})
	if err != nil || !first.GetAcquired() {
		t.Fatalf("first acquire: %v %v", first, err)
	}

	// Six waiters, round-robin over the servers, each queued in etcd before
	// the next one starts.
	const n = 6
	const quitter = 3 // gives up before its turn
	type grant struct {
		who      int
		at       time.Time // acquired (seen by the caller)
		released time.Time // its release was sent
	}
	var (
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
		errs   = make(chan error, n)
	)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(t.Context())
		cancels[i] = cancel
		c := clients[i%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: ttl, Wait: durationpb.New(60 * time.Second), Holder: fmt.Sprintf("w%d", i)})
			if i == quitter {
				if err == nil && resp.GetAcquired() {
					errs <- fmt.Errorf("waiter %d gave up but was served", i)
				}
				return
			}
			if err != nil || !resp.GetAcquired() {
				errs <- fmt.Errorf("waiter %d: acquired=%v err=%w", i, resp.GetAcquired(), err)
				return
			}
			at := time.Now()
			releasing := time.Now()
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer rcancel()
			rel, err := c.Release(rctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()})
			if err != nil || !rel.GetReleased() {
				errs <- fmt.Errorf("waiter %d release: %v %w", i, rel, err)
			}
			mu.Lock()
			grants = append(grants, grant{who: i, at: at, released: releasing})
			mu.Unlock()
		}()
		waitUntil(t, 10*time.Second, func() bool { return queued() == int64(i+1) })
	}

	// A try-once caller on another server does not jump the queue, even
	// though it asks a server with no local waiter for the key queued first.
	try, err := clients[1].Acquire(t.Context(), &lockv1.AcquireRequest{Key: key, Ttl: ttl, Holder: "barger"})
	if err != nil || try.GetAcquired() {
		t.Fatalf("try-once while waiters are queued: acquired=%v err=%v", try.GetAcquired(), err)
	}

	// The quitter gives up: its entry leaves the queue at once.
	cancels[quitter]()
	waitUntil(t, 10*time.Second, func() bool { return queued() == n-1 })

	released := time.Now()
	rel, err := clients[0].Release(t.Context(), &lockv1.ReleaseRequest{Key: key, OwnerToken: first.GetLease().GetOwnerToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("release first: %v %v", rel, err)
	}
	wg.Wait()
	for _, c := range cancels {
		c()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	// In the order the waiters got the lock: each appends its grant only
	// after its release returned, by when the next one may have been served
	// and appended already. A waiter gets the lock only after the one before
	// it released, so the times it saw the grant are in serving order.
	slices.SortFunc(grants, func(a, b grant) int { return a.at.Compare(b.at) })
	order := make([]int, len(grants))
	var handoffs []time.Duration
	for i, g := range grants {
		order[i] = g.who
		prev := released
		if i > 0 {
			prev = grants[i-1].released
		}
		handoffs = append(handoffs, g.at.Sub(prev))
	}
	if want := []int{0, 1, 2, 4, 5}; !slices.Equal(order, want) {
		t.Fatalf("served in order %v, want %v (the queue order, without the waiter that gave up)", order, want)
	}
	if q := queued(); q != 0 {
		t.Errorf("%d entries left in the queue, want 0", q)
	}
	sorted := slices.Clone(handoffs)
	slices.Sort(sorted)
	t.Logf("handoffs across servers (release sent -> next waiter acquired): %v; median %v", handoffs, sorted[len(sorted)/2])
	// Event-driven: a median handoff well under etcd's 100ms resync loop.
	if med := sorted[len(sorted)/2]; med >= 90*time.Millisecond {
		t.Errorf("median handoff %v, want well under 100ms (event-driven)", med)
	}
}
