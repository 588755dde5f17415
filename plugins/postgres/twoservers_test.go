package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// buildDir receives the binaries the tests build when $HOLDFAST_BIN_DIR
// lacks them, once per test binary.
var buildDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "holdfast-postgres-test-") })

// binary returns the path of a holdfast executable: from $HOLDFAST_BIN_DIR
// when it is there, else built from this source tree (package harness
// does both, once per name).
func binary(t *testing.T, name string) string {
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

// server is one `holdfast serve` process.
type server struct {
	*harness.Server
	addr string
}

// startServer runs holdfast serve on a free port and waits for its
// readiness line on stdout (an event, not a sleep); the harness stops it
// with SIGTERM, by its PID, when t ends.
func startServer(t *testing.T, holdfast string, args ...string) *server {
	t.Helper()
	s := harness.StartT(t, harness.Options{Binary: holdfast, Args: args, ReadyTimeout: time.Minute})
	if !s.Shared || !s.Durable {
		t.Fatalf("server reports shared=%v durable=%v: want both true", s.Shared, s.Durable)
	}
	return &server{Server: s, addr: s.Addr}
}

// TestTwoServersMutualExclusion: two holdfast servers over one PostgreSQL;
// clients spread across both contend for a few keys; every critical section
// writes to a fenced resource. No write may be rejected and no two critical
// sections on one key may overlap.
func TestTwoServersMutualExclusion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers")
	}
	dsn := pgtest.DSN(t)
	holdfast := binary(t, "holdfast")
	plugin := binary(t, "holdfast-backend-postgres")
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	args := []string{"--backend", plugin, "--backend-opt", "dsn=" + dsn, "--backend-opt", "schema=" + schema}
	servers := []*server{startServer(t, holdfast, args...), startServer(t, holdfast, args...)}

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
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		srv := c % 2
		client := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+servers[srv].addr)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for ctx.Err() == nil {
				k := rng.IntN(keys)
				key := fmt.Sprintf("mutex/%d", k)
				acq, err := client.Acquire(context.Background(), &lockv1.AcquireRequest{
					Key: key, Ttl: durationpb.New(ttl), Wait: durationpb.New(time.Second),
					Holder: fmt.Sprintf("client-%d", c),
				})
				if err != nil {
					errs <- fmt.Errorf("client %d acquire: %w", c, err)
					return
				}
				if !acq.GetAcquired() {
					continue // waited a second and did not get it: try again
				}
				lease := acq.GetLease()
				if resources[k].Enter(lease.GetFencingToken()) {
					perServer[srv].Add(1)
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // the work
				resources[k].Leave()
				rel, err := client.Release(context.Background(), &lockv1.ReleaseRequest{
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

	// A holder paused past its TTL: its lease expires, a client of the other
	// server takes the key over and writes; the stale holder's late write is
	// rejected by the resource and its release is a no-op.
	c1 := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+servers[0].addr)
	c2 := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+servers[1].addr)
	res := &harness.FencedResource{}
	stale, err := c1.Acquire(context.Background(), &lockv1.AcquireRequest{
		Key: "mutex/paused", Ttl: durationpb.New(200 * time.Millisecond)})
	if err != nil || !stale.GetAcquired() {
		t.Fatalf("stale acquire: %v", err)
	}
	next, err := c2.Acquire(context.Background(), &lockv1.AcquireRequest{
		Key: "mutex/paused", Ttl: durationpb.New(10 * time.Second), Wait: durationpb.New(5 * time.Second)})
	if err != nil || !next.GetAcquired() {
		t.Fatalf("successor acquire after expiry: %v %v", next, err)
	}
	if !res.Enter(next.GetLease().GetFencingToken()) {
		t.Fatal("successor's write rejected")
	}
	res.Leave()
	if res.Enter(stale.GetLease().GetFencingToken()) {
		t.Fatal("the paused holder's stale write was accepted")
	}
	res.Leave()
	rel, err := c1.Release(context.Background(), &lockv1.ReleaseRequest{
		Key: "mutex/paused", OwnerToken: stale.GetLease().GetOwnerToken()})
	if err != nil || rel.GetReleased() {
		t.Fatalf("stale release = %v %v, want released=false", rel, err)
	}
	insp, err := c1.Inspect(context.Background(), &lockv1.InspectRequest{Key: "mutex/paused"})
	if err != nil || !insp.GetHeld() || insp.GetState().GetFencingToken() != next.GetLease().GetFencingToken() {
		t.Fatalf("after the stale release, Inspect = %v %v, want the successor", insp, err)
	}
}

// TestServerOverPostgresRestart: a holdfast server over a PostgreSQL that
// stops (like a crash) and starts again. While it is away, calls answer
// unavailable at once and a guard that cannot renew is poisoned within its
// TTL; once it is back, the server recovers by itself, a lock taken before
// the crash is still held by the same lease (durable), and fencing tokens
// keep increasing.
func TestServerOverPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and restarts PostgreSQL")
	}
	pg := pgtest.Start(t)
	holdfastBin := binary(t, "holdfast")
	plugin := binary(t, "holdfast-backend-postgres")
	srv := startServer(t, holdfastBin, "--backend", plugin, "--backend-opt", "dsn="+pg.DSN(),
		"--backend-opt", "connect_timeout=1s", "--backend-opt", "call_timeout=2s")
	raw := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+srv.addr)
	sdk, err := holdfast.Dial("http://" + srv.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	ctx := context.Background()

	durable, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "durable", Ttl: durationpb.New(time.Minute)})
	if err != nil || !durable.GetAcquired() {
		t.Fatalf("acquire durable: %v %v", durable, err)
	}
	const ttl = 1500 * time.Millisecond
	g, err := sdk.Lock("guarded").TTL(ttl).TryLock(ctx)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	before, err := g.FencingToken()
	if err != nil {
		t.Fatal(err)
	}

	pg.Kill(t) // immediate shutdown: no checkpoint, recovery from WAL on start
	stopped := time.Now()
	_, err = raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "other", Ttl: durationpb.New(time.Second)})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("acquire with PostgreSQL away: %v, want unavailable", err)
	}
	if d := time.Since(stopped); d > 3*time.Second {
		t.Fatalf("unavailable took %s", d)
	}
	t.Logf("acquire answered %v after %s", connect.CodeOf(err), time.Since(stopped).Round(time.Millisecond))
	select {
	case <-g.Done():
	case <-time.After(ttl + time.Second):
		t.Fatalf("guard not poisoned %s after PostgreSQL stopped (TTL %s)", time.Since(stopped), ttl)
	}
	if _, err := g.FencingToken(); !errors.Is(err, holdfast.ErrLeaseLost) {
		t.Fatalf("FencingToken after loss = %v", err)
	}
	t.Logf("guard poisoned %s after PostgreSQL stopped (TTL %s): %v", time.Since(stopped).Round(time.Millisecond), ttl, context.Cause(g.Context()))

	pg.Restart(t, "")
	var insp *lockv1.InspectResponse
	deadline := time.Now().Add(20 * time.Second)
	for {
		insp, err = raw.Inspect(ctx, &lockv1.InspectRequest{Key: "durable"})
		if err == nil {
			break
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("inspect after PostgreSQL came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // poll the recovering server, with a deadline
	}
	if !insp.GetHeld() || insp.GetState().GetFencingToken() != durable.GetLease().GetFencingToken() {
		t.Fatalf("after the restart Inspect(durable) = %v, want held with fencing %d", insp, durable.GetLease().GetFencingToken())
	}
	if r, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "durable", Ttl: durationpb.New(time.Second)}); err != nil || r.GetAcquired() {
		t.Fatalf("a lock held across the restart was acquired by another: %v %v", r, err)
	}
	rel, err := raw.Release(ctx, &lockv1.ReleaseRequest{Key: "durable", OwnerToken: durable.GetLease().GetOwnerToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("the holder's release after the restart: %v %v", rel, err)
	}
	r, err := raw.Acquire(ctx, &lockv1.AcquireRequest{Key: "guarded", Ttl: durationpb.New(time.Second)})
	if err != nil || !r.GetAcquired() {
		t.Fatalf("acquire guarded after restart: %v %v", r, err)
	}
	if after := r.GetLease().GetFencingToken(); after <= before {
		t.Fatalf("fencing token went back across the PostgreSQL restart: %d then %d", before, after)
	}
	_ = g.Unlock(ctx) // lost: answers the loss, changes nothing
}
