package abuse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// answerTimes sends n try-once Acquires at once and returns the median
// time to their answers (whatever they are) and the answers' codes.
func answerTimes(ctx context.Context, c lockv1connect.LockServiceClient, prefix string, n int) (time.Duration, []string) {
	var mu sync.Mutex
	var took []time.Duration
	var codes []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: fmt.Sprintf("%s%d", prefix, i), Ttl: durationpb.New(time.Minute)})
			mu.Lock()
			took = append(took, time.Since(start))
			codes = append(codes, code(err))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(took)
	return took[len(took)/2], codes
}

// Issue 13, item 7: a SIGSTOPped plugin is not "healthy": its liveness ping
// fails within its deadline, health turns NOT_SERVING and
// holdfast_backend_up 0, calls answer unavailable at once instead of after
// 10s, and every Acquire keeps its wait and the request deadline, also in
// the moments before the ping notices. SIGCONT brings it all back.
func TestFrozenPlugin(t *testing.T) {
	s := serve(t, append([]string{"--max-wait", "2s", "--max-request-duration", "3s", "--metrics-addr", "127.0.0.1:0"},
		hardened("--backend-ping-timeout", "1s")...)...)
	metrics := logged(t, s, metricsURLLine)
	pid, err := strconv.Atoi(logged(t, s, pluginPIDLine))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	up := func() float64 {
		v, _, err := scrape(ctx, metrics, "holdfast_backend_up")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	p := newProbe(t, s, clientOpts{}, "probe/")
	idle := p.p50(t)
	holder := client(t, s, clientOpts{from: "127.0.0.3"})
	if r, err := holder.Acquire(ctx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Hour)}); err != nil || !r.GetAcquired() {
		t.Fatalf("holder: %v %v", r, err)
	}

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	// At once, before any ping can have noticed: a waiter keeps its wait,
	// a try-once Acquire the request deadline.
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		_, err := p.c.Acquire(ctx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(1500 * time.Millisecond)})
		took := time.Since(start)
		t.Logf("a waiter (wait 1.5s) on the frozen plugin answered %s after %s", code(err), took.Round(time.Millisecond))
		expect(t, took < 2500*time.Millisecond, "a waiter with a 1.5s wait answered after %s", took)
	})
	wg.Go(func() {
		start := time.Now()
		_, err := p.c.Acquire(ctx, &lockv1.AcquireRequest{Key: "fresh", Ttl: durationpb.New(time.Minute)})
		took := time.Since(start)
		t.Logf("a try-once Acquire on the frozen plugin answered %s after %s", code(err), took.Round(time.Millisecond))
		expect(t, took < 4*time.Second, "a try-once Acquire answered after %s, past --max-request-duration 3s", took)
	})
	wg.Wait()

	noticed := eventually(10*time.Second, func() bool { return health() == healthpb.HealthCheckResponse_NOT_SERVING })
	expect(t, noticed, "health still SERVING %s after the plugin froze", time.Since(frozen).Round(time.Second))
	if noticed {
		t.Logf("health NOT_SERVING %s after the plugin froze", time.Since(frozen).Round(time.Millisecond))
	}
	expect(t, up() == 0, "holdfast_backend_up is %v while the plugin is frozen", up())

	attacked, codes := answerTimes(ctx, p.c, "frozen/", 10)
	unaffected(t, "7 frozen plugin (time to answer)", idle, attacked, 10)
	for _, c := range codes {
		expect(t, c == "unavailable", "an Acquire on the frozen plugin answered %s, want unavailable", c)
	}
	_, err = p.c.Inspect(ctx, &lockv1.InspectRequest{Key: "busy"})
	expect(t, code(err) == "unavailable" && strings.Count(err.Error(), "backend unavailable") == 1,
		"inspect on the frozen plugin: %v, want unavailable saying \"backend unavailable\" once", err)

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return health() == healthpb.HealthCheckResponse_SERVING && up() == 1 }) {
		t.Fatalf("after SIGCONT: health %s, holdfast_backend_up %v", health(), up())
	}
	if _, err := p.measure(ctx, false); err != nil {
		t.Fatalf("the normal client after SIGCONT: %v", err)
	}
}
