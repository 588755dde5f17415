package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

func claims(keys ...string) []*lockv1.Claim {
	out := make([]*lockv1.Claim, len(keys))
	for i, k := range keys {
		out[i] = &lockv1.Claim{Key: k}
	}
	return out
}

func acqSet(ttl, wait time.Duration, keys ...string) *lockv1.AcquireRequest {
	return &lockv1.AcquireRequest{Claims: claims(keys...), Ttl: durationpb.New(ttl), Wait: durationpb.New(wait), Holder: "test"}
}

func leaseKeys(l *lockv1.Lease) []string {
	var out []string
	for _, k := range l.GetKeys() {
		out = append(out, k.GetKey())
	}
	return out
}

// A set is taken all or nothing, answered in the order asked, with a
// fencing token per key; Release and Extend act on the set.
func TestSetAllOrNothing(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	ctx := t.Context()
	other := mustAcquire(t, e, "b", time.Minute)
	resp, err := e.Acquire(ctx, acqSet(time.Minute, 0, "c", "a", "b"))
	if err != nil || resp.GetAcquired() {
		t.Fatalf("a set with a held key: %v %v, want not acquired", resp, err)
	}
	if resp.GetCurrent().GetKey() != "b" || resp.GetCurrent().GetFencingToken() != other.GetFencingToken() {
		t.Fatalf("current = %v, want b's holder", resp.GetCurrent())
	}
	for _, k := range []string{"a", "c"} {
		if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: k}); in.GetHeld() {
			t.Fatalf("%q is held after a set that did not acquire", k)
		}
	}
	release(t, e, other)
	resp, err = e.Acquire(ctx, acqSet(time.Minute, 0, "c", "a", "b"))
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("a free set: %v %v", resp, err)
	}
	l := resp.GetLease()
	if got := leaseKeys(l); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("lease keys %v, want the order asked", got)
	}
	if l.GetKey() != "" || l.GetFencingToken() != 0 {
		t.Fatalf("a set's lease has key %q fencing %d, want them unset", l.GetKey(), l.GetFencingToken())
	}
	if l.GetKind() != lockv1.Kind_KIND_MUTEX || l.GetLimit() != 1 || l.GetPermits() != 1 {
		t.Fatalf("a set's lease says %v limit %d permits %d, want a mutex's", l.GetKind(), l.GetLimit(), l.GetPermits())
	}
	for _, k := range l.GetKeys() {
		in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: k.GetKey()})
		if !in.GetHeld() || in.GetState().GetFencingToken() != k.GetFencingToken() {
			t.Fatalf("%q: inspect %v, want held with fencing token %d", k.GetKey(), in, k.GetFencingToken())
		}
	}
	if k := l.GetKeys()[2]; k.GetFencingToken() <= other.GetFencingToken() {
		t.Fatalf("b's fencing token %d is not above its previous holder's %d", k.GetFencingToken(), other.GetFencingToken())
	}
	ext, err := e.Extend(ctx, &lockv1.ExtendRequest{Keys: []string{"a", "b", "c"}, OwnerToken: l.GetOwnerToken(), Ttl: durationpb.New(2 * time.Minute)})
	if err != nil || !ext.GetExtended() || len(ext.GetLease().GetKeys()) != 3 {
		t.Fatalf("extend the set: %v %v", ext, err)
	}
	// A Release naming a key the token does not hold changes nothing.
	mine := mustAcquire(t, e, "d", time.Minute)
	rel, err := e.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{"a", "d"}, OwnerToken: l.GetOwnerToken()})
	if err != nil || rel.GetReleased() {
		t.Fatalf("release with a key not held: %v %v, want false", rel, err)
	}
	if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: "a"}); !in.GetHeld() {
		t.Fatal("a was released by a refused set release")
	}
	release(t, e, mine)
	rel, err = e.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{"a", "b", "c"}, OwnerToken: l.GetOwnerToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("release the set: %v %v", rel, err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: k}); in.GetHeld() {
			t.Fatalf("%q still held after the set's release", k)
		}
	}
}

