package engine_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// followAll runs every engine of the package's tests on a Follow feed
// (go test ./core/engine -args -follow); eachMode's -follow modes do so
// for the tests that run per mode.
var followAll = flag.Bool("follow", false, "give every test engine a backend.FollowBackend")

// followFeed is what crossed the Follow feeds of a counting backend.
type followFeed struct {
	follows     atomic.Int64 // Follow calls
	unsupported atomic.Int64 // how many more Follow calls answer errors.ErrUnsupported
	held        atomic.Int64 // changes that were held back (holdChanges)
	mu          sync.Mutex
	crossed     []backend.Event // every event but EventSynced, in order
	gate        chan struct{}   // when not nil, changes wait for it to close
}

// holdChanges holds every change on its way to a Follow until let is
// called.
func (f *followFeed) holdChanges() (let func()) {
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.gate = nil
		f.mu.Unlock()
		close(gate)
	}
}

// forward passes changes on to out, held back while holdChanges says so,
// until ctx ends.
func (f *followFeed) forward(ctx context.Context, changes <-chan backend.FollowChange, out chan<- backend.FollowChange) {
	for {
		var c backend.FollowChange
		select {
		case c = <-changes:
		case <-ctx.Done():
			return
		}
		f.mu.Lock()
		gate := f.gate
		f.mu.Unlock()
		if gate != nil {
			f.held.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
				return
			}
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
	}
}

// crossedKeys lists the keys of the events that crossed, in order.
func (f *followFeed) crossedKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.crossed))
	for _, ev := range f.crossed {
		keys = append(keys, ev.Record.Key)
	}
	return keys
}

// following makes b (c, or c as fair) a backend.FollowBackend whose Follow
// is backend.Following's filter of c's Watch, so breakWatch breaks it.
func (c *counting) following(b backend.Backend) backend.Backend {
	if f, ok := b.(fairCounting); ok {
		return followFair{f}
	}
	return followLocal{c}
}

type followLocal struct{ *counting }

// plainLocal is followLocal without Follow.
type plainLocal struct{ *counting }

func (f followLocal) Follow(ctx context.Context, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	return f.doFollow(ctx, f.counting, changes, send)
}

type followFair struct{ fairCounting }

func (f followFair) Follow(ctx context.Context, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	return f.doFollow(ctx, f.fairCounting, changes, send)
}

