package etcd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/etcd"
	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
	"github.com/holdfast/holdfast/proto/hlc"
)

const ttl = 2 * time.Second // etcd's default minimum lease, whole seconds

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func stampAt(wall int64, logical uint32) hlc.Timestamp {
	return hlc.Timestamp{WallTime: wall, Logical: logical}
}

func acquire(t testing.TB, b backend.Backend, key, tok string, ttl time.Duration, stamp hlc.Timestamp) backend.AcquireResult {
	t.Helper()
	res, err := b.Acquire(ctxT(t), backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl, Holder: "h-" + tok[:6], Stamp: stamp})
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return res
}

// waitFree polls Get until key is free or the deadline passes, and returns
// when it became free.
func waitFree(t testing.TB, b backend.Backend, key string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, held, err := b.Get(ctxT(t), key)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if !held {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held after %s", key, within)
		}
		time.Sleep(20 * time.Millisecond) // polling etcd itself: there is no event to wait on here
	}
}

func TestInfo(t *testing.T) {
	b := open(t, requireEtcd(t), nil)
	info, err := b.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "etcd" || !info.Shared || !info.Durable || !info.Fair || info.TTLGranularity != time.Second || info.MinTTL != 2*time.Second {
		t.Fatalf("info = %+v", info)
	}
}

func TestAcquireReleaseGet(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	a, c := token(), token()
	now := time.Now().UnixNano()

	r1 := acquire(t, b, "k", a, ttl, stampAt(now, 0))
	if !r1.Acquired || r1.Record.FencingToken == 0 || r1.Record.Key != "k" || r1.Record.Stamp != stampAt(now, 0) {
		t.Fatalf("first acquire = %+v", r1)
	}
	if r1.Record.Remaining <= time.Second || r1.Record.Remaining > ttl {
		t.Fatalf("remaining %s, want about %s", r1.Record.Remaining, ttl)
	}
	r2 := acquire(t, b, "k", c, ttl, stampAt(now, 5))
	if r2.Acquired || r2.Record.FencingToken != r1.Record.FencingToken || r2.Record.Holder != r1.Record.Holder {
		t.Fatalf("contended acquire = %+v, want the holder %+v", r2, r1.Record)
	}
	got, held, err := b.Get(ctx, "k")
	if err != nil || !held || got.FencingToken != r1.Record.FencingToken || got.Stamp != r1.Record.Stamp {
		t.Fatalf("get = %+v %v %v", got, held, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: c}); err != nil || ok {
		t.Fatalf("release with another token = %v, %v; want false", ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: ""}); err != nil || ok {
		t.Fatalf("release with empty token = %v, %v; want false", ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: a, Stamp: stampAt(now+10, 0)}); err != nil || !ok {
		t.Fatalf("release = %v, %v; want true", ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: a}); err != nil || ok {
		t.Fatalf("second release = %v, %v; want false", ok, err)
	}
	if _, held, err := b.Get(ctx, "k"); err != nil || held {
		t.Fatalf("get after release: held=%v err=%v", held, err)
	}
	// The next holder: a larger fencing token, and a stamp after the release
	// stamp even though the proposal is older.
	r3 := acquire(t, b, "k", c, ttl, stampAt(now, 1))
	if !r3.Acquired || r3.Record.FencingToken <= r1.Record.FencingToken {
		t.Fatalf("re-acquire = %+v, want a token above %d", r3, r1.Record.FencingToken)
	}
	if want := stampAt(now+10, 1); r3.Record.Stamp != want {
		t.Fatalf("stamp after release = %s, want %s", r3.Record.Stamp, want)
	}
}

