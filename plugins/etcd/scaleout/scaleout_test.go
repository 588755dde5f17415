package scaleout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// etcdEndpoints is HOLDFAST_ETCD_ENDPOINTS, or a private one-member etcd.
func etcdEndpoints(t *testing.T) string {
	if eps := os.Getenv(etcdtest.EndpointsEnv); eps != "" {
		return eps
	}
	return etcdtest.StartT(t, 1).EndpointList()
}

// startServers starts n `holdfast serve` processes on the etcd plugin over
// endpoints, in one fresh key namespace, and returns a client and the base
// URL of each.
func startServers(t *testing.T, n int, endpoints string) ([]lockv1connect.LockServiceClient, []string) {
	t.Helper()
	return startServersAt(t, n, endpoints, fmt.Sprintf("/holdfast-scaleout/%d/", time.Now().UnixNano()))
}

// startServersAt is startServers in the key namespace prefix.
func startServersAt(t *testing.T, n int, endpoints, prefix string) ([]lockv1connect.LockServiceClient, []string) {
	t.Helper()
	buildDir := t.TempDir()
	plugin, err := harness.Binary(t.Context(), buildDir, "holdfast-backend-etcd")
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(transport.CloseIdleConnections)
	httpClient := &http.Client{Transport: transport}
	var clients []lockv1connect.LockServiceClient
	var urls []string
	for range n {
		s := harness.StartT(t, harness.Options{
			BuildDir: buildDir,
			Backend:  plugin,
			BackendOptions: map[string]string{
				"endpoints":    endpoints,
				"prefix":       prefix,
				"call_timeout": "2s",
			},
		})
		if !s.Shared || !s.Durable {
			t.Fatalf("server on etcd says shared=%v durable=%v, want both true", s.Shared, s.Durable)
		}
		clients = append(clients, lockv1connect.NewLockServiceClient(httpClient, s.URL))
		urls = append(urls, s.URL)
	}
	return clients, urls
}

// stats counts what the workers saw.
type stats struct {
	granted      []atomic.Int64 // per server
	notAcquired  atomic.Int64   // wait ran out
	errs         atomic.Int64   // calls that failed (e.g. unavailable during failover)
	lostAtRelase atomic.Int64   // released=false: the lease was lost during the work
	mu           sync.Mutex
	errSamples   []string
	grantedAt    []time.Time
}

func (s *stats) err(err error) {
	s.errs.Add(1)
	s.mu.Lock()
	if len(s.errSamples) < 5 {
		s.errSamples = append(s.errSamples, err.Error())
	}
	s.mu.Unlock()
}

// longestGap is the longest time between two grants after from, and when
// it began.
func (s *stats) longestGap(from time.Time) (time.Duration, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gap time.Duration
	var at time.Time
	prev := from
	for _, g := range s.grantedAt {
		if g.Before(from) {
			continue
		}
		if d := g.Sub(prev); d > gap {
			gap, at = d, prev
		}
		prev = g
	}
	return gap, at
}

func (s *stats) grantedSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.grantedAt {
		if g.After(t) {
			n++
		}
	}
	return n
}

const (
	workerTTL  = 2 * time.Second
	workerWait = 3 * time.Second
)

// worker contends for keys through one server until ctx is done: acquire
// (queueing on the server), write to the fenced store, release.
func worker(ctx context.Context, id string, server int, c lockv1connect.LockServiceClient, keys []string, store *fencedStore, st *stats) {
	clock := hlc.NewClock(nil, 0)
	merge := func(ts *lockv1.HlcTimestamp) {
		if ts != nil {
			_, _ = clock.Update(hlc.FromProto(ts))
		}
	}
	for ctx.Err() == nil {
		key := keys[rand.IntN(len(keys))]
		resp, err := c.Acquire(ctx, &lockv1.AcquireRequest{
			Key: key, Ttl: durationpb.New(workerTTL), Wait: durationpb.New(workerWait),
			Holder: id, ClientStamp: clock.Now().ToProto(),
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			st.err(err)
			// Back off a little: a failing call during a failover must not
			// spin.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		merge(resp.GetServerStamp())
		if !resp.GetAcquired() {
			st.notAcquired.Add(1)
			continue
		}
		lease := resp.GetLease()
		st.granted[server].Add(1)
		st.mu.Lock()
		st.grantedAt = append(st.grantedAt, time.Now())
		st.mu.Unlock()

		store.enter(key, id, lease.GetFencingToken(), hlc.FromProto(lease.GetStamp()))
		time.Sleep(work) // the work done under the lock
		store.exit(key, id)

		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rel, err := c.Release(rctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: lease.GetOwnerToken(), ClientStamp: clock.Now().ToProto()})
		cancel()
		switch {
		case err != nil:
			st.err(fmt.Errorf("release: %w", err)) // the lease then expires on its own
		case !rel.GetReleased():
			st.lostAtRelase.Add(1)
		default:
			merge(rel.GetServerStamp())
		}
	}
}

func runWorkers(ctx context.Context, clients []lockv1connect.LockServiceClient, perServer int, keys []string, store *fencedStore, st *stats) *sync.WaitGroup {
	var wg sync.WaitGroup
	for s, c := range clients {
		for w := range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				worker(ctx, fmt.Sprintf("s%d-w%d", s, w), s, c, keys, store, st)
			}()
		}
	}
	return &wg
}

