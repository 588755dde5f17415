package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/etcd"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// Acquire+Release of distinct keys (uncontended), at concurrency 1 and 32:
// through holdfast (client -> server -> plugin -> etcd), on the backend
// directly (what the plugin does, without the two hops), and with etcd's own
// concurrency.Mutex on a new session per lock (its own lease, like a
// holdfast lock) and on one session for every lock (the Mutex's own two
// writes: the floor of the backend-direct row). `make bench` runs the same comparison in bench/; this one
// separates the plugin's etcd round trips from the hops.
//
//	go test -run '^$' -bench AcquireRelease -benchtime 3s ./plugins/etcd/
func BenchmarkAcquireRelease(b *testing.B) {
	eps := requireEtcd(b)
	run := fmt.Sprintf("bench-%d", time.Now().UnixNano())

	be := open(b, eps, nil)
	plugin, err := harness.Binary(b.Context(), b.TempDir(), "holdfast-backend-etcd")
	if err != nil {
		b.Fatal(err)
	}
	srv := harness.StartT(b, harness.Options{Backend: plugin, BackendOptions: map[string]string{"endpoints": eps, "prefix": testPrefix(b)}})
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	b.Cleanup(transport.CloseIdleConnections)
	hf := lockv1connect.NewLockServiceClient(&http.Client{Transport: transport}, srv.URL)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{eps}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })

	ttl := 10 * time.Second
	// One session for every lock of the reused-session row: its lease is
	// granted once and kept alive in the background, so the row is the
	// Mutex's own two writes, the floor of an Acquire+Release on etcd.
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { session.Close() })
	works := []struct {
		name string
		op   func(ctx context.Context, key string) error
	}{
		{"holdfast", func(ctx context.Context, key string) error {
			resp, err := hf.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl)})
			if err != nil {
				return err
			}
			if !resp.GetAcquired() {
				return fmt.Errorf("%s not acquired", key)
			}
			rel, err := hf.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()})
			if err == nil && !rel.GetReleased() {
				err = fmt.Errorf("%s not released", key)
			}
			return err
		}},
		{"backend-direct", func(ctx context.Context, key string) error {
			tok := token()
			res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl})
			if err != nil {
				return err
			}
			if !res.Acquired {
				return fmt.Errorf("%s not acquired", key)
			}
			ok, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok})
			if err == nil && !ok {
				err = fmt.Errorf("%s not released", key)
			}
			return err
		}},
		{"etcd-mutex-session-per-lock", func(ctx context.Context, key string) error {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(ctx))
			if err != nil {
				return err
			}
			defer s.Close()
			m := concurrency.NewMutex(s, "/"+run+"/mutex/"+key)
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
		{"etcd-mutex-session-reused", func(ctx context.Context, key string) error {
			m := concurrency.NewMutex(session, "/"+run+"/mutex-reused/"+key)
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
	}
	for _, conc := range []int{1, 32} {
		for _, w := range works {
			b.Run(fmt.Sprintf("%s/c=%d", w.name, conc), func(b *testing.B) {
				runConcurrently(b, conc, func(ctx context.Context, worker int) error {
					return w.op(ctx, fmt.Sprintf("%s/%s/%d", run, w.name, worker))
				})
			})
		}
	}
}

// runConcurrently shares b.N operations among conc workers and reports
// throughput and latency percentiles.
func runConcurrently(b *testing.B, conc int, op func(ctx context.Context, worker int) error) {
	ctx := b.Context()
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				err := op(ctx, w)
				mine = append(mine, time.Since(t0))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkHotKeyGrants: 32 workers on one key, each a try (wait 0) and,
// when granted, a release: a mutex (limit 1) against a semaphore of limit
// 10 on the same backend. ops/s and the latency percentiles count attempts
// (a granted one includes its release); grants/s counts the granted ones.
//
//	go test -run '^$' -bench HotKeyGrants -benchtime 3s ./plugins/etcd
func BenchmarkHotKeyGrants(b *testing.B) {
	be := open(b, requireEtcd(b), nil)
	for _, c := range []struct {
		name  string
		kind  backend.Kind
		limit int
	}{{"mutex", backend.KindMutex, 1}, {"semaphore-limit-10", backend.KindSemaphore, 10}} {
		b.Run(c.name+"/c=32", func(b *testing.B) {
			key := fmt.Sprintf("hot/%s/%d", c.name, time.Now().UnixNano())
			var grants atomic.Int64
			start := time.Now()
			runConcurrently(b, 32, func(ctx context.Context, _ int) error {
				tok := token()
				res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second, Stamp: clock.Now(),
					Kind: c.kind, Limit: c.limit, Permits: 1})
				if err != nil || !res.Acquired {
					return err
				}
				grants.Add(1)
				ok, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
				if err == nil && !ok {
					err = fmt.Errorf("%s: a granted lease was not released", key)
				}
				return err
			})
			b.ReportMetric(float64(grants.Load())/time.Since(start).Seconds(), "grants/s")
		})
	}
}

