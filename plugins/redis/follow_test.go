package redis_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// following runs Follow in the background, collects its events as a
// watcher does, and takes changes.
type following struct {
	*watcher
	changes chan backend.FollowChange
}

func follow(t *testing.T, b backend.Backend) *following {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &following{
		watcher: &watcher{events: make(chan backend.Event, 100), done: make(chan error, 1), cancel: cancel},
		changes: make(chan backend.FollowChange),
	}
	go func() {
		f.done <- backend.Following(b).Follow(ctx, f.changes, func(e backend.Event) error {
			f.events <- e
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Logf("follow ended: %v", err)
		}
	})
	if e := f.next(t); e.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", e.Type)
	}
	return f
}

// change sends c and returns once Follow has called its Applied.
func (f *following) change(t *testing.T, c backend.FollowChange) {
	t.Helper()
	applied := make(chan struct{})
	c.Applied = func() { close(applied) }
	select {
	case f.changes <- c:
	case err := <-f.done:
		t.Fatalf("follow ended: %v", err)
	}
	select {
	case <-applied:
	case err := <-f.done:
		t.Fatalf("follow ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("change not applied within 5s")
	}
}

// cycle takes and gives back key on b and returns the fencing token.
func cycle(t *testing.T, b backend.Backend, key string) uint64 {
	t.Helper()
	tok := token()
	r := acquire(t, b, key, tok, time.Minute)
	if !r.Acquired {
		t.Fatalf("acquire %q: %+v", key, r)
	}
	if ok, err := b.Release(ctxT(t), backend.ReleaseRequest{Key: key, OwnerToken: tok}); err != nil || !ok {
		t.Fatalf("release %q: %v %v", key, ok, err)
	}
	return r.Record.FencingToken
}

// expectCycle takes the acquired and released events of key's cycle with
// fencing token fence, which must be the next two.
func (f *following) expectCycle(t *testing.T, key string, fence uint64) {
	t.Helper()
	for _, want := range []backend.EventType{backend.EventAcquired, backend.EventReleased} {
		if e := f.next(t); e.Type != want || e.Record.Key != key || e.Record.FencingToken != fence {
			t.Fatalf("event %v %q %d, want %v %q %d", e.Type, e.Record.Key, e.Record.FencingToken, want, key, fence)
		}
	}
}

// subscribers reads from Redis how many subscribe to the event channel of
// each of keys, and how many patterns are subscribed to.
func subscribers(t *testing.T, rc *goredis.Client, prefix string, keys ...string) ([]int64, int64) {
	t.Helper()
	ctx := ctxT(t)
	channels := make([]string, len(keys))
	for i, k := range keys {
		channels[i] = prefix + "events:" + k
	}
	subs, err := rc.PubSubNumSub(ctx, channels...).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := make([]int64, len(keys))
	for i, c := range channels {
		n[i] = subs[c]
	}
	pats, err := rc.PubSubNumPat(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n, pats
}

func TestFollowSubscribesOnlyToFollowedKeys(t *testing.T) {
	srv := redistest.Start(t) // its own: the test counts every pattern subscription
	const prefix = "f:"
	b := open(t, srv.Addr, "key_prefix", prefix)
	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer func() { _ = rc.Close() }()

	f := follow(t, b)
	// Followed nothing: Redis has no subscriber to any key's events (the
	// Watch "" that Follow filtered before was a pattern on all of them).
	if n, pats := subscribers(t, rc, prefix, "k", "other"); n[0] != 0 || n[1] != 0 || pats != 0 {
		t.Fatalf("following nothing: subscribers %v, patterns %d; want none", n, pats)
	}
	f.change(t, backend.FollowChange{Keys: []string{"k"}, Prefixes: []string{"p/"}})
	if n, pats := subscribers(t, rc, prefix, "k", "other"); n[0] != 1 || n[1] != 0 || pats != 1 {
		t.Fatalf("following k and p/: subscribers of k, other %v, patterns %d; want 1, 0 and 1", n, pats)
	}
	// An unfollowed key's events, had Redis sent them, would come first.
	cycle(t, b, "other")
	f.expectCycle(t, "k", cycle(t, b, "k"))
	cycle(t, b, "other")
	f.expectCycle(t, "p/a", cycle(t, b, "p/a"))

	// A key followed on its own and under two prefixes: Redis sends the
	// feed each event three times, Follow sends it once.
	f.change(t, backend.FollowChange{Keys: []string{"p/x"}, Prefixes: []string{"p/x"}})
	f.expectCycle(t, "p/x", cycle(t, b, "p/x"))
	f.expectCycle(t, "k", cycle(t, b, "k"))
	// Without its own channel, under two prefixes: once.
	f.change(t, backend.FollowChange{DropKeys: []string{"p/x"}})
	f.expectCycle(t, "p/x", cycle(t, b, "p/x"))
	f.expectCycle(t, "k", cycle(t, b, "k"))

	// Dropped, they are no more subscribed to; a key dropped and added in
	// one change stays followed.
	f.change(t, backend.FollowChange{DropKeys: []string{"k", "other"}, Keys: []string{"other"}, DropPrefixes: []string{"p/", "p/x"}})
	if n, pats := subscribers(t, rc, prefix, "k", "other"); n[0] != 0 || n[1] != 1 || pats != 0 {
		t.Fatalf("after the drop: subscribers of k, other %v, patterns %d; want 0, 1 and 0", n, pats)
	}
	cycle(t, b, "k")
	cycle(t, b, "p/a")
	f.expectCycle(t, "other", cycle(t, b, "other"))

	// A prefix's glob characters are literal: g*?[x]\/ covers neither gzz
	// nor g*?x\/a.
	f.change(t, backend.FollowChange{Prefixes: []string{`g*?[x]\/`}})
	cycle(t, b, "gzz")
	cycle(t, b, `g*?x\/a`)
	f.expectCycle(t, `g*?[x]\/a`, cycle(t, b, `g*?[x]\/a`))

	// Every key's expiry is sent, followed or not.
	x := acquire(t, b, "expiring", token(), 50*time.Millisecond)
	if e := f.next(t); e.Type != backend.EventExpired || e.Record.Key != "expiring" || e.Record.FencingToken != x.Record.FencingToken {
		t.Fatalf("event %v %+v, want the expiry of the unfollowed %q", e.Type, e.Record, "expiring")
	}
}

// TestFollowAppliedOnlyOnceRedisSubscribed: the backend's connections reach
// Redis late, so a change's SUBSCRIBE is still on its way when a Follow that
// called Applied on sending it would call it; an Acquire made at once on
// another connection would then publish before Redis subscribed the feed.
func TestFollowAppliedOnlyOnceRedisSubscribed(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := "t" + token()[:8] + ":"
	b := open(t, slowProxy(t, addr, 200*time.Millisecond), "key_prefix", prefix)
	direct := open(t, addr, "key_prefix", prefix)
	f := follow(t, b)
	for i, key := range []string{"late/k", "late/p/"} {
		c := backend.FollowChange{Keys: []string{key}}
		if i == 1 {
			c = backend.FollowChange{Prefixes: []string{key}}
			key += "a"
		}
		f.change(t, c)
		f.expectCycle(t, key, cycle(t, direct, key))
	}
}

// slowProxy forwards connections to addr and holds what clients send for
// delay before passing it on; what Redis sends comes back at once. It
// closes when t ends.
func slowProxy(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(3)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, s)
				_ = c.Close()
			}()
			type chunk struct {
				b  []byte
				at time.Time
			}
			chunks := make(chan chunk, 1024)
			go func() {
				defer wg.Done()
				defer close(chunks)
				for {
					buf := make([]byte, 32<<10)
					n, err := c.Read(buf)
					if n > 0 {
						chunks <- chunk{buf[:n], time.Now().Add(delay)}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer func() { _ = s.Close() }()
				for ch := range chunks {
					time.Sleep(time.Until(ch.at)) // the delay is the point: the proxy is a slow network
					if _, err := s.Write(ch.b); err != nil {
						for range chunks {
						}
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestFollowEndsUnavailableWhenItsConnectionIsLost(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv.Addr)
	f := follow(t, b)
	f.change(t, backend.FollowChange{Keys: []string{"k"}})
	rc := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer func() { _ = rc.Close() }()
	// go-redis would subscribe again on a new connection; events published
	// in between would be lost, so Follow must end instead.
	if err := rc.ClientKillByFilter(ctxT(t), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.done:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("follow ended with %v, want unavailable", err)
		}
		f.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("follow still running 10s after its connections were killed")
	}
}