func checkStore(t *testing.T, store *fencedStore) int {
	t.Helper()
	writes, rejected, overlaps, stampsBad := store.report()
	if len(rejected) > 0 {
		t.Errorf("%d stale writes rejected by the fenced resource, e.g. %s", len(rejected), rejected[0])
	}
	if len(overlaps) > 0 {
		t.Errorf("%d overlapping critical sections, e.g. %s", len(overlaps), overlaps[0])
	}
	if len(stampsBad) > 0 {
		t.Errorf("%d stamps not increasing along a key's holders, e.g. %s", len(stampsBad), stampsBad[0])
	}
	return writes
}

// TestServersShareLocksThroughEtcd: three servers over one etcd, 24 clients
// spread across them contending for three keys with server-side waiting.
// Waiters on one server are woken by releases on the others through the etcd
// watch.
func TestServersShareLocksThroughEtcd(t *testing.T) {
	endpoints := etcdEndpoints(t)
	clients, _ := startServers(t, 3, endpoints)
	store := newFencedStore()
	st := &stats{granted: make([]atomic.Int64, len(clients))}
	keys := []string{"shared/a", "shared/b", "shared/c"}

	// Cancelled, not a deadline: a deadline would travel to the servers
	// with every call and end the last calls there as deadline_exceeded.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(4*time.Second, cancel)
	start := time.Now()
	runWorkers(ctx, clients, 8, keys, store, st).Wait()
	elapsed := time.Since(start)

	writes := checkStore(t, store)
	var per []string
	total := int64(0)
	for i := range st.granted {
		n := st.granted[i].Load()
		total += n
		per = append(per, fmt.Sprintf("s%d=%d", i, n))
		if n == 0 {
			t.Errorf("server %d granted no lock", i)
		}
	}
	t.Logf("%d acquisitions in %s (%.0f/s; %s), %d fenced writes, %d waits ran out, %d errors",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), strings.Join(per, " "), writes, st.notAcquired.Load(), st.errs.Load())
	if st.errs.Load() > 0 {
		t.Errorf("%d calls failed, e.g. %v", st.errs.Load(), st.errSamples)
	}
	if n := st.lostAtRelase.Load(); n > 0 {
		t.Errorf("%d releases answered released=false: leases lost while held", n)
	}
	if total < 50 || int64(writes) != total {
		t.Errorf("%d acquisitions, %d writes: want at least 50, all written", total, writes)
	}
}

// etcdLeader returns the index of the cluster's leader.
func etcdLeader(t *testing.T, c *etcdtest.Cluster) int {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i, m := range c.Members {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", m.Name, err)
		}
		if st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no leader among the members")
	return -1
}