// plain hides the fake's set calls and says it keeps no request ids and no
// lock-delays: a backend built before those existed.
type plain struct{ backend.Backend }

func (p plain) Info(ctx context.Context) (backend.Info, error) {
	info, err := p.Backend.Info(ctx)
	info.MaxKeys, info.RequestIDs, info.MaxLockDelay = 0, false, 0
	return info, err
}

func TestSetValidation(t *testing.T) {
	e, _ := newEngine(t, engine.Config{MaxKeys: 3})
	ctx := t.Context()
	ttl := durationpb.New(time.Minute)
	for _, c := range []struct {
		req  *lockv1.AcquireRequest
		code error
		want string
	}{
		{&lockv1.AcquireRequest{Key: "a", Claims: claims("b"), Ttl: ttl}, engine.ErrInvalidArgument, "key and claims: set one or the other"},
		{&lockv1.AcquireRequest{Claims: claims("a", "b", "a"), Ttl: ttl}, engine.ErrInvalidArgument, `claims: "a" is named twice (claims[0].key and claims[2].key)`},
		{&lockv1.AcquireRequest{Claims: claims("a", ""), Ttl: ttl}, engine.ErrInvalidArgument, "claims[1].key: must not be empty"},
		{&lockv1.AcquireRequest{Claims: claims("a", "b", "c", "d"), Ttl: ttl}, engine.ErrInvalidArgument, "claims: 4 keys exceeds the maximum 3 keys per request"},
		{&lockv1.AcquireRequest{Key: "a", Ttl: ttl, RequestId: "short"}, engine.ErrInvalidArgument, "request_id: 5 bytes is outside 16 to 128 bytes"},
		{&lockv1.AcquireRequest{Key: "a", Ttl: ttl, RequestId: "0123456789abcdef\n"}, engine.ErrInvalidArgument, "request_id: byte 16 is not printable ASCII"},
		{&lockv1.AcquireRequest{Key: "a", Ttl: ttl, LockDelay: durationpb.New(2 * time.Minute)}, engine.ErrInvalidArgument, "lock_delay: 2m exceeds the maximum 1m"},
		{&lockv1.AcquireRequest{Key: "a", Ttl: ttl, LockDelay: durationpb.New(-time.Second)}, engine.ErrInvalidArgument, "lock_delay: -1s is negative"},
	} {
		_, err := e.Acquire(ctx, c.req)
		if !errors.Is(err, c.code) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %v %q", c.req, err, c.code, c.want)
		}
	}
	if _, err := e.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{"a", "a"}, OwnerToken: "t"}); !errors.Is(err, engine.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), `keys: "a" is named twice (keys[0] and keys[1])`) {
		t.Errorf("release with a key twice: %v", err)
	}

	// A backend without the capabilities: unimplemented, naming them.
	f := fakebackend.New()
	defer f.Close()
	pe, err := engine.New(ctx, plain{f}, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close()
	_, err = pe.Acquire(ctx, &lockv1.AcquireRequest{Claims: claims("a", "b"), Ttl: ttl})
	if !errors.Is(err, engine.ErrUnimplemented) || !strings.Contains(err.Error(), "CAPABILITY_MULTI_KEY") {
		t.Errorf("a set on a backend without sets: %v, want unimplemented naming CAPABILITY_MULTI_KEY", err)
	}
	_, err = pe.Acquire(ctx, &lockv1.AcquireRequest{Key: "a", Ttl: ttl, LockDelay: durationpb.New(time.Second)})
	if !errors.Is(err, engine.ErrUnimplemented) || !strings.Contains(err.Error(), "CAPABILITY_LOCK_DELAY") {
		t.Errorf("a lock-delay on a backend without them: %v, want unimplemented naming CAPABILITY_LOCK_DELAY", err)
	}
	// One claim is a single key, on any backend; a request id is accepted
	// and not recognised.
	resp, err := pe.Acquire(ctx, &lockv1.AcquireRequest{Claims: claims("a"), Ttl: ttl, RequestId: "0123456789abcdef"})
	if err != nil || !resp.GetAcquired() || leaseKeys(resp.GetLease())[0] != "a" {
		t.Fatalf("one claim on a plain backend: %v %v", resp, err)
	}
	info, _ := pe.GetServerInfo(ctx, nil)
	if len(info.GetBackend().GetCapabilities()) != 0 || info.GetBackend().GetMaxKeys() != 1 {
		t.Errorf("a plain backend's info: %v, want no capabilities and max_keys 1", info.GetBackend())
	}
	info, _ = e.GetServerInfo(ctx, nil)
	if b := info.GetBackend(); len(b.GetCapabilities()) != 3 || b.GetMaxKeys() != 3 || b.GetMaxLockDelay().AsDuration() != time.Minute {
		t.Errorf("the fake's info: %v, want 3 capabilities, max_keys 3 (the server's cap), max_lock_delay 1m", b)
	}
}