func TestStampsChainAcrossHolders(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	var last hlc.Timestamp
	base := time.Now().UnixNano()
	// Proposals that go backwards, as from servers with slower clocks.
	for i, proposed := range []hlc.Timestamp{stampAt(base, 0), stampAt(base-1000, 0), stampAt(base, 0), stampAt(base+5, 3), {}} {
		tok := token()
		r := acquire(t, b, "s", tok, ttl, proposed)
		if !r.Acquired {
			t.Fatalf("acquire %d not acquired", i)
		}
		if !r.Record.Stamp.After(last) || r.Record.Stamp.Before(proposed) {
			t.Fatalf("acquire %d: stamp %s, want after %s and not before %s", i, r.Record.Stamp, last, proposed)
		}
		if want := backend.NextStamp(last, proposed); i > 0 && r.Record.Stamp != want {
			t.Fatalf("acquire %d: stamp %s, want NextStamp = %s", i, r.Record.Stamp, want)
		}
		last = r.Record.Stamp
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "s", OwnerToken: tok, Stamp: stampAt(base-5000, 0)}); err != nil || !ok {
			t.Fatalf("release %d: %v %v", i, ok, err)
		}
	}
}

// A key the backend has seen stamped gets the short form of the acquire
// transaction (no branch for a key without a stamp key). Should its stamp
// key be gone all the same (deleted behind the backend's back), the
// acquire still takes the key, in the full form, and stores its stamp.
func TestAcquireAfterStampKeyVanished(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	prefix := testPrefix(t)
	b := open(t, eps, map[string]string{"prefix": prefix})
	raw := rawClient(t, eps)
	ctx := ctxT(t)
	base := time.Now().UnixNano()
	tok := token()
	first := acquire(t, b, "v", tok, ttl, stampAt(base, 0))
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "v", OwnerToken: tok, Stamp: stampAt(base+1, 0)}); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if resp, err := raw.Delete(ctx, prefix+"locks/v\x00"); err != nil || resp.Deleted != 1 {
		t.Fatalf("deleting the stamp key: %+v %v", resp, err)
	}
	second := acquire(t, b, "v", token(), ttl, stampAt(base+2, 0))
	if !second.Acquired || second.Record.FencingToken <= first.Record.FencingToken {
		t.Fatalf("acquire after the stamp key vanished: %+v (first token %d)", second, first.Record.FencingToken)
	}
	resp, err := raw.Get(ctx, prefix+"locks/v\x00")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("stamp key after the acquire: %+v %v", resp, err)
	}
	if got := resp.Kvs[0].Value; string(got) != etcd.EncodeStamp(second.Record.Stamp) {
		t.Fatalf("stamp key holds %x, want the acquire's stamp %s", got, second.Record.Stamp)
	}
}

func TestRacingAcquirers(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	// Two backends on one etcd: as two servers.
	prefix := testPrefix(t)
	bs := []*etcd.Backend{open(t, eps, map[string]string{"prefix": prefix}), open(t, eps, map[string]string{"prefix": prefix})}
	for round := range 3 {
		key := fmt.Sprintf("race-%d", round)
		const n = 32
		var wg sync.WaitGroup
		results := make([]backend.AcquireResult, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = bs[i%2].Acquire(context.Background(), backend.AcquireRequest{
					Key: key, OwnerToken: token(), TTL: ttl, Stamp: stampAt(time.Now().UnixNano(), 0)})
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		var winner uint64
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("racer %d: %v", i, errs[i])
			}
			if results[i].Acquired {
				winners++
				winner = results[i].Record.FencingToken
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, winners)
		}
		for i := range n {
			if !results[i].Acquired && results[i].Record.FencingToken != winner {
				t.Fatalf("loser %d sees holder token %d, want %d", i, results[i].Record.FencingToken, winner)
			}
		}
	}
}

