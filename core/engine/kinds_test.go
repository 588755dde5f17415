package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// kinded is the fake keeping kinds, without lock-delay; keptAs, when set,
// is answered to every Acquire as the key's kept kind and limit (a
// refusal).
type kinded struct {
	*fakebackend.Backend
	keptAs *backend.Record
}

func (k *kinded) Info(ctx context.Context) (backend.Info, error) {
	info, err := k.Backend.Info(ctx)
	// No lock-delay: a lock_delay on a semaphore must be refused for what it
	// is, not for the missing capability.
	info.MaxLockDelay = 0
	return info, err
}

func (k *kinded) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if k.keptAs != nil {
		rec := *k.keptAs
		rec.Key = req.Key
		return backend.AcquireResult{Record: rec}, nil
	}
	return k.Backend.Acquire(ctx, req)
}

func kindedEngine(t *testing.T, k *kinded) *engine.Engine {
	t.Helper()
	fake := fakebackend.New().KeepKinds()
	k.Backend = fake
	t.Cleanup(func() { fake.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := engine.New(ctx, k, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func semaphore(key string, limit, permits uint32) *lockv1.AcquireRequest {
	return &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute), Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: limit, Permits: permits}
}

func rwlock(key string, mode lockv1.Mode) *lockv1.AcquireRequest {
	return &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute), Kind: lockv1.Kind_KIND_RWLOCK, Mode: mode}
}

// A kind the backend does not keep is unimplemented, naming the backend.
func TestKindNotKeptIsUnimplemented(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	ctx := context.Background()
	for _, req := range []*lockv1.AcquireRequest{semaphore("k", 3, 1), rwlock("k", lockv1.Mode_MODE_SHARED)} {
		_, err := e.Acquire(ctx, req)
		if !errors.Is(err, engine.ErrUnimplemented) || !strings.Contains(err.Error(), `"fake"`) {
			t.Errorf("%s on a mutex-only backend: %v, want unimplemented naming the backend", req.GetKind(), err)
		}
	}
	info, err := e.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if k := info.GetBackend().GetKinds(); len(k) != 1 || k[0] != lockv1.Kind_KIND_MUTEX || info.GetBackend().GetMaxLimit() != 0 {
		t.Errorf("kinds %v, max_limit %d: want only KIND_MUTEX and 0", k, info.GetBackend().GetMaxLimit())
	}
	// A mutex named as one is what it always was.
	resp, err := e.Acquire(ctx, &lockv1.AcquireRequest{Key: "m", Ttl: durationpb.New(time.Minute), Kind: lockv1.Kind_KIND_MUTEX, Limit: 1, Permits: 1})
	if err != nil || !resp.GetAcquired() || resp.GetLease().GetKind() != lockv1.Kind_KIND_MUTEX || resp.GetLease().GetLimit() != 1 {
		t.Fatalf("an explicit mutex: %v %v", resp, err)
	}
}

// Requests outside a kind's bounds are invalid_argument naming the field.
func TestKindShapesRefused(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	ttl := durationpb.New(time.Minute)
	claims := &lockv1.AcquireRequest{Claims: []*lockv1.Claim{{Key: "a"}, {Key: "b"}}, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3}
	delayed := semaphore("k", 3, 1)
	delayed.LockDelay = durationpb.New(time.Second)
	for _, c := range []struct {
		req  *lockv1.AcquireRequest
		want string
	}{
		{semaphore("k", 0, 1), "limit: required for a semaphore, 1 to 1024"},
		{semaphore("k", backend.MaxLimit+1, 1), "limit: 1025 exceeds the maximum 1024"},
		{semaphore("k", 3, 4), "permits: 4 exceeds the semaphore's limit 3"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Limit: 2}, "limit: a mutex has limit 1"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Permits: 2}, "permits: a mutex lease takes 1 permit"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Mode: lockv1.Mode_MODE_SHARED}, "mode: MODE_SHARED is for KIND_RWLOCK only"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Kind: 7}, "kind: 7 is not a kind"},
		{rwlock("k", lockv1.Mode_MODE_UNSPECIFIED), "mode: an rwlock lease is MODE_SHARED or MODE_EXCLUSIVE"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Kind: lockv1.Kind_KIND_RWLOCK, Mode: lockv1.Mode_MODE_SHARED, Limit: 5}, "limit: an rwlock's limit is 1024"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Kind: lockv1.Kind_KIND_RWLOCK, Mode: lockv1.Mode_MODE_SHARED, Permits: 1}, "permits: an rwlock lease takes its permits from mode"},
		{claims, "kind: sets of keys (claims) take mutexes only"},
		{delayed, "lock_delay: applies to mutexes only"},
	} {
		_, err := e.Acquire(context.Background(), c.req)
		if !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want invalid_argument %q", c.req, err, c.want)
		}
	}
}

