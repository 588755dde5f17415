package engine_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// BenchmarkAcquireRelease: one uncontended Acquire+Release through the
// engine on the in-process fake backend (no plugin, no network): the
// engine's own overhead. Watch: the engine's feed is a Watch of every key,
// which carries every pair's two events to the engine (which drops them);
// Follow: the same fake with a Follow (backend.Following, filtering that
// Watch in-process), which carries none of them. Both wrap the fake in a
// struct of one shape (plainLocal, followLocal): a wrapper's extra frames
// alone change the cost of every call (goroutine stacks grow at other
// depths), and would be measured instead of the feed.
func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("feed=Watch", func(b *testing.B) { benchAcquireRelease(b, false) })
	b.Run("feed=Follow", func(b *testing.B) { benchAcquireRelease(b, true) })
}

func benchAcquireRelease(b *testing.B, follow bool) {
	f := fakebackend.New()
	c := &counting{Backend: f, fake: f, follow: follow, wrapped: true}
	b.Cleanup(func() { f.Close() })
	e := c.newEngine(b, engine.Config{})
	ctx := context.Background()
	b.ReportAllocs()
	var workers atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		prefix := "bench/" + strconv.FormatInt(workers.Add(1), 10) + "/"
		i := 0
		for pb.Next() {
			i++
			key := prefix + strconv.Itoa(i%64) // each worker its own keys
			resp, err := e.Acquire(ctx, acq(key, time.Minute, 0))
			if err != nil || !resp.GetAcquired() {
				b.Fatal(resp, err)
			}
			if _, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkListPage: one full page (engine.MaxPageSize mutexes) of List
// through the engine on the in-process fake: the engine's cost per page
// on top of the backend's (allocations are what the GC pays for beside the
// Acquires a server serves while someone pages through its locks).
func BenchmarkListPage(b *testing.B) {
	e, _ := newEngine(b, engine.Config{})
	ctx := context.Background()
	for i := range engine.MaxPageSize {
		resp, err := e.Acquire(ctx, acq("list/"+strconv.Itoa(i), time.Hour, 0))
		if err != nil || !resp.GetAcquired() {
			b.Fatal(resp, err)
		}
	}
	req := &lockv1.ListRequest{Prefix: "list/", PageSize: engine.MaxPageSize}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := e.List(ctx, req)
		if err != nil || len(resp.GetLocks()) != engine.MaxPageSize {
			b.Fatal(len(resp.GetLocks()), err)
		}
	}
}