func TestExpiryAndStaleRelease(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	old, next := token(), token()
	// The lease starts between sent and start: "too early" counts from
	// sent, "too late" from start (an answer that takes long to reach us
	// must not look like an early expiry).
	sent := time.Now()
	r1 := acquire(t, b, "e", old, ttl, stampAt(time.Now().UnixNano(), 0))
	start := time.Now()
	if !r1.Acquired {
		t.Fatal("not acquired")
	}
	freed := waitFree(t, b, "e", ttl+3*time.Second)
	took := freed.Sub(start)
	t.Logf("ttl %s: free after %s", ttl, took)
	if early := freed.Sub(sent); early < ttl-100*time.Millisecond {
		t.Fatalf("free after %s, before the TTL %s", early, ttl)
	}
	if took > ttl+time.Second {
		t.Fatalf("free after %s, later than TTL + granularity (%s)", took, ttl+time.Second)
	}
	r2 := acquire(t, b, "e", next, ttl, stampAt(time.Now().UnixNano(), 0))
	if !r2.Acquired || r2.Record.FencingToken <= r1.Record.FencingToken {
		t.Fatalf("takeover = %+v", r2)
	}
	// The stale holder wakes up: its release and extend change nothing.
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "e", OwnerToken: old}); err != nil || ok {
		t.Fatalf("stale release = %v %v", ok, err)
	}
	if res, err := b.Extend(ctx, backend.ExtendRequest{Key: "e", OwnerToken: old, TTL: ttl}); err != nil || res.Extended {
		t.Fatalf("stale extend = %+v %v", res, err)
	}
	got, held, err := b.Get(ctx, "e")
	if err != nil || !held || got.FencingToken != r2.Record.FencingToken {
		t.Fatalf("successor lost its lock: %+v %v %v", got, held, err)
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	tok := token()
	r := acquire(t, b, "x", tok, ttl, stampAt(time.Now().UnixNano(), 0))
	acquiredAt := time.Now()
	if res, err := b.Extend(ctx, backend.ExtendRequest{Key: "x", OwnerToken: token(), TTL: 4 * time.Second}); err != nil || res.Extended {
		t.Fatalf("extend with another token = %+v %v", res, err)
	}
	res, err := b.Extend(ctx, backend.ExtendRequest{Key: "x", OwnerToken: tok, TTL: 4 * time.Second})
	if err != nil || !res.Extended || res.Record.FencingToken != r.Record.FencingToken || res.Record.Stamp != r.Record.Stamp {
		t.Fatalf("extend = %+v %v", res, err)
	}
	if res.Record.Remaining < 3*time.Second {
		t.Fatalf("remaining after extend = %s", res.Record.Remaining)
	}
	// Past the original TTL the lock still holds, on the new lease.
	time.Sleep(time.Until(acquiredAt.Add(ttl + 1200*time.Millisecond))) // the passage of time is what is tested
	got, held, err := b.Get(ctx, "x")
	if err != nil || !held || got.FencingToken != r.Record.FencingToken || got.Remaining <= 0 {
		t.Fatalf("after the original TTL: %+v held=%v %v", got, held, err)
	}
	// Bad TTLs are refused.
	if _, err := b.Extend(ctx, backend.ExtendRequest{Key: "x", OwnerToken: tok, TTL: time.Second}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("extend with ttl below min: %v", err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "x", OwnerToken: tok}); err != nil || !ok {
		t.Fatalf("release after extend = %v %v", ok, err)
	}
}