// A grant's lease says how it holds its key; an rwlock's modes weigh 1 and
// the whole capacity.
func TestKindLeaseShape(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	ctx := context.Background()
	for _, c := range []struct {
		req            *lockv1.AcquireRequest
		kind           lockv1.Kind
		limit, permits uint32
		mode           lockv1.Mode
	}{
		{semaphore("s", 5, 0), lockv1.Kind_KIND_SEMAPHORE, 5, 1, lockv1.Mode_MODE_UNSPECIFIED},
		{semaphore("s2", 5, 3), lockv1.Kind_KIND_SEMAPHORE, 5, 3, lockv1.Mode_MODE_UNSPECIFIED},
		{rwlock("r", lockv1.Mode_MODE_SHARED), lockv1.Kind_KIND_RWLOCK, backend.RWLockReaders, 1, lockv1.Mode_MODE_SHARED},
		{rwlock("w", lockv1.Mode_MODE_EXCLUSIVE), lockv1.Kind_KIND_RWLOCK, backend.RWLockReaders, backend.RWLockReaders, lockv1.Mode_MODE_EXCLUSIVE},
	} {
		resp, err := e.Acquire(ctx, c.req)
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("%v: %v %v", c.req, resp, err)
		}
		l := resp.GetLease()
		if l.GetKind() != c.kind || l.GetLimit() != c.limit || l.GetPermits() != c.permits || l.GetMode() != c.mode {
			t.Errorf("%v: lease %v %d %d %v, want %v %d %d %v", c.req, l.GetKind(), l.GetLimit(), l.GetPermits(), l.GetMode(), c.kind, c.limit, c.permits, c.mode)
		}
	}
}

// A key kept as another kind or limit is failed_precondition naming both,
// at once for a waiter too.
func TestKindMismatchIsFailedPrecondition(t *testing.T) {
	k := &kinded{keptAs: &backend.Record{Kind: backend.KindSemaphore, Limit: 3, FencingToken: 1}}
	e := kindedEngine(t, k)
	for _, c := range []struct {
		req  *lockv1.AcquireRequest
		want string
	}{
		{semaphore("jobs", 4, 1), `key "jobs" is a semaphore of limit 3; the request asks for a semaphore of limit 4`},
		{acq("jobs", time.Minute, time.Hour), `key "jobs" is a semaphore of limit 3; the request asks for a mutex`},
		{rwlock("jobs", lockv1.Mode_MODE_SHARED), "the request asks for an rwlock"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := e.Acquire(ctx, c.req)
		cancel()
		if !errors.Is(err, engine.ErrFailedPrecondition) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want failed_precondition %q", c.req, err, c.want)
		}
	}
	// The key's own kind and limit are granted.
	k.keptAs = nil
	if resp, err := e.Acquire(context.Background(), semaphore("jobs", 3, 1)); err != nil || !resp.GetAcquired() {
		t.Fatalf("the key's own shape: %v %v", resp, err)
	}
}