func (c *counting) doFollow(ctx context.Context, b backend.Backend, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	c.feed.follows.Add(1)
	for n := c.feed.unsupported.Load(); n > 0; n = c.feed.unsupported.Load() {
		if c.feed.unsupported.CompareAndSwap(n, n-1) {
			return fmt.Errorf("test plugin: Follow: %w", errors.ErrUnsupported)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	forwarded := make(chan backend.FollowChange)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.feed.forward(ctx, changes, forwarded)
	}()
	defer func() { cancel(); <-done }()
	return backend.Following(b).Follow(ctx, forwarded, func(ev backend.Event) error {
		if ev.Type != backend.EventSynced {
			c.feed.mu.Lock()
			c.feed.crossed = append(c.feed.crossed, ev)
			c.feed.mu.Unlock()
		}
		return send(ev)
	})
}

// newFollowEngine starts an engine on a fresh, not fair, fake that Follows.
func newFollowEngine(t *testing.T) (*engine.Engine, *counting) {
	t.Helper()
	return mode{name: "local-follow", follow: true}.newEngine(t, engine.Config{})
}

// watchOn runs e.Watch(req) until the test ends; its messages arrive on the
// returned channel. onSynced, when not nil, runs on the watch's goroutine
// as its EVENT_TYPE_SYNCED is sent.
func watchOn(t *testing.T, e *engine.Engine, req *lockv1.WatchRequest, onSynced func()) <-chan *lockv1.WatchResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	msgs := make(chan *lockv1.WatchResponse, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Watch(ctx, req, func(r *lockv1.WatchResponse) error {
			if r.GetType() == lockv1.EventType_EVENT_TYPE_SYNCED && onSynced != nil {
				onSynced()
			}
			msgs <- r
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return msgs
}

// nextMsg is the next message of a watch, or a failure after 5 s.
func nextMsg(t *testing.T, msgs <-chan *lockv1.WatchResponse, what string) *lockv1.WatchResponse {
	t.Helper()
	select {
	case r := <-msgs:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", what)
		return nil
	}
}

// expect reads the next message of a watch and checks its type and key.
func expect(t *testing.T, msgs <-chan *lockv1.WatchResponse, typ lockv1.EventType, key string) {
	t.Helper()
	r := nextMsg(t, msgs, typ.String()+" of "+key)
	if r.GetType() != typ || (key != "" && r.GetState().GetKey() != key) {
		t.Fatalf("got %v of %q, want %v of %q", r.GetType(), r.GetState().GetKey(), typ, key)
	}
}

// barrier takes and gives back key, which msgs (a watch of it on e) sees:
// once its release arrives, every event the backend sent before it has
// crossed the feed (a watch sends in order).
func barrier(t *testing.T, e *engine.Engine, msgs <-chan *lockv1.WatchResponse, key string) {
	t.Helper()
	release(t, e, mustAcquire(t, e, key, time.Minute))
	expect(t, msgs, lockv1.EventType_EVENT_TYPE_ACQUIRED, key)
	expect(t, msgs, lockv1.EventType_EVENT_TYPE_RELEASED, key)
}

func TestFollowUncontendedCrossesNothing(t *testing.T) {
	e, c := newFollowEngine(t)
	bw := watchOn(t, e, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: "barrier"}}, nil)
	expect(t, bw, lockv1.EventType_EVENT_TYPE_SYNCED, "")
	for i := range 100 {
		release(t, e, mustAcquire(t, e, fmt.Sprintf("u/%d", i%10), time.Minute))
	}
	// With a wait too (as the SDKs ask): a free lock is won at once, and
	// nothing is followed for it.
	for i := range 100 {
		resp, err := e.Acquire(context.Background(), acq(fmt.Sprintf("w/%d", i%10), time.Minute, 10*time.Second))
		if err != nil || !resp.GetAcquired() {
			t.Fatal(resp, err)
		}
		release(t, e, resp.GetLease())
	}
	if n := e.Followed(); n != 1 {
		t.Fatalf("%d keys and prefixes counted, want 1 (the barrier's watcher)", n)
	}
	barrier(t, e, bw, "barrier")
	if n := c.feed.follows.Load(); n != 1 {
		t.Fatalf("%d Follow calls, want 1 (the engine's feed)", n)
	}
	for _, k := range c.feed.crossedKeys() {
		if k != "barrier" {
			t.Fatalf("an event of %q crossed the feed, which nobody waits on or watches (crossed: %v)", k, c.feed.crossedKeys())
		}
	}
}

// TestFollowWaiterWokenAcrossServers: a waiter on A is woken by a release
// through B, however the release falls against the waiter's follow: each
// round's key is new, so the follow waits for its change every time.
func TestFollowWaiterWokenAcrossServers(t *testing.T) {
	eachFollowMode(t, func(t *testing.T, m mode) {
		a, c := m.newEngine(t, engine.Config{})
		b := c.newEngine(t, engine.Config{})
		ctx := context.Background()
		for i := range 100 {
			key := fmt.Sprintf("x/%d", i)
			held := mustAcquire(t, b, key, time.Minute) // no expiry timer wakes the waiter
			type result struct {
				resp *lockv1.AcquireResponse
				err  error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				resp, err := a.Acquire(ctx, acq(key, time.Minute, 3*time.Second))
				done <- result{resp, err}
			}()
			eventually(t, "the waiter to queue", func() bool { return a.Waiters(key) > 0 })
			release(t, b, held)
			r := <-done
			if r.err != nil || !r.resp.GetAcquired() {
				t.Fatalf("round %d: the waiter was not woken by the release (after %v: %v, %v)", i, time.Since(start), r.resp, r.err)
			}
			release(t, a, r.resp.GetLease())
		}
	})
}

// eachFollowMode runs test on a Follow feed, locally ordered and fair.
func eachFollowMode(t *testing.T, test func(t *testing.T, m mode)) {
	for _, m := range modes {
		if m.follow {
			t.Run(m.name, func(t *testing.T) { test(t, m) })
		}
	}
}

// TestFollowWatchersGetEveryEventAfterSynced: a watcher of a key, of a
// prefix and of everything gets the acquisition made the moment its
// SYNCED is sent, and the release after it. The change that follows what
// it watches is held back until the SYNCED has been sent or the change is
// seen on its way: a SYNCED sent before its change applies makes the
// acquisition miss the watcher.
func TestFollowWatchersGetEveryEventAfterSynced(t *testing.T) {
	a, c := newFollowEngine(t)
	a.SetFollowLinger(time.Millisecond) // so that every round needs changes
	b := c.newEngine(t, engine.Config{})
	for i := range 30 {
		key := fmt.Sprintf("w/%d/k", i)
		for _, req := range []*lockv1.WatchRequest{
			{Target: &lockv1.WatchRequest_Key{Key: key}},
			{Target: &lockv1.WatchRequest_Prefix{Prefix: fmt.Sprintf("w/%d/", i)}},
			{},
		} {
			var lease atomic.Pointer[lockv1.Lease]
			var synced atomic.Bool
			held := c.feed.held.Load()
			let := c.feed.holdChanges()
			msgs := watchOn(t, a, req, func() {
				synced.Store(true)
				resp, err := b.Acquire(context.Background(), acq(key, time.Minute, 0))
				if err == nil && resp.GetAcquired() {
					lease.Store(resp.GetLease())
				}
			})
			eventually(t, "the follow's change held, or SYNCED", func() bool { return synced.Load() || c.feed.held.Load() > held })
			let()
			expect(t, msgs, lockv1.EventType_EVENT_TYPE_SYNCED, "")
			if lease.Load() == nil {
				t.Fatalf("round %d: acquire of %q failed", i, key)
			}
			expect(t, msgs, lockv1.EventType_EVENT_TYPE_ACQUIRED, key)
			release(t, b, lease.Load())
			expect(t, msgs, lockv1.EventType_EVENT_TYPE_RELEASED, key)
		}
	}
}

// TestFollowDropsKeyAfterLinger: a key is followed while it is waited on,
// and its events stop crossing once nobody has needed it for the linger.
func TestFollowDropsKeyAfterLinger(t *testing.T) {
	a, c := newFollowEngine(t)
	a.SetFollowLinger(50 * time.Millisecond)
	b := c.newEngine(t, engine.Config{})
	bw := watchOn(t, a, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: "barrier"}}, nil)
	expect(t, bw, lockv1.EventType_EVENT_TYPE_SYNCED, "")

	// A waits on k; B's release of it wakes A.
	held := mustAcquire(t, b, "k", time.Minute)
	done := make(chan *lockv1.AcquireResponse, 1)
	go func() {
		resp, _ := a.Acquire(context.Background(), acq("k", time.Minute, 5*time.Second))
		done <- resp
	}()
	eventually(t, "the waiter to queue", func() bool { return a.Waiters("k") > 0 })
	release(t, b, held)
	resp := <-done
	if !resp.GetAcquired() {
		t.Fatal("the waiter was not woken")
	}
	release(t, a, resp.GetLease())

	// Nobody needs k now: B's acquisitions of it cross until the linger
	// has passed, and then no more.
	crossedK := func() int {
		n := 0
		for _, k := range c.feed.crossedKeys() {
			if k == "k" {
				n++
			}
		}
		return n
	}
	if crossedK() == 0 {
		t.Fatal("no event of k crossed while it was waited on")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		before := crossedK()
		release(t, b, mustAcquire(t, b, "k", time.Minute))
		barrier(t, b, bw, "barrier")
		if crossedK() == before {
			break // dropped
		}
		if time.Now().After(deadline) {
			t.Fatal("k's events still cross 5s after the last waiter left")
		}
	}
	eventually(t, "k to be forgotten", func() bool { return a.Followed() == 1 }) // the barrier's watcher
	// And dropped it stays: nothing of k crosses any more.
	before := crossedK()
	for range 10 {
		release(t, b, mustAcquire(t, b, "k", time.Minute))
	}
	barrier(t, b, bw, "barrier")
	if n := crossedK(); n != before {
		t.Fatalf("%d events of k crossed after it was dropped", n-before)
	}
}