func TestTTLBounds(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	for _, d := range []time.Duration{0, time.Second, -time.Second, etcd.MaxTTL + time.Second} {
		_, err := b.Acquire(ctxT(t), backend.AcquireRequest{Key: "b", OwnerToken: token(), TTL: d})
		if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "ttl") {
			t.Fatalf("ttl %s: err = %v, want invalid argument naming ttl", d, err)
		}
	}
	// A TTL of 2.1s is rounded up to 3 whole seconds.
	r := acquire(t, b, "round", token(), 2100*time.Millisecond, hlc.Timestamp{})
	if r.Record.Remaining <= 2100*time.Millisecond {
		t.Fatalf("remaining %s, want the TTL rounded up to 3s", r.Record.Remaining)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	want := []string{"jobs/a", "jobs/a/b", "jobs/b", "jobs/c", "jobs/d"}
	for _, k := range append([]string{"other", "jobs", "jobs/released"}, want...) {
		acquire(t, b, k, token(), 10*time.Second, hlc.Timestamp{})
	}
	// A released key leaves a stamp key behind; List must not show it.
	tok := token()
	acquire(t, b, "jobs/gone", tok, 10*time.Second, hlc.Timestamp{})
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "jobs/gone", OwnerToken: tok}); !ok {
		t.Fatal("release failed")
	}
	want = append(want, "jobs/released")
	sortStrings(want)
	var got []string
	tokenIn := ""
	pages := 0
	for {
		page, err := b.List(ctx, backend.ListRequest{Prefix: "jobs/", PageSize: 2, PageToken: tokenIn})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Records) > 2 {
			t.Fatalf("page of %d records", len(page.Records))
		}
		for _, r := range page.Records {
			if r.FencingToken == 0 || r.Remaining <= 0 {
				t.Fatalf("record %+v", r)
			}
			got = append(got, r.Key)
		}
		if page.NextPageToken == "" {
			break
		}
		tokenIn = page.NextPageToken
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Fatalf("list = %v in %d pages, want %v in 3", got, pages, want)
	}
	all, err := b.List(ctx, backend.ListRequest{Prefix: "", PageSize: 100})
	if err != nil || len(all.Records) != 8 || all.NextPageToken != "" {
		t.Fatalf("list all = %d records, token %q, %v", len(all.Records), all.NextPageToken, err)
	}
	if _, err := b.List(ctx, backend.ListRequest{PageSize: 0}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("page size 0: %v", err)
	}
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func TestWatchSeesAcquireReleaseExpiry(t *testing.T) {
	t.Parallel()
	b := open(t, requireEtcd(t), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	events := make(chan backend.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "w/", func(ev backend.Event) error {
			events <- ev
			return nil
		})
	}()
	next := func() backend.Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event within 10s")
		}
		return backend.Event{}
	}
	if ev := next(); ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	tok := token()
	acquire(t, b, "outside", token(), ttl, hlc.Timestamp{}) // not under w/: not seen
	r := acquire(t, b, "w/1", tok, ttl, hlc.Timestamp{})
	if ev := next(); ev.Type != backend.EventAcquired || ev.Record.Key != "w/1" || ev.Record.FencingToken != r.Record.FencingToken {
		t.Fatalf("event %v %+v, want acquired w/1", ev.Type, ev.Record)
	}
	if _, err := b.Extend(ctx, backend.ExtendRequest{Key: "w/1", OwnerToken: tok, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "w/1", OwnerToken: tok}); !ok {
		t.Fatal("release failed")
	}
	// The extend is not an event; the release is.
	if ev := next(); ev.Type != backend.EventReleased || ev.Record.Key != "w/1" || ev.Record.FencingToken != r.Record.FencingToken {
		t.Fatalf("event %v %+v, want released w/1", ev.Type, ev.Record)
	}
	r2 := acquire(t, b, "w/2", token(), ttl, hlc.Timestamp{})
	if ev := next(); ev.Type != backend.EventAcquired || ev.Record.Key != "w/2" {
		t.Fatalf("event %v %+v, want acquired w/2", ev.Type, ev.Record)
	}
	if ev := next(); ev.Type != backend.EventExpired || ev.Record.Key != "w/2" || ev.Record.FencingToken != r2.Record.FencingToken {
		t.Fatalf("event %v %+v, want expired w/2", ev.Type, ev.Record)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("watch returned %v, want context.Canceled", err)
	}
}