// Waiters for overlapping sets and single keys are served in arrival order.
func TestSetWaitersInArrivalOrder(t *testing.T) { eachMode(t, testSetWaitersInArrivalOrder) }

func testSetWaitersInArrivalOrder(t *testing.T, m mode) {
	e, _ := m.newEngine(t, engine.Config{})
	ctx := t.Context()
	first := mustAcquire(t, e, "a", time.Minute)
	type win struct {
		name string
		l    *lockv1.Lease
	}
	wins := make(chan win, 3)
	start := func(name string, req *lockv1.AcquireRequest) {
		go func() {
			resp, err := e.Acquire(ctx, req)
			if err != nil || !resp.GetAcquired() {
				t.Errorf("%s: %v %v", name, resp, err)
				wins <- win{name: name}
				return
			}
			wins <- win{name, resp.GetLease()}
		}()
	}
	// set {a,b} first, then b alone, then a alone: b waits behind the set
	// although b is free, and so does a.
	start("set", acqSet(time.Minute, time.Minute, "a", "b"))
	eventually(t, "the set to queue", func() bool { return e.Waiters("b") == 1 })
	start("b", acq("b", time.Minute, time.Minute))
	eventually(t, "b to queue", func() bool { return e.Waiters("b") == 2 })
	start("a", acq("a", time.Minute, time.Minute))
	eventually(t, "a to queue", func() bool { return e.Waiters("a") == 2 })
	release(t, e, first)
	w := <-wins
	if w.name != "set" {
		t.Fatalf("%s won first, want the set (it arrived first)", w.name)
	}
	// b and a are both free to go once the set is released.
	rel, err := e.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{"a", "b"}, OwnerToken: w.l.GetOwnerToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatal(rel, err)
	}
	got := map[string]bool{}
	for range 2 {
		w := <-wins
		got[w.name] = true
		release(t, e, w.l)
	}
	if !got["a"] || !got["b"] {
		t.Fatalf("winners after the set: %v", got)
	}
}

// Racing overlapping sets on one engine never both hold a key, and under a
// random workload of overlapping sets with waits every request is answered
// (no deadlock) within a bounded time.
func TestRandomOverlappingSetsNoDeadlock(t *testing.T) { eachMode(t, testRandomOverlappingSets) }

