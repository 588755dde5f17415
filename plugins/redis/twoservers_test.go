package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// buildDir receives the binaries the tests build when $HOLDFAST_BIN_DIR
// lacks them, once per test binary.
var buildDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "holdfast-redis-test-") })

// binary returns a holdfast executable: $HOLDFAST_BIN_DIR/name when it is
// there, else built from this source tree (package harness does both).
func binary(t testing.TB, name string) string {
	t.Helper()
	dir, err := buildDir()
	if err != nil {
		t.Fatal(err)
	}
	p, err := harness.Binary(t.Context(), dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// holdfastServer is one `holdfast serve` process.
type holdfastServer struct {
	*harness.Server
	addr string
}

// startHoldfast runs holdfast serve on a free port and returns once it
// printed its readiness line; the harness stops it with SIGTERM, by its PID,
// when t ends.
func startHoldfast(t testing.TB, args ...string) *holdfastServer {
	t.Helper()
	s := harness.StartT(t, harness.Options{Binary: binary(t, "holdfast"), Args: args, ReadyTimeout: time.Minute})
	return &holdfastServer{Server: s, addr: s.Addr}
}

// redisServers starts two holdfast servers on the Redis plugin over one Redis.
func redisServers(t *testing.T) [2]*holdfastServer {
	t.Helper()
	addr := redistest.Addr(t)
	plugin := binary(t, "holdfast-backend-redis")
	args := []string{"--backend", plugin, "--backend-opt", "addrs=" + addr,
		"--backend-opt", "key_prefix=two" + token()[:8] + ":"}
	servers := [2]*holdfastServer{startHoldfast(t, args...), startHoldfast(t, args...)}
	for _, s := range servers {
		if s.Backend != "redis" || !s.Shared {
			t.Fatalf("server reports backend=%s shared=%v: want backend=redis shared=true", s.Backend, s.Shared)
		}
	}
	return servers
}

func lockClient(t testing.TB, s *holdfastServer) lockv1connect.LockServiceClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+s.addr)
}

// TestTwoServersMutualExclusion: two holdfast servers over one Redis;
// clients spread across both contend for a few keys, queueing on the servers;
// every critical section writes to a fenced resource. No write may be
// rejected and no two critical sections on one key may overlap.
func TestTwoServersMutualExclusion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers")
	}
	servers := redisServers(t)
	const (
		keys    = 3
		clients = 12
		ttl     = 5 * time.Second
		runFor  = 3 * time.Second
	)
	resources := make([]*harness.FencedResource, keys)
	for i := range resources {
		resources[i] = &harness.FencedResource{}
	}
	var perServer [2]atomic.Int64
	lc := [2]lockv1connect.LockServiceClient{lockClient(t, servers[0]), lockClient(t, servers[1])}
	stop := time.Now().Add(runFor)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		srv := c % 2
		client := lc[srv]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			ctx := context.Background()
			for time.Now().Before(stop) {
				k := rng.IntN(keys)
				key := fmt.Sprintf("mutex/%d", k)
				acq, err := client.Acquire(ctx, &lockv1.AcquireRequest{
					Key: key, Ttl: durationpb.New(ttl), Wait: durationpb.New(2 * time.Second),
					Holder: fmt.Sprintf("client-%d", c),
				})
				if err != nil {
					errs <- fmt.Errorf("client %d acquire: %w", c, err)
					return
				}
				if !acq.GetAcquired() {
					continue
				}
				lease := acq.GetLease()
				if resources[k].Enter(lease.GetFencingToken()) {
					perServer[srv].Add(1)
				}
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond) // the work
				resources[k].Leave()
				rel, err := client.Release(ctx, &lockv1.ReleaseRequest{
					Key: key, OwnerToken: lease.GetOwnerToken(),
				})
				if err != nil {
					errs <- fmt.Errorf("client %d release: %w", c, err)
					return
				}
				if !rel.GetReleased() {
					errs <- fmt.Errorf("client %d: release of %s (fencing %d) answered released=false", c, key, lease.GetFencingToken())
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for k, r := range resources {
		writes, rejected, overlaps := r.Counts()
		if rejected != 0 || overlaps != 0 {
			t.Errorf("key %d: %d rejected writes, %d overlapping critical sections", k, rejected, overlaps)
		}
		total += writes
	}
	t.Logf("%d critical sections on %d keys in %s: %d through server 1, %d through server 2",
		total, keys, runFor, perServer[0].Load(), perServer[1].Load())
	if perServer[0].Load() == 0 || perServer[1].Load() == 0 {
		t.Fatalf("a server served no critical section: %d / %d", perServer[0].Load(), perServer[1].Load())
	}
}