func TestUnreachableEtcdFailsFast(t *testing.T) {
	t.Parallel()
	// A port nobody listens on (taken, then freed).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = etcd.Open(context.Background(), map[string]string{"endpoints": addr, "dial_timeout": "1s"})
	took := time.Since(start)
	if err == nil {
		t.Fatal("open succeeded against nothing")
	}
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v, want unavailable naming %s", err, addr)
	}
	if took > 3*time.Second {
		t.Fatalf("open took %s with a 1s dial timeout", took)
	}
	t.Logf("unreachable: %v (after %s)", err, took.Round(time.Millisecond))
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []map[string]string{
		{},
		{"endpoints": " , "},
		{"endpoints": "127.0.0.1:1", "dial_timeout": "soon"},
		{"endpoints": "127.0.0.1:1", "call_timeout": "-1s"},
		{"endpoints": "127.0.0.1:1", "username": "u"},
		{"endpoints": "127.0.0.1:1", "tls_cert": "/nonexistent"},
		{"endpoints": "127.0.0.1:1", "tls_ca": "/nonexistent/ca.pem"},
		{"endpoints": "127.0.0.1:1", "bogus": "1"},
	} {
		_, err := etcd.Open(context.Background(), opts)
		if !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("options %v: err = %v, want invalid argument", opts, err)
		}
	}
}

func TestFencingAcrossEtcdRestartAndReopen(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartT(t, 1)
	prefix := testPrefix(t)
	opts := map[string]string{"prefix": prefix, "call_timeout": "1s", "dial_timeout": "2s"}
	b := open(t, c.EndpointList(), opts)
	ctx := ctxT(t)
	var last uint64
	var lastStamp hlc.Timestamp
	step := func(b *etcd.Backend, what string) {
		t.Helper()
		tok := token()
		r := acquire(t, b, "f", tok, ttl, stampAt(1, 0)) // an old proposal: the stored chain must win
		if !r.Acquired || r.Record.FencingToken <= last || !r.Record.Stamp.After(lastStamp) {
			t.Fatalf("%s: %+v, want a token above %d and a stamp after %s", what, r, last, lastStamp)
		}
		last, lastStamp = r.Record.FencingToken, r.Record.Stamp
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "f", OwnerToken: tok}); err != nil || !ok {
			t.Fatalf("%s: release %v %v", what, ok, err)
		}
	}
	step(b, "first")
	step(b, "second")

	// etcd down while serving: calls fail fast with unavailable.
	c.Members[0].Stop()
	start := time.Now()
	_, err := b.Acquire(ctx, backend.AcquireRequest{Key: "f", OwnerToken: token(), TTL: ttl})
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("acquire with etcd down: %v, want unavailable", err)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("acquire with etcd down took %s (call timeout 1s)", took)
	}
	if _, _, err := b.Get(ctx, "f"); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("get with etcd down: %v, want unavailable", err)
	}

	if err := c.Members[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The same backend recovers once etcd is back (the client reconnects).
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, _, err := b.Get(ctx, "f")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend did not recover after etcd restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // waiting for the client to reconnect
	}
	step(b, "after etcd restart")
	// A fresh backend (a restarted plugin) continues the chain.
	step(open(t, c.EndpointList(), opts), "after reopen")
}