func testRandomOverlappingSets(t *testing.T, m mode) {
	e, c := m.newEngine(t, engine.Config{})
	e2 := c.newEngine(t, engine.Config{}) // another server on the same store
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	var mu sync.Mutex
	holder := map[string]int{}
	var wg sync.WaitGroup
	const workers, rounds = 8, 15
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			eng := e
			if w%2 == 1 {
				eng = e2
			}
			for round := range rounds {
				set := slices.Clone(keys)
				r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:1+r.IntN(3)]
				resp, err := eng.Acquire(ctx, acqSet(time.Minute, 10*time.Second, set...))
				if err != nil || !resp.GetAcquired() {
					t.Errorf("worker %d round %d %v: %v %v (deadlock?)", w, round, set, resp, err)
					return
				}
				mu.Lock()
				for _, k := range set {
					if h, ok := holder[k]; ok {
						t.Errorf("worker %d holds %q while worker %d does", w, k, h)
					}
					holder[k] = w
				}
				mu.Unlock()
				time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond) // the critical section
				mu.Lock()
				for _, k := range set {
					delete(holder, k)
				}
				mu.Unlock()
				rel, err := eng.Release(ctx, &lockv1.ReleaseRequest{Keys: set, OwnerToken: resp.GetLease().GetOwnerToken()})
				if err != nil || !rel.GetReleased() {
					t.Errorf("release %v: %v %v", set, rel, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

const rid = "req-0123456789abcdef"

// A repeat of an Acquire (same request id, same arguments) is answered with
// the first attempt's lease, through another server sharing the backend
// too, and even when others queue for the key; other arguments are refused.
func TestRequestIDReplaysTheLease(t *testing.T) {
	e, c := newEngine(t, engine.Config{})
	e2 := c.newEngine(t, engine.Config{})
	ctx := t.Context()
	req := acqSet(time.Minute, 0, "a", "b")
	req.RequestId = rid
	first, err := e.Acquire(ctx, req)
	if err != nil || !first.GetAcquired() {
		t.Fatal(first, err)
	}
	again, err := e2.Acquire(ctx, req)
	if err != nil || !again.GetAcquired() {
		t.Fatalf("the repeat through another server: %v %v", again, err)
	}
	if a, b := first.GetLease(), again.GetLease(); a.GetOwnerToken() != b.GetOwnerToken() ||
		a.GetKeys()[0].GetFencingToken() != b.GetKeys()[0].GetFencingToken() || a.GetKeys()[1].GetFencingToken() != b.GetKeys()[1].GetFencingToken() {
		t.Fatalf("the repeat answered %v, want the first lease %v", b, a)
	}
	// Someone queues for a; the repeat (a waiting one) still gets its lease
	// instead of queueing behind that waiter, who waits for this very lease.
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := e.Acquire(ctx, acq("a", time.Minute, 10*time.Second))
		if err != nil || !resp.GetAcquired() {
			t.Errorf("the waiter: %v %v", resp, err)
		}
	}()
	eventually(t, "a waiter", func() bool { return e.Waiters("a") == 1 })
	waiting := acqSet(time.Minute, 10*time.Second, "a", "b")
	waiting.RequestId = rid
	start := time.Now()
	resp, err := e.Acquire(ctx, waiting)
	if err != nil || !resp.GetAcquired() || resp.GetLease().GetOwnerToken() != first.GetLease().GetOwnerToken() {
		t.Fatalf("a waiting repeat behind a waiter: %v %v", resp, err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("the repeat waited %s", time.Since(start))
	}
	for _, changed := range []*lockv1.AcquireRequest{
		{Claims: claims("a", "b"), Ttl: durationpb.New(2 * time.Minute), Holder: "test", RequestId: rid},
		{Claims: claims("a", "b"), Ttl: durationpb.New(time.Minute), Holder: "someone else", RequestId: rid},
		{Claims: claims("a", "b"), Ttl: durationpb.New(time.Minute), Holder: "test", RequestId: rid, LockDelay: durationpb.New(time.Second)},
	} {
		_, err := e2.Acquire(ctx, changed)
		if !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), "request_id: already used for another acquire") {
			t.Errorf("a repeat with other arguments %v: %v, want invalid_argument", changed, err)
		}
	}
	// Release with a request id: the repeat answers true, also once the key
	// is someone else's.
	rel := &lockv1.ReleaseRequest{Keys: []string{"a", "b"}, OwnerToken: first.GetLease().GetOwnerToken(), RequestId: "rel-0123456789abcdef"}
	for i := range 2 {
		r, err := e2.Release(ctx, rel)
		if err != nil || !r.GetReleased() {
			t.Fatalf("release attempt %d: %v %v", i, r, err)
		}
	}
	<-done // the waiter took a
	r, err := e.Release(ctx, rel)
	if err != nil || !r.GetReleased() {
		t.Fatalf("a repeated release after the key changed hands: %v %v", r, err)
	}
	r2 := &lockv1.ReleaseRequest{Keys: []string{"a", "b"}, OwnerToken: "another token", RequestId: rel.GetRequestId()}
	if _, err := e.Release(ctx, r2); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatalf("a repeated release with another token: %v, want invalid_argument", err)
	}
}