// BenchmarkHandoff: one hand-off of a held key to the head of its fair
// queue, on the backend directly (no server, no plugin hop): the holder's
// Release, the release event reaching the waiter through Watch (as it
// reaches the engine), and the waiter's Acquire as that queued waiter. The
// waiter queued before the timed part (in the hot-key loop it queued several
// hand-offs earlier). ns/op and p50-µs are the hand-off; release-p50-µs is
// the Release alone, event-p50-µs the time from the Release's start to the
// release event, acquire-p50-µs the queue head's Acquire alone: a hand-off
// is the Release's write and the Acquire's in series, with the watch
// between them.
//
//	go test -run '^$' -bench Handoff -benchtime 200x ./plugins/etcd
func BenchmarkHandoff(b *testing.B) {
	be := open(b, requireEtcd(b), nil)
	ctx := b.Context()
	key := fmt.Sprintf("handoff/%d", time.Now().UnixNano())
	const ttl = 10 * time.Second

	released := make(chan struct{}, 1)
	synced := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchErr error
	watchEnded := make(chan struct{})
	go func() {
		defer close(watchEnded)
		watchErr = be.Watch(watchCtx, key, func(ev backend.Event) error {
			switch {
			case ev.Type == backend.EventSynced:
				close(synced)
			case ev.Type == backend.EventReleased && ev.Record.Key == key:
				released <- struct{}{}
			}
			return nil
		})
	}()
	b.Cleanup(func() {
		stopWatch()
		<-watchEnded
		if watchErr != nil && !errors.Is(watchErr, context.Canceled) {
			b.Errorf("watch: %v", watchErr)
		}
	})
	wait := func(ch <-chan struct{}) {
		select {
		case <-ch:
		case <-watchEnded:
			b.Fatalf("watch ended: %v", watchErr)
		}
	}
	wait(synced)

	holder := token()
	res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: holder, TTL: ttl, Stamp: clock.Now()})
	if err != nil || !res.Acquired {
		b.Fatalf("first acquire: %v %+v", err, res)
	}
	fence := res.Record.FencingToken
	var handoffs, releases, events, acquires []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		// One name for every waiter, as the engine reuses a gone waiter's
		// (core/engine/waitid.go): a new name each time would leave one
		// deleted entry per handoff in etcd's index, for every later
		// acquire to range over.
		const waiter = "w"
		if err := be.Enqueue(ctx, key, waiter); err != nil {
			b.Fatal(err)
		}
		next := token()
		b.StartTimer()

		t0 := time.Now()
		ok, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: holder, Stamp: clock.Now()})
		if err != nil || !ok {
			b.Fatalf("release %d: %v %v", i, ok, err)
		}
		releases = append(releases, time.Since(t0))
		wait(released)
		events = append(events, time.Since(t0))
		t1 := time.Now()
		res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: next, TTL: ttl, Stamp: clock.Now(), WaiterID: waiter})
		if err != nil || !res.Acquired {
			b.Fatalf("hand-off %d: the queue head was refused: %v %+v", i, err, res)
		}
		acquires = append(acquires, time.Since(t1))
		handoffs = append(handoffs, time.Since(t0))
		if res.Record.FencingToken <= fence {
			b.Fatalf("hand-off %d: fencing token %d after %d", i, res.Record.FencingToken, fence)
		}
		holder, fence = next, res.Record.FencingToken
	}
	b.StopTimer()
	if _, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: holder, Stamp: clock.Now()}); err != nil {
		b.Fatal(err)
	}
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds())
	}
	b.ReportMetric(p50(handoffs), "p50-µs")
	b.ReportMetric(p50(releases), "release-p50-µs")
	b.ReportMetric(p50(events), "event-p50-µs")
	b.ReportMetric(p50(acquires), "acquire-p50-µs")
}

