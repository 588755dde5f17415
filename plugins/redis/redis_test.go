package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	"github.com/holdfast/holdfast/proto/hlc"
)

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// open connects a backend to addr with a key prefix of its own, so tests
// sharing one Redis do not see each other's locks.
func open(t *testing.T, addr string, extra ...string) *redis.Backend {
	t.Helper()
	opts := map[string]string{"addrs": addr, "key_prefix": "t" + token()[:8] + ":"}
	for i := 0; i+1 < len(extra); i += 2 {
		opts[extra[i]] = extra[i+1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := redis.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = b.(*redis.Backend).Close() })
	return b.(*redis.Backend)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func stamp(wall int64, logical uint32) hlc.Timestamp {
	return hlc.Timestamp{WallTime: wall, Logical: logical}
}

func acquire(t *testing.T, b backend.Backend, key, tok string, ttl time.Duration) backend.AcquireResult {
	t.Helper()
	res, err := b.Acquire(ctxT(t), backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl, Holder: "test", Stamp: hlc.NewClock(nil, 0).Now()})
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return res
}

func TestInfo(t *testing.T) {
	b := open(t, redistest.Addr(t))
	info, err := b.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "redis" || !info.Shared || info.TTLGranularity != time.Millisecond || info.Fair {
		t.Fatalf("info = %+v", info)
	}
	if info.Durable {
		t.Fatalf("a Redis without fsync'd AOF must not claim durable: %+v", info)
	}
	if !strings.Contains(info.Version, "redis ") {
		t.Fatalf("version %q does not name the Redis server's version", info.Version)
	}
}

func TestAcquireExtendGetRelease(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	const key = "jobs/nightly"
	tokA, tokB := token(), token()
	s1 := stamp(time.Now().UnixNano(), 7)
	r, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tokA, TTL: 5 * time.Second, Holder: "host-a pid 1", Stamp: s1})
	if err != nil || !r.Acquired {
		t.Fatalf("acquire free key: %+v %v", r, err)
	}
	if r.Record.Key != key || r.Record.Holder != "host-a pid 1" || r.Record.FencingToken == 0 || r.Record.Stamp != s1 {
		t.Fatalf("record = %+v, want stamp %v", r.Record, s1)
	}
	if r.Record.Remaining <= 4*time.Second || r.Record.Remaining > 5*time.Second {
		t.Fatalf("remaining = %s", r.Record.Remaining)
	}
	if d := time.Until(r.Record.ExpiresAt); d < 3*time.Second || d > 6*time.Second {
		t.Fatalf("expires at %s (in %s)", r.Record.ExpiresAt, d)
	}

	// Contention: not an error, reports the holder.
	r2, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tokB, TTL: time.Second, Holder: "host-b", Stamp: s1})
	if err != nil || r2.Acquired || r2.Record.Holder != "host-a pid 1" || r2.Record.FencingToken != r.Record.FencingToken {
		t.Fatalf("contended acquire = %+v %v", r2, err)
	}
	// A retried acquisition with the same token answers acquired, same lock.
	r3, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tokA, TTL: 5 * time.Second, Holder: "host-a pid 1", Stamp: s1})
	if err != nil || !r3.Acquired || r3.Record.FencingToken != r.Record.FencingToken {
		t.Fatalf("retried acquire = %+v %v", r3, err)
	}

	// Extend: only the owner.
	if e, err := b.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: tokB, TTL: time.Minute}); err != nil || e.Extended {
		t.Fatalf("extend by a stranger = %+v %v", e, err)
	}
	e, err := b.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: tokA, TTL: time.Minute, Stamp: s1.Next()})
	if err != nil || !e.Extended || e.Record.FencingToken != r.Record.FencingToken || e.Record.Remaining <= 50*time.Second {
		t.Fatalf("extend by the owner = %+v %v", e, err)
	}

	g, ok, err := b.Get(ctx, key)
	if err != nil || !ok || g.FencingToken != r.Record.FencingToken || g.Holder != "host-a pid 1" || g.Remaining <= 50*time.Second {
		t.Fatalf("get = %+v %v %v", g, ok, err)
	}
	if _, ok, err := b.Get(ctx, "no/such/key"); err != nil || ok {
		t.Fatalf("get of a free key = %v %v", ok, err)
	}

	// Release: only the owner.
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tokB}); err != nil || ok {
		t.Fatalf("release by a stranger = %v %v", ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tokA, Stamp: s1.Next().Next()}); err != nil || !ok {
		t.Fatalf("release by the owner = %v %v", ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tokA}); err != nil || ok {
		t.Fatalf("second release = %v %v", ok, err)
	}
	if _, ok, err := b.Get(ctx, key); err != nil || ok {
		t.Fatalf("get after release = %v %v", ok, err)
	}

	// The next holder: larger fencing token, and a stamp after the release's
	// stamp even though the proposal is older (NextStamp).
	old := stamp(s1.WallTime-int64(time.Hour), 0)
	n, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tokB, TTL: time.Second, Holder: "host-b", Stamp: old})
	if err != nil || !n.Acquired {
		t.Fatalf("acquire after release = %+v %v", n, err)
	}
	if n.Record.FencingToken <= r.Record.FencingToken {
		t.Fatalf("fencing went from %d to %d", r.Record.FencingToken, n.Record.FencingToken)
	}
	if want := s1.Next().Next().Next(); n.Record.Stamp != want {
		t.Fatalf("stamp = %v, want successor of the release stamp %v", n.Record.Stamp, want)
	}
}