// A repeat renews the lease from now: the first attempt's lease started
// before the repeat was sent, and the client counts from the repeat.
func TestRequestIDReplayRenews(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	ctx := t.Context()
	req := acq("k", 400*time.Millisecond, 0)
	req.RequestId = rid
	first, _ := e.Acquire(ctx, req)
	time.Sleep(200 * time.Millisecond) // part of the lease goes by: the retry's backoff
	sent := time.Now()
	again, err := e.Acquire(ctx, req)
	if err != nil || !again.GetAcquired() || again.GetLease().GetOwnerToken() != first.GetLease().GetOwnerToken() {
		t.Fatal(again, err)
	}
	if exp := again.GetLease().GetExpiresAt().AsTime(); exp.Before(sent.Add(400 * time.Millisecond)) {
		t.Fatalf("the replayed lease ends at %v, before the repeat's send + ttl %v", exp, sent.Add(400*time.Millisecond))
	}
}

// A lease won after its caller gave up is given back, unless a repeat of
// the request has been answered with it meanwhile.
func TestAbandonedLeaseKeptWhenReplayed(t *testing.T) {
	e, c := newEngine(t, engine.Config{})
	ctx := t.Context()
	req := acq("k", time.Minute, 0)
	req.RequestId = rid
	gate := make(chan struct{})
	won := make(chan struct{})
	hook := func() {
		c.afterHook.Store(nil)
		close(won)
		<-gate
	}
	c.afterHook.Store(&hook)
	callCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := e.Acquire(callCtx, req)
		errc <- err
	}()
	<-won // the backend took the lease; the answer is held up
	cancel()
	if err := <-errc; !errors.Is(err, engine.ErrCanceled) {
		t.Fatalf("the caller that left: %v", err)
	}
	again, err := e.Acquire(ctx, req) // the client's retry: a replay
	if err != nil || !again.GetAcquired() {
		t.Fatalf("the retry: %v %v", again, err)
	}
	releases := c.releases.Load()
	close(gate) // now the first attempt's answer comes back, to nobody
	eventually(t, "the abandon to be tried", func() bool { return c.releases.Load() > releases })
	// The abandon found the lease claimed by the replay: it is still held.
	ext, err := e.Extend(ctx, &lockv1.ExtendRequest{Key: "k", OwnerToken: again.GetLease().GetOwnerToken(), Ttl: durationpb.New(time.Minute)})
	if err != nil || !ext.GetExtended() {
		t.Fatalf("the replayed lease was given back: %v %v", ext, err)
	}
}

// After a lease taken with a lock-delay expires, its key refuses holders
// until the delay has passed, Inspect shows it, and waiters wait through
// it; after a release there is no delay.
func TestLockDelay(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	ctx := t.Context()
	const delay = 300 * time.Millisecond
	req := acq("k", 50*time.Millisecond, 0)
	req.LockDelay = durationpb.New(delay)
	first, err := e.Acquire(ctx, req)
	if err != nil || !first.GetAcquired() || first.GetLease().GetLockDelay().AsDuration() != delay {
		t.Fatal(first, err)
	}
	if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: "k"}); in.GetState().GetLockDelay().AsDuration() != delay {
		t.Fatalf("inspect of the held key: %v, want its lock_delay", in)
	}
	expired := time.Now().Add(50 * time.Millisecond)
	var in *lockv1.InspectResponse
	eventually(t, "the lease to expire", func() bool {
		in, _ = e.Inspect(ctx, &lockv1.InspectRequest{Key: "k"})
		return !in.GetHeld()
	})
	if in.GetDelayed().GetKey() != "k" || in.GetDelayed().GetRemaining().AsDuration() <= 0 {
		t.Fatalf("inspect after the expiry: %v, want the lock-delay", in)
	}
	try, err := e.Acquire(ctx, acq("k", time.Minute, 0))
	if err != nil || try.GetAcquired() || try.GetDelayed().GetKey() != "k" {
		t.Fatalf("a try in the lock-delay: %v %v, want not acquired and delayed", try, err)
	}
	waited, err := e.Acquire(ctx, acq("k", time.Minute, 5*time.Second))
	if err != nil || !waited.GetAcquired() {
		t.Fatalf("a waiter through the lock-delay: %v %v", waited, err)
	}
	if at := time.Now(); at.Before(expired.Add(delay)) {
		t.Fatalf("acquired %s after the expiry, within the delay %s", at.Sub(expired), delay)
	}
	release(t, e, waited.GetLease())
	// A released lease leaves no delay.
	second, _ := e.Acquire(ctx, req)
	release(t, e, second.GetLease())
	if again, err := e.Acquire(ctx, acq("k", time.Minute, 0)); err != nil || !again.GetAcquired() {
		t.Fatalf("after a release: %v %v, want acquired at once", again, err)
	}
}

