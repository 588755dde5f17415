package holdfast

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
)

// Against the real server (memory backend, a real plugin process).

func dialServer(t *testing.T, s *testServer, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(s.URL, append([]Option{WithBackoff(Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func inspect(t *testing.T, c *Client, key string) (LockState, bool) {
	t.Helper()
	st, held, err := c.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return st, held
}

// awaitWaiters polls until the server reports n callers queued on key.
func awaitWaiters(t *testing.T, c *Client, key string, n uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := inspect(t, c, key)
		if st.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters on %q after 10s, want %d", st.Waiters, key, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestServerInfoAndProtocols(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	for _, p := range []Protocol{ProtocolConnect, ProtocolGRPC, ProtocolGRPCWeb} {
		t.Run(p.String(), func(t *testing.T) {
			c := dialServer(t, s, WithProtocol(p))
			info, err := c.ServerInfo(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.Backend.Name != "memory" || info.Backend.Shared || info.Backend.MinTTL <= 0 || info.Stamp.IsZero() {
				t.Fatalf("%+v", info)
			}
			key := "proto/" + p.String()
			g, err := c.Lock(key).TTL(2 * time.Second).TryLock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if st, held := inspect(t, c, key); !held || st.Holder != c.opts.holder {
				t.Fatalf("inspect %+v held=%v", st, held)
			}
			if err := g.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if _, held := inspect(t, c, key); held {
				t.Fatal("still held after Unlock")
			}
			// Server streaming works over the protocol too.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for ev, err := range c.Watch(ctx, key) {
				if err != nil || ev.Type != EventSynced {
					t.Fatalf("first watch event %v, %v", ev.Type, err)
				}
				break
			}
		})
	}
}

func TestGuardHeldThreeTTLsByTheWatchdogKeepsItsFencingToken(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	other := dialServer(t, s, WithHolder("other"))
	const ttl = 600 * time.Millisecond
	g, err := c.Lock("held").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := g.FencingToken()
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		_, err := other.Lock("held").TTL(ttl).TryLock(t.Context())
		var na *NotAcquiredError
		if !errors.As(err, &na) || na.Current == nil || na.Current.FencingToken != tok {
			t.Fatalf("contender: %v", err)
		}
		time.Sleep(ttl / 4) // sample the lock a few times per TTL
	}
	if got, err := g.FencingToken(); err != nil || got != tok {
		t.Fatalf("fencing token %d, %v; want %d", got, err, tok)
	}
	if st, held := inspect(t, c, "held"); !held || st.FencingToken != tok {
		t.Fatalf("server: %+v held=%v", st, held)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	g2, err := other.Lock("held").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if tok2, _ := g2.FencingToken(); tok2 <= tok {
		t.Fatalf("successor's token %d not above %d", tok2, tok)
	}
	_ = g2.Unlock(t.Context())
}

// A holder that stops renewing (its process paused) loses the lease; the
// successor takes over; the stale holder's Unlock reports the loss and
// cannot delete the successor's lock; the fence refuses its late write.
func TestStaleHolderCannotReleaseTheSuccessor(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	a := dialServer(t, s, WithHolder("a"))
	b := dialServer(t, s, WithHolder("b"))
	const ttl = 300 * time.Millisecond
	ga, err := a.Lock("stale").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tokA, _ := ga.FencingToken()
	var fence Fence
	if err := fence.Admit(tokA); err != nil {
		t.Fatal(err)
	}
	ga.stop() // as if a's process were paused: no more renewals
	waitDone(t, ga, ttl+slack)
	if lossOf(t, ga).Reason != LossExpired {
		t.Fatal("want LossExpired")
	}
	gb, err := b.Lock("stale").TTL(5 * time.Second).Wait(5 * time.Second).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tokB, _ := gb.FencingToken()
	if tokB <= tokA {
		t.Fatalf("successor token %d not above %d", tokB, tokA)
	}
	if err := fence.Admit(tokB); err != nil {
		t.Fatal(err)
	}
	if err := ga.Unlock(t.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale Unlock: %v, want ErrLeaseLost", err)
	}
	if st, held := inspect(t, b, "stale"); !held || st.FencingToken != tokB || st.Holder != "b" {
		t.Fatalf("successor's lock after the stale Unlock: %+v held=%v", st, held)
	}
	if err := fence.Admit(tokA); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("stale write admitted: %v", err)
	}
	if err := gb.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The server forgets the lock (a memory backend restarted with the server):
// the next renewal answers extended=false and poisons the guard within its
// TTL.
func TestRenewalRejectedAfterServerRestartPoisons(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	const ttl = 1500 * time.Millisecond
	g, err := c.Lock("restart").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	// The port we were given is ours to reuse for the restarted server.
	startServer(t, s.addr)
	at := waitDone(t, g, ttl+slack)
	lost := lossOf(t, g)
	if lost.Reason != LossRejected {
		t.Fatalf("loss %v, want LossRejected (extended=false)", lost)
	}
	g.mu.Lock()
	expiry := g.expiry
	g.mu.Unlock()
	if !at.Before(expiry.Add(slack)) {
		t.Fatalf("poisoned %s after the local expiry; rejection should come first", at.Sub(expiry))
	}
	if err := g.Unlock(t.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock: %v", err)
	}
}

// The server goes away (stopped, or frozen so that calls hang): the guard
// is poisoned at its local expiry, TTL after the last successful renewal was
// sent, and not before.
func TestServerUnreachablePoisonsAtLocalExpiry(t *testing.T) {
	for _, how := range []string{"stopped", "frozen"} {
		t.Run(how, func(t *testing.T) {
			s := startServer(t, "127.0.0.1:0")
			c := dialServer(t, s)
			const ttl = 900 * time.Millisecond
			g, err := c.Lock("gone").TTL(ttl).TryLock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Let a renewal or two happen first.
			time.Sleep(ttl / 2)
			if err := g.Err(); err != nil {
				t.Fatal(err)
			}
			if how == "stopped" {
				s.stop()
			} else {
				s.pause()
			}
			at := waitDone(t, g, ttl+slack)
			g.mu.Lock()
			lastSent, ttlNow := g.lastSent, g.ttl
			g.mu.Unlock()
			// The local expiry keeps the margin (TTL/100 + 20ms) back from
			// the lease's end as the server counts it.
			expiry := c.localExpiry(lastSent, ttlNow)
			if margin := lastSent.Add(ttlNow).Sub(expiry); margin != DefaultExpiryMargin.For(ttlNow) {
				t.Fatalf("local expiry %s before sent+TTL, want the margin %s", margin, DefaultExpiryMargin.For(ttlNow))
			}
			if at.Before(expiry) {
				t.Fatalf("poisoned %s before the local expiry", expiry.Sub(at))
			}
			if late := at.Sub(expiry); late > slack {
				t.Fatalf("poisoned %s after the local expiry", late)
			}
			lost := lossOf(t, g)
			if lost.Reason != LossExpired || lost.LastErr == nil {
				t.Fatalf("loss %v, want LossExpired with the last renewal error", lost)
			}
			if how == "stopped" && !errors.Is(lost, ErrUnavailable) {
				t.Fatalf("last error %v, want ErrUnavailable", lost.LastErr)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			if err := g.Unlock(ctx); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Unlock: %v", err)
			}
			if how == "frozen" {
				s.resume()
			}
		})
	}
}

func TestStampsIncreaseAlongTheChainOfHolders(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	clients := []*Client{dialServer(t, s), dialServer(t, s), dialServer(t, s)}
	var last hlc.Timestamp
	for i := range 9 {
		c := clients[i%len(clients)]
		before := c.Now()
		g, err := c.Lock("chain").TTL(time.Second).Wait(5 * time.Second).Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		st := g.Stamp()
		if !st.After(last) {
			t.Fatalf("holder %d stamp %s not after %s", i, st, last)
		}
		if !st.After(before) {
			t.Fatalf("holder %d stamp %s not after the client's earlier reading %s", i, st, before)
		}
		if now := c.Now(); !now.After(st) {
			t.Fatalf("client clock %s not merged past the lease stamp %s", now, st)
		}
		last = st
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaiterAcquiresSoonAfterRelease(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	a, b := dialServer(t, s), dialServer(t, s)
	ga, err := a.Lock("queue").TTL(10 * time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g  *Guard
		at time.Time
		e  error
	}
	got := make(chan result, 1)
	go func() {
		g, err := b.Lock("queue").TTL(10 * time.Second).Wait(10 * time.Second).Lock(t.Context())
		got <- result{g, time.Now(), err}
	}()
	// Release once b is queued on the server.
	awaitWaiters(t, a, "queue", 1)
	released := time.Now()
	if err := ga.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.e != nil {
		t.Fatal(r.e)
	}
	if d := r.at.Sub(released); d > 500*time.Millisecond {
		t.Fatalf("waiter took %s after the release", d)
	}
	_ = r.g.Unlock(t.Context())
}

func TestLockGivesUpAtTheDeadline(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	a, b := dialServer(t, s, WithHolder("a")), dialServer(t, s)
	ga, err := a.Lock("busy").TTL(10 * time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ga.Unlock(context.Background()); err != nil {
			t.Errorf("unlock: %v", err)
		}
	}()

	start := time.Now()
	_, err = b.Lock("busy").Wait(300 * time.Millisecond).Lock(t.Context())
	var na *NotAcquiredError
	if !errors.As(err, &na) || na.Current == nil || na.Current.Holder != "a" {
		t.Fatalf("Wait elapsed: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 300*time.Millisecond+slack {
		t.Fatalf("gave up after %s, wait 300ms", d)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = b.Lock("busy").Lock(ctx)
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("ctx deadline: %v", err)
	}
}

func TestBadInputIsInvalidArgument(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	for name, l := range map[string]Lock{
		"empty key":   c.Lock(""),
		"long key":    c.Lock(string(make([]byte, 600))),
		"ttl too big": c.Lock("k").TTL(1000 * time.Hour),
	} {
		_, err := l.TryLock(t.Context())
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestInspectListWatch(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	events := make(chan Event, 16)
	watchDone := make(chan error, 1)
	go func() {
		defer close(events)
		for ev, err := range c.WatchPrefix(ctx, "ls/") {
			if err != nil {
				watchDone <- err
				return
			}
			events <- ev
		}
		watchDone <- nil
	}()
	next := func() Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no watch event within 5s")
		}
		return Event{}
	}
	if ev := next(); ev.Type != EventSynced {
		t.Fatalf("first event %v", ev.Type)
	}
	var guards []*Guard
	for i := range 3 {
		g, err := c.Lock(fmt.Sprintf("ls/%d", i)).TTL(5 * time.Second).TryLock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
		ev := next()
		if ev.Type != EventAcquired || ev.State.Key != g.Key() || ev.State.FencingToken == 0 {
			t.Fatalf("event %+v", ev)
		}
	}
	var keys []string
	for st, err := range c.List(t.Context(), "ls/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, st.Key)
	}
	if fmt.Sprint(keys) != "[ls/0 ls/1 ls/2]" {
		t.Fatalf("List: %v", keys)
	}
	page, err := c.ListPage(t.Context(), "ls/", 2, "")
	if err != nil || len(page.Locks) != 2 || page.NextPageToken == "" {
		t.Fatalf("page %+v, %v", page, err)
	}
	if err := guards[0].Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != EventReleased || ev.State.Key != "ls/0" {
		t.Fatalf("event %+v", ev)
	}
	for _, g := range guards[1:] {
		_ = g.Unlock(t.Context())
	}
	cancel()
	for range events {
	}
	if err := <-watchDone; err != nil {
		t.Fatalf("watch ended with %v after cancel", err)
	}

	// Close ends a watch in flight with ErrClosed.
	c2 := dialServer(t, s)
	synced := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		for ev, err := range c2.Watch(t.Context(), "ls/x") {
			if err != nil {
				ended <- err
				return
			}
			if ev.Type == EventSynced {
				close(synced)
			}
		}
		ended <- nil
	}()
	<-synced
	_ = c2.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("watch after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the watch")
	}
}

// Many workers, one lock: WithLock never lets two run at once, and every
// write passes the fence.
func TestWithLockExcludesAndFences(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	var fence Fence
	var inside, runs atomic.Int32
	var wg sync.WaitGroup
	for w := range 4 {
		c := dialServer(t, s, WithHolder(fmt.Sprintf("w%d", w)))
		wg.Go(func() {
			for range 5 {
				err := WithLock(t.Context(), c.Lock("withlock").TTL(2*time.Second).Wait(20*time.Second),
					func(ctx context.Context) error {
						if inside.Add(1) != 1 {
							t.Error("two holders at once")
						}
						defer inside.Add(-1)
						runs.Add(1)
						g, ok := GuardFromContext(ctx)
						if !ok {
							return errors.New("no guard in WithLock's context")
						}
						tok, err := g.FencingToken()
						if err != nil {
							return err
						}
						return fence.Admit(tok)
					})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if runs.Load() != 20 {
		t.Fatalf("%d runs", runs.Load())
	}
}

// kill -9 of the backend plugin: the lock it held is gone (memory is not
// durable), the guard learns it within its TTL, and a new acquire — retried
// through `unavailable` while the plugin restarts — gets a larger fencing
// token.
func TestPluginCrashLosesTheLeaseAndFencingStillIncreases(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	const ttl = 1500 * time.Millisecond
	g, err := c.Lock("crash").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := g.FencingToken()
	pid := s.pluginPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, g, ttl+slack)
	t.Logf("guard after the plugin crash: %v", lossOf(t, g))
	if err := g.Unlock(t.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock: %v", err)
	}
	g2, err := c.Lock("crash").TTL(ttl).Wait(10 * time.Second).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if tok2, _ := g2.FencingToken(); tok2 <= tok {
		t.Fatalf("fencing token %d after the plugin restart, not above %d", tok2, tok)
	}
	if err := g2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