func TestStampCarriesOverWallTime(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	// The successor of a stamp whose logical counter is at its maximum.
	last := stamp(1_700_000_000_999_999_999, ^uint32(0))
	r := acquireWith(t, b, "k", last)
	if _, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: r.tok}); err != nil {
		t.Fatal(err)
	}
	n := acquireWith(t, b, "k", stamp(1, 0))
	if want := last.Next(); n.rec.Stamp != want || want != stamp(1_700_000_001_000_000_000, 0) {
		t.Fatalf("stamp = %v, want %v", n.rec.Stamp, want)
	}
}

type held struct {
	tok string
	rec backend.Record
}

func acquireWith(t *testing.T, b backend.Backend, key string, s hlc.Timestamp) held {
	t.Helper()
	tok := token()
	r, err := b.Acquire(ctxT(t), backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: time.Minute, Stamp: s})
	if err != nil || !r.Acquired {
		t.Fatalf("acquire: %+v %v", r, err)
	}
	return held{tok, r.Record}
}

func TestTTLBounds(t *testing.T) {
	b := open(t, redistest.Addr(t), "max_ttl", "1m")
	for _, ttl := range []time.Duration{0, time.Millisecond, 2 * time.Minute} {
		_, err := b.Acquire(ctxT(t), backend.AcquireRequest{Key: "k", OwnerToken: token(), TTL: ttl})
		if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "ttl") {
			t.Errorf("ttl %s: err = %v, want invalid argument naming ttl", ttl, err)
		}
	}
}

func TestRacingAcquirersExactlyOneWins(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	for round := range 5 {
		key := fmt.Sprintf("race/%d", round)
		const n = 32
		var wg sync.WaitGroup
		wins := make(chan string, n)
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tok := token()
				r, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Acquired {
					wins <- tok
				}
			}()
		}
		close(start)
		wg.Wait()
		close(wins)
		if got := len(wins); got != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, got)
		}
	}
}

