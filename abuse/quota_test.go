package abuse

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// flood acquires fresh keys under prefix from workers goroutines until
// every worker has been refused once, or attempts run out; it returns how
// many were acquired and the first refusal.
func flood(ctx context.Context, c lockv1connect.LockServiceClient, prefix string, workers, attempts int) (int, error) {
	var (
		next, got atomic.Int64
		mu        sync.Mutex
		refusal   error
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(attempts) && ctx.Err() == nil; n = next.Add(1) {
				r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: fmt.Sprintf("%s%06d", prefix, n), Ttl: durationpb.New(time.Hour), Holder: strings.Repeat("h", 256)})
				if err != nil {
					mu.Lock()
					if refusal == nil {
						refusal = err
					}
					mu.Unlock()
					return
				}
				if r.GetAcquired() {
					got.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(got.Load()), refusal
}

// Issue 13, item 2: no bound on held locks. A token holds at most its
// max_locks, the server at most --max-locks; a normal client keeps its
// latency while the flooder is refused.
func TestLockQuotas(t *testing.T) {
	attacker := token{name: "attacker", prefixes: []string{"x/"}, quota: []string{"max_locks: 200"}}
	filler := token{name: "filler", prefixes: []string{"f/"}, quota: []string{"max_locks: 900"}}
	normal := token{name: "normal", prefixes: []string{"probe/"}}
	s := serve(t, append([]string{"--auth-tokens", tokensFile(t, attacker, filler, normal)}, hardened("--max-locks", "1000")...)...)
	ctx := t.Context()
	p := newProbe(t, s, clientOpts{bearer: normal.secret()}, "probe/")
	idle := p.p50(t)

	ac := client(t, s, clientOpts{bearer: attacker.secret(), from: "127.0.0.2"})
	got, refusal := flood(ctx, ac, "x/", 16, 3000)
	expect(t, got == 200, "the attacker holds %d locks, want its max_locks 200", got)
	expect(t, code(refusal) == "resource_exhausted" && strings.Contains(refusal.Error(), "its max_locks"),
		"the attacker's refusal: %v, want resource_exhausted naming its max_locks", refusal)

	// The attacker keeps trying while the normal client works.
	stop := during(t, func(ctx context.Context) {
		loop(ctx, 8, func(ctx context.Context, w int) {
			_, _ = ac.Acquire(ctx, &lockv1.AcquireRequest{Key: fmt.Sprintf("x/again-%d", w), Ttl: durationpb.New(time.Hour)})
		})
	})
	attacked := p.p50(t)
	stop()
	unaffected(t, "2 lock flood (max_locks)", idle, attacked, 10)

	// The server's own bound: the filler gets what is left of 1000.
	fc := client(t, s, clientOpts{bearer: filler.secret(), from: "127.0.0.3"})
	got, refusal = flood(ctx, fc, "f/", 8, 3000)
	expect(t, got == 800, "the filler holds %d locks, want the 800 left of --max-locks 1000", got)
	expect(t, code(refusal) == "resource_exhausted" && strings.Contains(refusal.Error(), "--max-locks"),
		"the filler's refusal: %v, want resource_exhausted naming --max-locks", refusal)
}

// Issue 13, item 6: the waiter bound counts per client, so a client that
// opens more HTTP/2 connections gets no more waiters; another client still
// queues.
func TestWaitersCountPerClient(t *testing.T) {
	limit := []string{"--max-waiters-per-client", "30"}
	if baseline {
		limit = []string{"--max-waiters-per-connection", "30"}
	}
	s := serve(t, limit...)
	ctx := t.Context()
	holder := client(t, s, clientOpts{from: "127.0.0.3"})
	if r, err := holder.Acquire(ctx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Hour)}); err != nil || !r.GetAcquired() {
		t.Fatalf("holder: %v %v", r, err)
	}
	p := newProbe(t, s, clientOpts{}, "probe/")
	idle := p.p50(t)

	// One attacker (127.0.0.2) on three connections, 30 waiters each.
	var refused atomic.Int64
	waitCtx, stopWaiting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopWaiting(); wg.Wait() }()
	for range 3 {
		c := client(t, s, clientOpts{from: "127.0.0.2"})
		for range 30 {
			wg.Go(func() {
				_, err := c.Acquire(waitCtx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Hour), Wait: durationpb.New(time.Minute)})
				if code(err) == "resource_exhausted" {
					refused.Add(1)
				}
			})
		}
	}
	waiters := func() int {
		ins, err := holder.Inspect(ctx, &lockv1.InspectRequest{Key: "busy"})
		if err != nil {
			t.Fatal(err)
		}
		return int(ins.GetState().GetWaiters())
	}
	if !eventually(20*time.Second, func() bool { return waiters()+int(refused.Load()) == 90 }) {
		t.Fatalf("the attacker's 90 waiters: %d queued, %d refused", waiters(), refused.Load())
	}
	expect(t, waiters() == 30 && refused.Load() == 60, "one client on three connections queued %d waiters (%d refused), want 30 (--max-waiters-per-client)", waiters(), refused.Load())

	attacked := p.p50(t)
	// Another client still waits.
	r, err := p.c.Acquire(ctx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Hour), Wait: durationpb.New(100 * time.Millisecond)})
	if err != nil || r.GetAcquired() {
		t.Fatalf("another client's waiter: %v %v, want it queued and timed out", r, err)
	}
	unaffected(t, "6 waiters over several HTTP/2 connections", idle, attacked, 10)
}
