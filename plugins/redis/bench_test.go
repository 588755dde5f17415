package redis_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// The benchmarks measure one Acquire+Release (or Obtain+Release) per op on
// distinct keys, at concurrency 1 and 32, and report latency percentiles:
//
//	go test -run '^$' -bench . -benchtime 3s ./plugins/redis
//
// Holdfast through a server (two RPCs, the plugin hop, two Lua scripts)
// against bsm/redislock straight to the same Redis (SET NX PX, then a Lua
// compare-and-delete), plus the backend called in-process, which shows what
// the plugin and server layers cost.

// runConcurrent runs op b.N times over conc goroutines and reports p50/p99.
func runConcurrent(b *testing.B, conc int, op func(ctx context.Context, worker, i int) error) {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	var failed atomic.Int64
	b.ResetTimer()
	for w := range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				start := time.Now()
				if err := op(ctx, w, i); err != nil {
					if failed.Add(1) == 1 {
						b.Error(err)
					}
					continue
				}
				lat[w] = append(lat[w], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

var concurrencies = []int{1, 32}

func BenchmarkRedislockObtainRelease(b *testing.B) {
	rdb := goredis.NewClient(&goredis.Options{Addr: redistest.Addr(b), PoolSize: 64})
	defer rdb.Close()
	locker := redislock.New(rdb)
	run := token()[:8]
	for _, conc := range concurrencies {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			runConcurrent(b, conc, func(ctx context.Context, w, i int) error {
				l, err := locker.Obtain(ctx, fmt.Sprintf("bench-redislock/%s/%d/%d", run, conc, i), 10*time.Second, nil)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			})
		})
	}
}

func BenchmarkBackendAcquireRelease(b *testing.B) {
	bk, err := redistestOpen(b)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	clock := hlc.NewClock(nil, 0)
	for _, conc := range concurrencies {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			runConcurrent(b, conc, func(ctx context.Context, w, i int) error {
				key, tok := fmt.Sprintf("bench/%d/%d", conc, i), token()
				r, err := bk.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second, Stamp: clock.Now()})
				if err != nil {
					return err
				}
				if !r.Acquired {
					return fmt.Errorf("%s not acquired", key)
				}
				_, err = bk.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
				return err
			})
		})
	}
}

func redistestOpen(b *testing.B) (*redis.Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bk, err := redis.Open(ctx, map[string]string{"addrs": redistest.Addr(b), "key_prefix": "bench" + token()[:8] + ":"})
	if err != nil {
		return nil, err
	}
	return bk.(*redis.Backend), nil
}

func BenchmarkHoldfastAcquireRelease(b *testing.B) {
	addr := redistest.Addr(b)
	plugin := binary(b, "holdfast-backend-redis")
	srv := startHoldfast(b, "--backend", plugin, "--backend-opt", "addrs="+addr,
		"--backend-opt", "key_prefix=bench"+token()[:8]+":")
	client := lockClient(b, srv)
	for _, conc := range concurrencies {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			runConcurrent(b, conc, func(ctx context.Context, w, i int) error {
				key := fmt.Sprintf("bench/%d/%d", conc, i)
				r, err := client.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(10 * time.Second)})
				if err != nil {
					return err
				}
				if !r.GetAcquired() {
					return fmt.Errorf("%s not acquired", key)
				}
				_, err = client.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: r.GetLease().GetOwnerToken()})
				return err
			})
		})
	}
}