// Requests whose answers a client loses are repeated with the same id: a
// concurrent workload of repeats never gives two holders one key, and
// every repeat of a request gets that request's lease.
func TestRequestIDRepeatsNeverDoubleGrant(t *testing.T) {
	e, c := newEngine(t, engine.Config{})
	e2 := c.newEngine(t, engine.Config{})
	ctx := t.Context()
	type answer struct {
		req int
		tok string
		err error
	}
	answers := make(chan answer, 8)
	for i := range 8 {
		go func() {
			req := acq("k", time.Minute, 5*time.Second)
			req.RequestId = fmt.Sprintf("req-%016d", i%2) // two requests, each sent four times
			eng := e
			if i%4 >= 2 {
				eng = e2
			}
			resp, err := eng.Acquire(ctx, req)
			if err == nil && !resp.GetAcquired() {
				err = fmt.Errorf("not acquired: %v", resp)
			}
			answers <- answer{i % 2, resp.GetLease().GetOwnerToken(), err}
		}()
	}
	// Only one request holds k at a time: the first four answers are the
	// holder's repeats, one lease; the other request's wait for it.
	collect := func() answer {
		var first answer
		for n := range 4 {
			a := <-answers
			if a.err != nil {
				t.Fatal(a.err)
			}
			if n == 0 {
				first = a
			} else if a.req != first.req || a.tok != first.tok {
				t.Fatalf("answer %+v while request %d holds with %q", a, first.req, first.tok)
			}
		}
		return first
	}
	holder := collect()
	release(t, e, &lockv1.Lease{Key: "k", OwnerToken: holder.tok})
	next := collect()
	if next.req == holder.req || next.tok == holder.tok {
		t.Fatalf("the second lease %+v repeats the first %+v", next, holder)
	}
}

// A server with lock-delay switched off (NoLockDelay, --max-lock-delay 0)
// refuses every lock_delay, saying so, though its backend keeps them, and
// claims neither the capability nor a maximum.
func TestLockDelaySwitchedOff(t *testing.T) {
	e, _ := newEngine(t, engine.Config{MaxLockDelay: engine.NoLockDelay})
	ctx := t.Context()
	_, err := e.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute), LockDelay: durationpb.New(time.Second)})
	if !errors.Is(err, engine.ErrUnimplemented) || !strings.Contains(err.Error(), "switched off") {
		t.Fatalf("a lock_delay with lock-delay off: %v, want unimplemented saying it is switched off", err)
	}
	info, _ := e.GetServerInfo(ctx, nil)
	b := info.GetBackend()
	if b.GetMaxLockDelay().AsDuration() != 0 || slices.Contains(b.GetCapabilities(), lockv1.Capability_CAPABILITY_LOCK_DELAY) {
		t.Fatalf("info with lock-delay off: %v, want no lock-delay capability and no max_lock_delay", b)
	}
	if resp, err := e.Acquire(ctx, acq("k", time.Minute, 0)); err != nil || !resp.GetAcquired() {
		t.Fatalf("an Acquire without lock_delay: %v %v", resp, err)
	}
}