// TestFollowUnsupportedFallsBackToWatch: a plugin that does not serve
// Follow is watched, its waiters are woken, and the next feed tries Follow
// again.
func TestFollowUnsupportedFallsBackToWatch(t *testing.T) {
	f := mode{name: "local-follow", follow: true}
	b, c := f.newEngine(t, engine.Config{}) // B: follows
	c.feed.unsupported.Store(1)
	a := c.newEngine(t, engine.Config{}) // A: its first Follow is refused
	if w := c.watches.Load(); w != 2 {
		t.Fatalf("%d watches, want 2: B's Follow's and A's fallback", w)
	}
	wakes := func(b *engine.Engine, key string) {
		t.Helper()
		held := mustAcquire(t, b, key, time.Minute)
		done := make(chan *lockv1.AcquireResponse, 1)
		go func() {
			resp, _ := a.Acquire(context.Background(), acq(key, time.Minute, 5*time.Second))
			done <- resp
		}()
		eventually(t, "the waiter to queue", func() bool { return a.Waiters(key) > 0 })
		release(t, b, held)
		resp := <-done
		if !resp.GetAcquired() {
			t.Fatalf("the waiter on %q was not woken", key)
		}
		release(t, a, resp.GetLease())
	}
	// B releases (its feed is the first watch: breakWatch breaks A's, the
	// latest).
	wakes(b, "fb/1")
	if n := a.Followed(); n != 0 {
		t.Fatalf("%d keys still counted on a Watch feed after their waiter left: nothing would ever expire them", n)
	}

	// The plugin restarts (newer): A's next feed is a Follow.
	follows := c.feed.follows.Load()
	resume := c.breakWatch()
	resume()
	eventually(t, "A to follow again", func() bool { return c.feed.follows.Load() > follows })
	wakes(b, "fb/2")
}

