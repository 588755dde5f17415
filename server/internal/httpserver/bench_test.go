package httpserver

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// BenchmarkAcquireRelease: Acquire+Release pairs over Connect and h2c
// against a served engine on the in-process memory backend, 32 callers
// on one connection (the bench's c32 row without the plugin hop). The
// client and the server share the process: allocs/op and ns/op are both
// sides', and so is cpu-µs/op, the process's CPU time a pair.
func BenchmarkAcquireRelease(b *testing.B) {
	bk := memory.New()
	b.Cleanup(func() { _ = bk.Close() })
	e, err := engine.New(context.Background(), bk, engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	b.Cleanup(tr.CloseIdleConnections)
	client := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+srv.Addr().String())
	ctx := context.Background()
	var callers atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		prefix := "bench/" + strconv.FormatInt(callers.Add(1), 10) + "/"
		i := 0
		for pb.Next() {
			i++
			key := prefix + strconv.Itoa(i%64)
			resp, err := client.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
			if err != nil || !resp.GetAcquired() {
				b.Fatal(resp, err)
			}
			if _, err := client.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