// BenchmarkRenewalBesideTxn: an uncontended acquire's two etcd calls, a
// transaction that puts a key on a lease and that lease's renewal sent
// beside it, as Acquire sends them (locks.go, renew.go): the transaction
// alone, beside clientv3's KeepAliveOnce (a new gRPC stream per renewal),
// and beside the backend's renewal on a reused stream. ns/op and p50-µs
// time both calls; txn-p50-µs the transaction alone.
//
//	go test -run '^$' -bench RenewalBesideTxn -benchmem -count 6 ./plugins/etcd
func BenchmarkRenewalBesideTxn(b *testing.B) {
	eps := requireEtcd(b)
	be := open(b, eps, nil)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{eps}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	ctx := b.Context()
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		b.Fatal(err)
	}
	key := testPrefix(b) + "k"
	renewals := []struct {
		name  string
		renew func() error
	}{
		{"txn-alone", nil},
		{"beside-keepaliveonce", func() error {
			_, err := cli.KeepAliveOnce(ctx, lease.ID)
			return err
		}},
		{"beside-reused-stream", func() error {
			ttl, err := be.RenewOnce(ctx, int64(lease.ID))
			if err == nil && ttl <= 0 {
				err = fmt.Errorf("lease %x gone", lease.ID)
			}
			return err
		}},
	}
	for _, r := range renewals {
		b.Run(r.name, func(b *testing.B) {
			var both, txns []time.Duration
			for b.Loop() {
				t0 := time.Now()
				done := make(chan error, 1)
				if r.renew != nil {
					go func() { done <- r.renew() }()
				} else {
					done <- nil
				}
				if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
					Then(clientv3.OpPut(key, "x", clientv3.WithLease(lease.ID))).Commit(); err != nil {
					b.Fatal(err)
				}
				txns = append(txns, time.Since(t0))
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				both = append(both, time.Since(t0))
				b.StopTimer()
				if _, err := cli.Delete(ctx, key); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			p50 := func(ds []time.Duration) float64 {
				slices.Sort(ds)
				return float64(ds[len(ds)/2].Microseconds())
			}
			b.ReportMetric(p50(both), "p50-µs")
			b.ReportMetric(p50(txns), "txn-p50-µs")
		})
	}
}