// waitFree polls until key is free, with a deadline, and returns when.
func waitFree(t *testing.T, b backend.Backend, key string, deadline time.Duration) time.Time {
	t.Helper()
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		if _, ok, err := b.Get(ctxT(t), key); err == nil && !ok {
			return time.Now()
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%q still held after %s", key, deadline)
	return time.Time{}
}

func TestStaleReleaseLeavesSuccessor(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	old := acquire(t, b, "k", "old-token", 30*time.Millisecond)
	waitFree(t, b, "k", 2*time.Second)
	succ := acquire(t, b, "k", "new-token", time.Minute)
	if !old.Acquired || !succ.Acquired || succ.Record.FencingToken <= old.Record.FencingToken {
		t.Fatalf("old %+v, successor %+v", old, succ)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "old-token"}); err != nil || ok {
		t.Fatalf("stale release = %v %v", ok, err)
	}
	if e, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "old-token", TTL: time.Minute}); err != nil || e.Extended {
		t.Fatalf("stale extend = %+v %v", e, err)
	}
	g, ok, err := b.Get(ctx, "k")
	if err != nil || !ok || g.FencingToken != succ.Record.FencingToken {
		t.Fatalf("successor's lock after stale release: %+v %v %v", g, ok, err)
	}
}

func TestExpiryWithinTTLAndGranularity(t *testing.T) {
	b := open(t, redistest.Addr(t))
	const ttl = 200 * time.Millisecond
	// Slack: the poll loop's own step and a loaded 2-core machine's scheduling.
	const slack = 100 * time.Millisecond
	info, _ := b.Info(ctxT(t))
	for i := range 3 {
		key := fmt.Sprintf("ttl/%d", i)
		start := time.Now()
		r := acquire(t, b, key, token(), ttl)
		acquiredBy := time.Now()
		if !r.Acquired {
			t.Fatal("not acquired")
		}
		// sentAt/answeredAt: when the first successful probe was sent and
		// answered; Redis ran it somewhere in between.
		var sentAt, answeredAt time.Time
		for deadline := start.Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			probe := time.Now()
			if res := acquire(t, b, key, token(), time.Second); res.Acquired {
				sentAt, answeredAt = probe, time.Now()
				break
			}
		}
		if sentAt.IsZero() {
			t.Fatal("lock never expired")
		}
		// Held for at least its TTL: the lock was set after start and taken
		// over before answeredAt.
		if held := answeredAt.Sub(start); held < ttl {
			t.Fatalf("taken over %s after the acquire was sent, before its TTL %s", held, ttl)
		}
		// Free again within TTL + granularity (+ slack): set before
		// acquiredBy, free from then on, and the first probe sent after that
		// succeeded.
		if late := sentAt.Sub(acquiredBy); late > ttl+info.TTLGranularity+slack {
			t.Fatalf("free only after %s, want within %s + %s + %s", late, ttl, info.TTLGranularity, slack)
		}
	}
}

func TestListPagesInKeyOrder(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	want := []string{"a/1", "a/2", "a/{brace}", "a/%7Bnot-an-escape", "a/3*", "b/1"}
	for _, k := range want {
		if !acquire(t, b, k, token(), time.Minute).Acquired {
			t.Fatalf("acquire %q", k)
		}
	}
	var got []string
	tokenPage := ""
	for pages := 0; ; pages++ {
		p, err := b.List(ctx, backend.ListRequest{Prefix: "a/", PageSize: 2, PageToken: tokenPage})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Records) > 2 {
			t.Fatalf("page of %d records, size 2", len(p.Records))
		}
		for _, r := range p.Records {
			if r.FencingToken == 0 || r.Remaining <= 0 {
				t.Fatalf("record %+v", r)
			}
			got = append(got, r.Key)
		}
		if p.NextPageToken == "" {
			break
		}
		tokenPage = p.NextPageToken
	}
	exp := []string{"a/%7Bnot-an-escape", "a/1", "a/2", "a/3*", "a/{brace}"}
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Fatalf("listed %q, want %q", got, exp)
	}
	// A glob character in the prefix is literal.
	p, err := b.List(ctx, backend.ListRequest{Prefix: "a/3*", PageSize: 10})
	if err != nil || len(p.Records) != 1 || p.Records[0].Key != "a/3*" {
		t.Fatalf("list a/3* = %+v %v", p, err)
	}
}