// TestReusedLeaseHoldsFullTTL: a released lock's lease goes back to the pool
// and carries the next lock; renewed at reuse, it holds that lock for its
// full TTL (not what was left of the old one) and still expires on time.
func TestReusedLeaseHoldsFullTTL(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	prefix := testPrefix(t)
	b := open(t, eps, map[string]string{"prefix": prefix})
	raw := rawClient(t, eps)
	ctx := ctxT(t)
	leaseOf := func(key string) int64 {
		t.Helper()
		resp, err := raw.Get(ctx, prefix+"locks/"+key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("raw get %s: %v %v", key, resp, err)
		}
		return resp.Kvs[0].Lease
	}
	tok := token()
	acquire(t, b, "r1", tok, ttl, hlc.Timestamp{})
	old := leaseOf("r1")
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "r1", OwnerToken: tok}); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	time.Sleep(700 * time.Millisecond) // the lease ages: what is under test
	sent := time.Now()
	r := acquire(t, b, "r2", token(), ttl, hlc.Timestamp{})
	start := time.Now()
	if got := leaseOf("r2"); got != old {
		t.Logf("r2 got lease %x, not r1's %x (the pool may hold fresher ones)", got, old)
	}
	// A reused lease counts its TTL from the acquire (its renewal is sent
	// with it), not from its grant 700ms earlier: what is left when the
	// answer arrives is the TTL less the call's own time (which a loaded
	// machine stretches), never less.
	if took := start.Sub(sent); r.Record.Remaining < ttl-took-50*time.Millisecond {
		t.Fatalf("remaining %s on a reused lease after a %s call, want at least %s", r.Record.Remaining, took, ttl-took)
	}
	time.Sleep(time.Until(start.Add(ttl - 300*time.Millisecond))) // just before the TTL: what is under test
	if _, held, err := b.Get(ctx, "r2"); err != nil || !held {
		t.Fatalf("r2 not held just before its TTL: held=%v %v", held, err)
	}
	freed := waitFree(t, b, "r2", 3*time.Second)
	if took := freed.Sub(start); took > ttl+time.Second {
		t.Fatalf("r2 free after %s, want within %s", took, ttl+time.Second)
	}
}

func rawClient(t testing.TB, eps string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestTLSAndAuth: etcd serving over TLS with client certificates and with
// authentication on; the backend connects with the tls_* and
// username/password options, and is refused without them.
func TestTLSAndAuth(t *testing.T) {
	t.Parallel()
	if _, err := etcdtest.Binary(); err != nil {
		harness.SkipOrFail(t, err.Error())
	}
	dir := t.TempDir()
	files := harness.WriteMutualTLS(t, dir)
	certs := &etcdtest.TLS{
		CertFile: files.ServerCertFile, KeyFile: files.ServerKeyFile, CAFile: files.CAFile,
		ClientCertAuth: true, ClientCertFile: files.ClientCertFile, ClientKeyFile: files.ClientKeyFile,
	}
	ctx := ctxT(t)
	c, err := etcdtest.StartWith(ctx, dir, 1, etcdtest.Options{TLS: certs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	eps := c.EndpointList()
	tlsOpts := map[string]string{"tls_ca": certs.CAFile, "tls_cert": certs.ClientCertFile, "tls_key": certs.ClientKeyFile}

	// Turn authentication on, with a root user.
	tlsCfg, err := (transport.TLSInfo{TrustedCAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.UserAdd(ctx, "root", "s3cret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}

	// Without a client certificate: refused at start-up, naming the endpoint.
	if _, err := etcd.Open(ctx, map[string]string{"endpoints": eps, "tls_ca": certs.CAFile, "username": "root", "password": "s3cret", "dial_timeout": "2s"}); err == nil || !strings.Contains(err.Error(), eps) {
		t.Fatalf("open without a client certificate: %v", err)
	}
	// Without credentials: refused.
	if _, err := etcd.Open(ctx, mergeOpts(tlsOpts, map[string]string{"endpoints": eps, "dial_timeout": "2s"})); err == nil {
		t.Fatal("open without credentials succeeded on an etcd with auth on")
	}
	// Wrong password: refused.
	if _, err := etcd.Open(ctx, mergeOpts(tlsOpts, map[string]string{"endpoints": eps, "username": "root", "password": "nope", "dial_timeout": "2s"})); err == nil {
		t.Fatal("open with a wrong password succeeded")
	}
	// host:port endpoints become https:// when TLS is on.
	hostPort := strings.TrimPrefix(eps, "https://")
	b := open(t, hostPort, mergeOpts(tlsOpts, map[string]string{"username": "root", "password": "s3cret"}))
	tok := token()
	r := acquire(t, b, "secure", tok, ttl, hlc.Timestamp{})
	if !r.Acquired {
		t.Fatal("not acquired")
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "secure", OwnerToken: tok}); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
}

func mergeOpts(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