// TestClusterMemberLossUnderLoad: two servers over a three-member etcd
// cluster; clients contend for keys while two long holders keep their locks
// by extending them; the etcd leader is stopped. Locks keep being granted,
// the long holders keep their locks (same fencing token, every extend
// succeeds eventually and none answers extended=false), and the fenced
// resource never sees a token go back.
func TestClusterMemberLossUnderLoad(t *testing.T) {
	cluster := etcdtest.StartT(t, 3)
	clients, _ := startServers(t, 2, cluster.EndpointList())
	store := newFencedStore()
	st := &stats{granted: make([]atomic.Int64, len(clients))}
	keys := []string{"cluster/a", "cluster/b", "cluster/c"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// Long holders: each holds one key for the whole test, extending it
	// every second (TTL 4s), through its own server.
	type held struct {
		key, owner string
		token      uint64
	}
	var holders []held
	for i, c := range clients {
		key := fmt.Sprintf("cluster/held-%d", i)
		resp, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(4 * time.Second), Holder: "long"})
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("long holder %d: %v %v", i, resp, err)
		}
		holders = append(holders, held{key, resp.GetLease().GetOwnerToken(), resp.GetLease().GetFencingToken()})
	}
	var lost atomic.Int64
	var extendErrs atomic.Int64
	var hwg sync.WaitGroup
	for i, h := range holders {
		hwg.Add(1)
		go func() {
			defer hwg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := clients[i].Extend(rctx, &lockv1.ExtendRequest{Key: h.key, OwnerToken: h.owner, Ttl: durationpb.New(4 * time.Second)})
				rcancel()
				switch {
				case err != nil && ctx.Err() == nil:
					// A transient failure: retry at the next tick; the lease
					// is still valid (consul#912).
					extendErrs.Add(1)
				case err == nil && !resp.GetExtended():
					lost.Add(1)
				case err == nil && resp.GetLease().GetFencingToken() != h.token:
					lost.Add(1)
				}
			}
		}()
	}

	wg := runWorkers(ctx, clients, 6, keys, store, st)
	// Load before the fault.
	waitUntil(t, 20*time.Second, func() bool { return checkStoreWrites(store) >= 30 })
	leader := etcdLeader(t, cluster)
	stoppedAt := time.Now()
	cluster.Members[leader].Kill()
	t.Logf("killed the etcd leader %s after %d writes (kill took %s)", cluster.Members[leader].Name, checkStoreWrites(store), time.Since(stoppedAt).Round(time.Millisecond))

	// Locks keep being granted after the failover.
	waitUntil(t, 20*time.Second, func() bool { return st.grantedSince(stoppedAt) >= 30 })
	recovered := time.Now()
	// And for a while longer: past a few extends of the long holders.
	time.Sleep(3 * time.Second) // load running through the degraded cluster is what is tested
	cancel()
	wg.Wait()
	hwg.Wait()

	gap, at := st.longestGap(stoppedAt.Add(-time.Second))
	t.Logf("longest pause between grants around the fault: %s, from %s after the kill", gap.Round(time.Millisecond), at.Sub(stoppedAt).Round(time.Millisecond))
	writes := checkStore(t, store)
	t.Logf("%d fenced writes; %d granted after the leader stopped (30 within %s); %d waits ran out; %d call errors (e.g. %v); %d extend errors",
		writes, st.grantedSince(stoppedAt), recovered.Sub(stoppedAt).Round(time.Millisecond), st.notAcquired.Load(), st.errs.Load(), st.errSamples, extendErrs.Load())
	if n := lost.Load(); n > 0 {
		t.Errorf("long holders lost their locks %d times", n)
	}
	if n := st.lostAtRelase.Load(); n > 0 {
		t.Errorf("%d releases answered released=false: leases lost while held", n)
	}
	// The long holders still hold, with their original fencing tokens.
	for i, h := range holders {
		ictx, icancel := context.WithTimeout(t.Context(), 5*time.Second)
		resp, err := clients[(i+1)%len(clients)].Inspect(ictx, &lockv1.InspectRequest{Key: h.key})
		icancel()
		if err != nil || !resp.GetHeld() || resp.GetState().GetFencingToken() != h.token {
			t.Errorf("long holder %s: held=%v token=%d err=%v, want held with token %d", h.key, resp.GetHeld(), resp.GetState().GetFencingToken(), err, h.token)
		}
		rctx, rcancel := context.WithTimeout(t.Context(), 5*time.Second)
		rel, err := clients[i].Release(rctx, &lockv1.ReleaseRequest{Key: h.key, OwnerToken: h.owner})
		rcancel()
		if err != nil || !rel.GetReleased() {
			t.Errorf("release of long holder %s: %v %v", h.key, rel, err)
		}
	}
	// Fencing never goes back: a fresh acquisition on every key is above
	// everything the resource saw.
	for _, key := range keys {
		actx, acancel := context.WithTimeout(t.Context(), 10*time.Second)
		resp, err := clients[0].Acquire(actx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(workerTTL), Wait: durationpb.New(5 * time.Second)})
		acancel()
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("final acquire of %s: %v %v", key, resp, err)
		}
		store.enter(key, "final", resp.GetLease().GetFencingToken(), hlc.FromProto(resp.GetLease().GetStamp()))
		store.exit(key, "final")
	}
	checkStore(t, store)
}

func checkStoreWrites(s *fencedStore) int {
	w, _, _, _ := s.report()
	return w
}

// waitUntil polls cond until it holds or the timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