// TestTwoServersWakeAndTakeover: a waiter queued on one server is woken by a
// release made through the other server (Redis PUBLISH) promptly; a holder
// that overruns its TTL loses the key to a waiter on the other server (Redis
// expiry), its late write is refused by the fenced resource and its release
// is a no-op.
func TestTwoServersWakeAndTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers")
	}
	servers := redisServers(t)
	c1, c2 := lockClient(t, servers[0]), lockClient(t, servers[1])
	ctx := context.Background()

	// Release on server 1 wakes the waiter on server 2.
	first, err := c1.Acquire(ctx, &lockv1.AcquireRequest{Key: "wake", Ttl: durationpb.New(time.Minute)})
	if err != nil || !first.GetAcquired() {
		t.Fatalf("first acquire: %v %v", first, err)
	}
	type result struct {
		res *lockv1.AcquireResponse
		err error
		at  time.Time
	}
	waiter := make(chan result, 1)
	go func() {
		r, err := c2.Acquire(ctx, &lockv1.AcquireRequest{
			Key: "wake", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(10 * time.Second)})
		waiter <- result{r, err, time.Now()}
	}()
	// The waiter is queued once server 2 reports it in Inspect's waiters.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		insp, err := c2.Inspect(ctx, &lockv1.InspectRequest{Key: "wake"})
		if err == nil && insp.GetState().GetWaiters() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter never queued on server 2: %v %v", insp, err)
		}
	}
	releasedAt := time.Now()
	if rel, err := c1.Release(ctx, &lockv1.ReleaseRequest{Key: "wake", OwnerToken: first.GetLease().GetOwnerToken()}); err != nil || !rel.GetReleased() {
		t.Fatalf("release: %v %v", rel, err)
	}
	w := <-waiter
	if w.err != nil || !w.res.GetAcquired() {
		t.Fatalf("waiter: %v %v", w.res, w.err)
	}
	wake := w.at.Sub(releasedAt)
	t.Logf("waiter on server 2 acquired %s after the release on server 1", wake)
	if wake > 250*time.Millisecond {
		t.Errorf("waiter woke %s after the release, want promptly (< 250ms)", wake)
	}
	if w.res.GetLease().GetFencingToken() <= first.GetLease().GetFencingToken() {
		t.Errorf("fencing went back: %d then %d", first.GetLease().GetFencingToken(), w.res.GetLease().GetFencingToken())
	}

	// Overrun: the paused holder's lease expires; server 2's waiter takes over.
	res := &harness.FencedResource{}
	const short = 300 * time.Millisecond
	stale, err := c1.Acquire(ctx, &lockv1.AcquireRequest{Key: "paused", Ttl: durationpb.New(short)})
	if err != nil || !stale.GetAcquired() {
		t.Fatalf("stale acquire: %v %v", stale, err)
	}
	acquiredAt := time.Now()
	next, err := c2.Acquire(ctx, &lockv1.AcquireRequest{
		Key: "paused", Ttl: durationpb.New(10 * time.Second), Wait: durationpb.New(5 * time.Second)})
	if err != nil || !next.GetAcquired() {
		t.Fatalf("successor acquire after expiry: %v %v", next, err)
	}
	took := time.Since(acquiredAt)
	t.Logf("waiter on server 2 took over %s after a %s lease was granted on server 1", took, short)
	if took > short+300*time.Millisecond {
		t.Errorf("takeover after %s, want within the TTL %s + 300ms", took, short)
	}
	if !res.Enter(next.GetLease().GetFencingToken()) {
		t.Fatal("successor's write rejected")
	}
	res.Leave()
	if res.Enter(stale.GetLease().GetFencingToken()) {
		t.Fatal("the paused holder's stale write was accepted")
	}
	res.Leave()
	rel, err := c1.Release(ctx, &lockv1.ReleaseRequest{Key: "paused", OwnerToken: stale.GetLease().GetOwnerToken()})
	if err != nil || rel.GetReleased() {
		t.Fatalf("stale release = %v %v, want released=false", rel, err)
	}
	insp, err := c1.Inspect(ctx, &lockv1.InspectRequest{Key: "paused"})
	if err != nil || !insp.GetHeld() || insp.GetState().GetFencingToken() != next.GetLease().GetFencingToken() {
		t.Fatalf("after the stale release, Inspect = %v %v, want the successor", insp, err)
	}
}