// TestFollowBrokenFeedRefollowsAndWakes: when the feed breaks, the resync
// wakes every waiter (releases made meanwhile were missed) and follows
// every waited-on key again, including one whose waiter came while it was
// down.
func TestFollowBrokenFeedRefollowsAndWakes(t *testing.T) {
	eachFollowMode(t, func(t *testing.T, m mode) {
		b, c := m.newEngine(t, engine.Config{})
		a := c.newEngine(t, engine.Config{}) // the latest feed: breakWatch breaks A's
		keys := []string{"r/1", "r/2", "r/3", "r/4", "r/5"}
		held := map[string]*lockv1.Lease{}
		for _, k := range keys {
			held[k] = mustAcquire(t, b, k, time.Minute)
		}
		results := make(chan *lockv1.AcquireResponse, len(keys))
		wait := func(k string) {
			go func() {
				resp, err := a.Acquire(context.Background(), acq(k, time.Minute, 10*time.Second))
				if err != nil {
					resp = nil
				}
				results <- resp
			}()
			eventually(t, "the waiter on "+k+" to queue", func() bool { return a.Waiters(k) > 0 })
		}
		for _, k := range keys[:4] {
			wait(k)
		}
		resume := c.breakWatch() // A's feed is down
		wait(keys[4])            // follows while the feed is down
		release(t, b, held["r/1"])
		release(t, b, held["r/2"]) // missed by A's feed
		resume()
		got := func(n int) {
			t.Helper()
			for range n {
				select {
				case resp := <-results:
					if !resp.GetAcquired() {
						t.Fatalf("a waiter ended without the lock: %v", resp)
					}
					release(t, a, resp.GetLease())
				case <-time.After(5 * time.Second):
					t.Fatal("a waiter was not woken")
				}
			}
		}
		got(2) // woken by the resync
		for _, k := range keys[2:] {
			release(t, b, held[k]) // seen only if k is followed again
		}
		got(3)
	})
}

// TestFollowFeedCarriesOnlyFollowedKeys: what crosses is what watchers
// need (a prefix, a key), nothing else.
func TestFollowFeedCarriesOnlyFollowedKeys(t *testing.T) {
	a, c := newFollowEngine(t)
	b := c.newEngine(t, engine.Config{})
	pw := watchOn(t, a, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "p/"}}, nil)
	expect(t, pw, lockv1.EventType_EVENT_TYPE_SYNCED, "")
	bw := watchOn(t, a, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: "barrier"}}, nil)
	expect(t, bw, lockv1.EventType_EVENT_TYPE_SYNCED, "")
	for _, k := range []string{"p/1", "q/1", "p/2", "q/2", "barrie", "barrier/"} {
		release(t, b, mustAcquire(t, b, k, time.Minute))
	}
	barrier(t, b, bw, "barrier")
	want := []string{"p/1", "p/1", "p/2", "p/2", "barrier", "barrier"}
	if got := c.feed.crossedKeys(); !slices.Equal(got, want) {
		t.Fatalf("crossed %v, want %v", got, want)
	}
}