// BenchmarkCountHeld: what the server's holdfast_locks_held gauge costs a
// scrape with 100,000 locks held (taken in batches under a prefix of the
// benchmark's own): Count (two count-only ranges) against the List walk it
// replaces (pages of engine.MaxPageSize, as the gauge listed them).
//
//	go test -run '^$' -bench CountHeld -benchtime 5x ./plugins/etcd
func BenchmarkCountHeld(b *testing.B) {
	const held = 100000
	be := open(b, requireEtcd(b), map[string]string{"call_timeout": "30s"})
	ctx := b.Context()
	for i := 0; i < held; i += 1000 {
		reqs := make([]backend.AcquireRequest, 0, 1000)
		for j := i; j < min(i+1000, held); j++ {
			reqs = append(reqs, backend.AcquireRequest{Key: fmt.Sprintf("held/%06d", j), OwnerToken: token(), TTL: 10 * time.Minute,
				Holder: "bench", Stamp: clock.Now()})
		}
		outs, err := be.AcquireBatch(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range outs {
			if o.Err != nil || !o.Value.Acquired {
				b.Fatalf("fill: %+v", o)
			}
		}
	}
	b.Run("Count", func(b *testing.B) {
		for b.Loop() {
			if n, err := be.Count(ctx); err != nil || n != held {
				b.Fatalf("Count = %d, %v; want %d", n, err, held)
			}
		}
	})
	b.Run("List", func(b *testing.B) {
		for b.Loop() {
			if n := listCount(b, be, engine.MaxPageSize); n != held {
				b.Fatalf("List counts %d, want %d", n, held)
			}
		}
	})
}

// BenchmarkHotKeyEngine: the bench's hot-key row (8 workers looping
// acquire-with-wait then release on one key, each call with a request id,
// as the SDKs send) on an engine in this process over the backend: no
// client RPC and no plugin hop, so what is left is the engine and etcd.
// It reports handoffs/s and, per handoff, the etcd calls the backend made
// (transactions, reads, puts, deletes, lease grants and renewals) and the
// two stages of a handoff: the holder's Release call, and from its return
// to the next holder's Acquire returning (the wake-up and its acquire).
//
//	go test -run '^$' -bench HotKeyEngine -benchtime 2000x ./plugins/etcd
func BenchmarkHotKeyEngine(b *testing.B) {
	var c rpcCounter
	c.take()
	ctx := b.Context()
	be, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": requireEtcd(b), "prefix": testPrefix(b)}, c.dialOptions()...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	e, err := engine.New(ctx, be, engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	const workers = 8
	key := fmt.Sprintf("hot/%d", time.Now().UnixNano())
	var (
		mu                     sync.Mutex
		last                   = -1
		handoffs               int
		relStart, relEnd       time.Time
		releases, wakes, total []time.Duration
		firstErr               error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.take()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				resp, err := e.Acquire(runCtx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(10 * time.Second),
					Wait: durationpb.New(10 * time.Second), RequestId: token()})
				if runCtx.Err() != nil {
					return
				}
				if err != nil || !resp.GetAcquired() {
					if err == nil {
						err = fmt.Errorf("not acquired: %v", resp)
					}
					fail(fmt.Errorf("acquire: %w", err))
					cancel()
					return
				}
				now := time.Now()
				mu.Lock()
				if last != w && last != -1 {
					handoffs++
					releases = append(releases, relEnd.Sub(relStart))
					wakes = append(wakes, now.Sub(relEnd))
					total = append(total, now.Sub(relStart))
					if handoffs == b.N {
						cancel()
					}
				}
				last = w
				mu.Unlock()
				t0 := time.Now()
				rel, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken(), RequestId: token()})
				t1 := time.Now()
				if err != nil || !rel.GetReleased() {
					if err == nil {
						err = fmt.Errorf("not released: %v", rel)
					}
					fail(fmt.Errorf("release: %w", err))
					cancel()
					return
				}
				mu.Lock()
				relStart, relEnd = t0, t1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	got := c.take()
	b.Logf("%d handoffs: %v", handoffs, fmtCounts(got))
	per := func(m string) float64 { return float64(got[m]) / float64(handoffs) }
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds())
	}
	b.ReportMetric(float64(handoffs)/elapsed.Seconds(), "handoffs/s")
	b.ReportMetric(per(txnMethod), "txns/handoff")
	b.ReportMetric(per(rangeMethod), "reads/handoff")
	b.ReportMetric(per("/etcdserverpb.KV/Put"), "puts/handoff")
	b.ReportMetric(per("/etcdserverpb.KV/DeleteRange"), "deletes/handoff")
	b.ReportMetric(per(grantMethod), "grants/handoff")
	b.ReportMetric(per(renewMethod+" send"), "renewals/handoff")
	b.ReportMetric(p50(total), "handoff-p50-µs")
	b.ReportMetric(p50(releases), "release-p50-µs")
	b.ReportMetric(p50(wakes), "wake+acquire-p50-µs")
}