// kindsEngine starts an engine of mode m on a fresh fake keeping kinds;
// c.newEngine starts another server on the same fake.
func kindsEngine(t *testing.T, m mode) (*engine.Engine, *counting) {
	t.Helper()
	var c *counting
	if m.fair {
		f := fakebackend.NewFair()
		f.KeepKinds()
		c = &counting{Backend: f, fake: f.Backend, fair: f}
	} else {
		f := fakebackend.New().KeepKinds()
		c = &counting{Backend: f, fake: f}
	}
	t.Cleanup(func() { c.fake.Close() })
	return c.newEngine(t, engine.Config{}), c
}

// waitFor sends req with wait on its own goroutine; the answer comes on the
// channel.
func waitFor(e *engine.Engine, req *lockv1.AcquireRequest, wait time.Duration) <-chan *lockv1.AcquireResponse {
	req.Wait = durationpb.New(wait)
	out := make(chan *lockv1.AcquireResponse, 1)
	go func() {
		resp, _ := e.Acquire(context.Background(), req)
		out <- resp
	}()
	return out
}

func granted(t *testing.T, what string, ch <-chan *lockv1.AcquireResponse) *lockv1.Lease {
	t.Helper()
	select {
	case resp := <-ch:
		if !resp.GetAcquired() {
			t.Fatalf("%s: not acquired: %v", what, resp)
		}
		return resp.GetLease()
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not granted within 10s", what)
	}
	return nil
}

func notYet(t *testing.T, what string, ch <-chan *lockv1.AcquireResponse) {
	t.Helper()
	select {
	case resp := <-ch:
		t.Fatalf("%s: answered %v", what, resp)
	default:
	}
}

// Waiters on a semaphore are served in arrival order: a later small request
// that fits does not pass an earlier large one, on one server and, on a
// fair backend, across servers.
func TestSemaphoreWaitersInArrivalOrder(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		e, c := kindsEngine(t, m)
		second := e
		if m.fair {
			second = c.newEngine(t, engine.Config{})
		}
		ctx := context.Background()
		first, err := e.Acquire(ctx, semaphore("k", 3, 2))
		if err != nil || !first.GetAcquired() {
			t.Fatal(first, err)
		}
		large := waitFor(second, semaphore("k", 3, 3), 20*time.Second)
		eventually(t, "the large request queues", func() bool { return second.Waiters("k") == 1 })
		if m.fair {
			eventually(t, "the large request is in the store's queue", func() bool { return len(c.fair.Queue("k")) == 1 })
		}
		small := waitFor(e, semaphore("k", 3, 1), 20*time.Second)
		if m.fair {
			eventually(t, "the small request is in the store's queue", func() bool { return len(c.fair.Queue("k")) == 2 })
		} else {
			eventually(t, "the small request queues", func() bool { return e.Waiters("k") == 2 })
		}
		if resp, err := e.Acquire(ctx, semaphore("k", 3, 1)); err != nil || resp.GetAcquired() {
			t.Fatalf("a try passed the waiters: %v %v", resp, err)
		}
		notYet(t, "the small request, before the large one", small)
		release(t, e, first.GetLease())
		l := granted(t, "the large request", large)
		notYet(t, "the small request, beside 3 of 3", small)
		release(t, second, l)
		granted(t, "the small request", small)
	})
}

// When room comes, the head is granted and then every waiter behind it that
// fits, without waiting for another release.
func TestSemaphoreServesEveryWaiterThatFits(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		e, _ := kindsEngine(t, m)
		full, err := e.Acquire(context.Background(), semaphore("k", 3, 3))
		if err != nil || !full.GetAcquired() {
			t.Fatal(full, err)
		}
		var waiters []<-chan *lockv1.AcquireResponse
		for i := range 3 {
			waiters = append(waiters, waitFor(e, semaphore("k", 3, 1), 20*time.Second))
			eventually(t, "the waiter queues", func() bool { return e.Waiters("k") == i+1 })
		}
		release(t, e, full.GetLease())
		for i, w := range waiters {
			granted(t, fmt.Sprintf("waiter %d", i), w)
		}
	})
}