// watcher runs Watch in the background and collects its events.
type watcher struct {
	events chan backend.Event
	done   chan error
	cancel context.CancelFunc
}

func watch(t *testing.T, b backend.Backend, prefix string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{events: make(chan backend.Event, 100), done: make(chan error, 1), cancel: cancel}
	go func() {
		w.done <- b.Watch(ctx, prefix, func(e backend.Event) error {
			w.events <- e
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		// How the watch ended is for the test to judge (some stop Redis
		// under it); here it only has to end.
		if err := <-w.done; err != nil {
			t.Logf("watch of %q ended: %v", prefix, err)
		}
	})
	if e := w.next(t); e.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", e.Type)
	}
	return w
}

func (w *watcher) next(t *testing.T) backend.Event {
	t.Helper()
	select {
	case e := <-w.events:
		return e
	case err := <-w.done:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return backend.Event{}
}

func TestWatchReleaseAndExpiry(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	w := watch(t, b, "w/")

	r := acquire(t, b, "w/a", "tok-a", time.Minute)
	acquire(t, b, "other/x", token(), time.Minute) // outside the prefix
	if e := w.next(t); e.Type != backend.EventAcquired || e.Record.Key != "w/a" || e.Record.FencingToken != r.Record.FencingToken || e.Record.Holder != "test" {
		t.Fatalf("event %v %+v", e.Type, e.Record)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "w/a", OwnerToken: "tok-a"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if e := w.next(t); e.Type != backend.EventReleased || e.Record.Key != "w/a" || e.Record.FencingToken != r.Record.FencingToken {
		t.Fatalf("event %v %+v", e.Type, e.Record)
	}

	start := time.Now()
	x := acquire(t, b, "w/expiring", token(), 100*time.Millisecond)
	// Acquired and expired, in either order: the expiry comes over another
	// connection (keyspace notifications) and may overtake the acquire.
	var (
		got     []backend.EventType
		expired time.Duration
	)
	for range 2 {
		e := w.next(t)
		if e.Record.Key != "w/expiring" || e.Record.FencingToken != x.Record.FencingToken {
			t.Fatalf("event %v %+v", e.Type, e.Record)
		}
		if got = append(got, e.Type); e.Type == backend.EventExpired {
			expired = time.Since(start)
		}
	}
	checkEvents(t, "w/expiring", got)
	if expired < 100*time.Millisecond {
		t.Fatalf("expired event after %s, before the TTL", expired)
	}
	t.Logf("expiry event %s after acquire (TTL 100ms)", expired)
}

func TestFencingMonotonicAcrossRedisRestartWithoutPersistence(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv.Addr)
	ctx := ctxT(t)
	// A chain of holders: releases and a takeover after expiry.
	var last uint64
	for i := range 10 {
		tok := token()
		r := acquire(t, b, "fenced", tok, time.Minute)
		if !r.Acquired || r.Record.FencingToken <= last {
			t.Fatalf("acquisition %d: %+v after token %d", i, r, last)
		}
		last = r.Record.FencingToken
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "fenced", OwnerToken: tok}); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
	}
	r := acquire(t, b, "fenced", token(), 20*time.Millisecond)
	waitFree(t, b, "fenced", 2*time.Second)
	if r.Record.FencingToken <= last {
		t.Fatalf("fencing went back from %d to %d", last, r.Record.FencingToken)
	}
	last = r.Record.FencingToken
	// Hold it across the first restart: the lock and its meta hash vanish.
	if r = acquire(t, b, "fenced", token(), time.Minute); !r.Acquired || r.Record.FencingToken <= last {
		t.Fatalf("takeover after expiry: %+v after %d", r, last)
	}
	last = r.Record.FencingToken

	for restart := range 3 {
		srv.Restart(t)
		// The new server is empty: the old lock and its meta hash are gone.
		var r backend.AcquireResult
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			r, err = b.Acquire(ctx, backend.AcquireRequest{Key: "fenced", OwnerToken: token(), TTL: time.Minute})
			if err == nil {
				break
			}
			if !errors.Is(err, backend.ErrUnavailable) || time.Now().After(deadline) {
				t.Fatalf("acquire after restart: %v", err)
			}
		}
		if !r.Acquired {
			t.Fatalf("restart %d: key still held on an empty Redis: %+v", restart, r)
		}
		if r.Record.FencingToken <= last {
			t.Fatalf("restart %d: fencing token went back from %d to %d", restart, last, r.Record.FencingToken)
		}
		last = r.Record.FencingToken
	}
}