// BenchmarkHotKeyGrants: 32 workers on one key, each a try (wait 0) and,
// when granted, a release: a mutex (limit 1) against a semaphore of limit
// 10 on the same backend. ops/s and the latency percentiles count attempts
// (a granted one includes its release); grants/s counts the granted ones.
//
//	go test -run '^$' -bench HotKeyGrants -benchtime 3s ./plugins/redis
func BenchmarkHotKeyGrants(b *testing.B) {
	be, err := redistestOpen(b)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	clock := hlc.NewClock(nil, 0)
	for _, c := range []struct {
		name  string
		kind  backend.Kind
		limit int
	}{{"mutex", backend.KindMutex, 1}, {"semaphore-limit-10", backend.KindSemaphore, 10}} {
		b.Run(c.name+"/c=32", func(b *testing.B) {
			key := fmt.Sprintf("hot/%s/%d", c.name, time.Now().UnixNano())
			var grants atomic.Int64
			start := time.Now()
			runConcurrent(b, 32, func(ctx context.Context, _, _ int) error {
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

// BenchmarkBackendBatch takes and gives back size distinct keys per op,
// in-process: as size concurrent single calls (what the engine sends a
// backend that does not batch), as one AcquireBatch and one ReleaseBatch
// pipelined, and as the same batches each in one EVAL. items/s counts
// acquisitions.
func BenchmarkBackendBatch(b *testing.B) {
	bk, err := redistestOpen(b)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	clock := hlc.NewClock(nil, 0)
	for _, size := range []int{32, 128} {
		for _, mode := range []string{"single", "pipeline", "script"} {
			b.Run(fmt.Sprintf("size=%d/%s", size, mode), func(b *testing.B) {
				defer redis.SetBatchScript(mode == "script")()
				ctx := context.Background()
				acq := make([]backend.AcquireRequest, size)
				rel := make([]backend.ReleaseRequest, size)
				b.ResetTimer()
				for n := range b.N {
					for i := range acq {
						acq[i] = backend.AcquireRequest{Key: fmt.Sprintf("batch/%d/%s/%d/%d", size, mode, n, i), OwnerToken: token(), TTL: 10 * time.Second, Stamp: clock.Now()}
						rel[i] = backend.ReleaseRequest{Key: acq[i].Key, OwnerToken: acq[i].OwnerToken, Stamp: clock.Now()}
					}
					if mode == "single" {
						var wg sync.WaitGroup
						for i := range acq {
							wg.Go(func() {
								if r, err := bk.Acquire(ctx, acq[i]); err != nil || !r.Acquired {
									b.Error(r, err)
								}
								if _, err := bk.Release(ctx, rel[i]); err != nil {
									b.Error(err)
								}
							})
						}
						wg.Wait()
						continue
					}
					outs, err := bk.AcquireBatch(ctx, acq)
					if err != nil {
						b.Fatal(err)
					}
					for _, o := range outs {
						if o.Err != nil || !o.Value.Acquired {
							b.Fatal(o)
						}
					}
					if _, err := bk.ReleaseBatch(ctx, rel); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "items/s")
			})
		}
	}
}

// BenchmarkCountHeld: what the server's holdfast_locks_held gauge costs a
// scrape with 100,000 locks held (taken in batches under a key prefix of
// the benchmark's own): Count (one SCAN pass) against the List walk it
// replaces, pages of engine.MaxPageSize as the gauge listed them. Every
// page scans the whole keyspace again, so a walk is 100 pages of about
// the same cost: ListPage times one page from the middle of the walk and
// reports walk-s, the 100 pages' estimate (one walk takes minutes).
//
//	go test -run '^$' -bench CountHeld -benchtime 3x ./plugins/redis
func BenchmarkCountHeld(b *testing.B) {
	const held = 100000
	bk, err := redistestOpen(b)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	ctx := b.Context()
	clock := hlc.NewClock(nil, 0)
	var reqs []backend.ReleaseRequest
	for i := 0; i < held; i += 1000 {
		acq := make([]backend.AcquireRequest, 0, 1000)
		for j := i; j < min(i+1000, held); j++ {
			acq = append(acq, backend.AcquireRequest{Key: fmt.Sprintf("held/%06d", j), OwnerToken: token(), TTL: 30 * time.Minute,
				Holder: "bench", Stamp: clock.Now()})
			reqs = append(reqs, backend.ReleaseRequest{Key: acq[len(acq)-1].Key, OwnerToken: acq[len(acq)-1].OwnerToken})
		}
		outs, err := bk.AcquireBatch(ctx, acq)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range outs {
			if o.Err != nil || !o.Value.Acquired {
				b.Fatalf("fill: %+v", o)
			}
		}
	}
	b.Cleanup(func() {
		for c := range slices.Chunk(reqs, 1000) {
			_, _ = bk.ReleaseBatch(context.Background(), c)
		}
	})
	b.Run("Count", func(b *testing.B) {
		for b.Loop() {
			if n, err := bk.Count(ctx); err != nil || n != held {
				b.Fatalf("Count = %d, %v; want %d", n, err, held)
			}
		}
	})
	b.Run("ListPage", func(b *testing.B) {
		for b.Loop() {
			page, err := bk.List(ctx, backend.ListRequest{PageSize: engine.MaxPageSize, PageToken: fmt.Sprintf("held/%06d", held/2)})
			if err != nil || len(page.Records) != engine.MaxPageSize {
				b.Fatalf("List: %d records, %v", len(page.Records), err)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*held/engine.MaxPageSize, "walk-s")
	})
}

// BenchmarkAcquireReleaseBesideFollow: uncontended pairs beside a Follow
// that follows nothing, as the engine's feed is when nobody waits: the
// native Follow (Redis sends it nothing of these keys) against the same
// backend's Watch "" filtered in process (backend.Following of a backend
// without Follow, which the plugin served before: Redis sends it every
// pair's two events and it drops them). It reports the CPU of this process
// (the calls and the feed) and of redis-server a pair:
//
//	go test -run '^$' -bench AcquireReleaseBesideFollow -benchtime 5000x ./plugins/redis
func BenchmarkAcquireReleaseBesideFollow(b *testing.B) {
	addr := redistest.Addr(b) // one server for the backend and the CPU readings
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	opened, err := redis.Open(ctx, map[string]string{"addrs": addr, "key_prefix": "bench" + token()[:8] + ":"})
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	bk := opened.(*redis.Backend)
	defer bk.Close()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	for _, feed := range []struct {
		name string
		b    backend.FollowBackend
	}{
		{"follow", bk},
		{"watch", backend.Following(watchOnly{bk})},
	} {
		for _, conc := range concurrencies {
			b.Run(fmt.Sprintf("feed=%s/conc=%d", feed.name, conc), func(b *testing.B) {
				besideFollow(b, bk, rdb, feed.b, conc)
			})
		}
	}
}

// besideFollow runs conc workers' pairs on bk beside f.Follow.
func besideFollow(b *testing.B, bk *redis.Backend, rdb *goredis.Client, f backend.FollowBackend, conc int) {
	clock := hlc.NewClock(nil, 0)
	ctx, cancel := context.WithCancel(context.Background())
	synced := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.Follow(ctx, nil, func(e backend.Event) error {
			if e.Type == backend.EventSynced {
				close(synced)
			}
			return nil
		})
	}()
	<-synced
	run := token()[:8]
	self, store := processCPU(b), redis.RedisCPU(ctx, b, rdb)
	runConcurrent(b, conc, func(ctx context.Context, w, i int) error {
		key, tok := fmt.Sprintf("beside/%s/%d", run, i), token()
		r, err := bk.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second, Stamp: clock.Now()})
		if err != nil {
			return err
		}
		if !r.Acquired {
			return fmt.Errorf("%s not acquired", key)
		}
		_, err = bk.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
		return err
	})
	b.ReportMetric(float64((processCPU(b)-self).Microseconds())/float64(b.N), "self-cpu-µs/op")
	b.ReportMetric(float64((redis.RedisCPU(ctx, b, rdb)-store).Microseconds())/float64(b.N), "redis-cpu-µs/op")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// watchOnly hides the backend's Follow, so that backend.Following filters
// its Watch.
type watchOnly struct{ backend.Backend }

// processCPU is this process's CPU time so far (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