func TestWatchEndsUnavailableWhenRedisStops(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv.Addr)
	w := watch(t, b, "")
	srv.Stop(t)
	select {
	case err := <-w.done:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("watch ended with %v, want unavailable", err)
		}
		w.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("watch still running 10s after Redis stopped")
	}
}

func TestCallsAnswerUnavailableQuicklyWhenRedisIsGone(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv.Addr)
	acquire(t, b, "k", token(), time.Minute)
	srv.Kill(t)
	ctx := ctxT(t)
	calls := map[string]func() error{
		"acquire": func() error {
			_, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: token(), TTL: time.Second})
			return err
		},
		"release": func() error { _, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "x"}); return err },
		"extend": func() error {
			_, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "x", TTL: time.Second})
			return err
		},
		"get":  func() error { _, _, err := b.Get(ctx, "k"); return err },
		"list": func() error { _, err := b.List(ctx, backend.ListRequest{PageSize: 10}); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("%s: err = %v, want unavailable", name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s took %s to fail", name, d)
		}
	}
}

func TestWrongAddressFailsStartupQuickly(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Stop(t) // now nothing listens there
	start := time.Now()
	_, err := redis.Open(context.Background(), map[string]string{"addrs": addr, "dial_timeout": "1s"})
	if err == nil {
		t.Fatal("open of a closed port succeeded")
	}
	if !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %q does not name the address", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s to fail", d)
	}
}

func TestWrongCredentialsFailStartup(t *testing.T) {
	addr := redistest.Addr(t)
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	ctx := ctxT(t)
	user, pass := "holdfast-"+token()[:8], token()
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">"+pass, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	defer admin.Do(context.Background(), "ACL", "DELUSER", user)

	_, err := redis.Open(ctx, map[string]string{"addrs": addr, "username": user, "password": "wrong"})
	if err == nil || !strings.Contains(err.Error(), "username/password") {
		t.Fatalf("wrong password: err = %v, want a clear credentials error", err)
	}
	_, err = redis.Open(ctx, map[string]string{"addrs": addr, "username": "nobody-" + user, "password": pass})
	if err == nil {
		t.Fatal("unknown user accepted")
	}

	b := open(t, addr, "username", user, "password", pass)
	if r := acquire(t, b, "acl", token(), time.Second); !r.Acquired {
		t.Fatal("ACL user could not acquire")
	}
	// The ACL user may subscribe (its channels are allowed): Watch syncs.
	watch(t, b, "acl")
}

func TestOptions(t *testing.T) {
	for _, bad := range []map[string]string{
		{"adrs": "x"},
		{"db": "-1"},
		{"key_prefix": "a{b}"},
		{"min_ttl": "1s", "max_ttl": "1ms"},
		{"tls_cert": "c.pem"},
		{"durable": "maybe"},
		{"addrs": " , "},
	} {
		if _, err := redis.ParseOptions(bad); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("%v: err = %v, want invalid argument", bad, err)
		}
	}
	o, err := redis.ParseOptions(map[string]string{"addrs": "a:1, b:2", "master_name": "m", "meta_retention": "0"})
	if err != nil || len(o.Addrs) != 2 || o.MasterName != "m" || o.MetaRetention != 0 || o.TLSInsecureSkipVerify {
		t.Fatalf("%+v %v", o, err)
	}
}
