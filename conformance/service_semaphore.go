package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// hasKind reports whether the server's backend keeps keys of kind k.
func (sc *ServiceContext) hasKind(k lockv1.Kind) bool {
	return slices.Contains(sc.Backend().GetKinds(), k)
}

// SemaphoreRequest is an Acquire of permits of the semaphore key of limit
// limit, waiting for at most wait.
func (sc *ServiceContext) SemaphoreRequest(key string, limit, permits uint32, ttl, wait time.Duration) *lockv1.AcquireRequest {
	req := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl), Holder: "conformance",
		Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: limit, Permits: permits}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return req
}

// RWLockRequest is a shared or exclusive Acquire of the rwlock key.
func (sc *ServiceContext) RWLockRequest(key string, mode lockv1.Mode, ttl, wait time.Duration) *lockv1.AcquireRequest {
	req := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl), Holder: "conformance", Kind: lockv1.Kind_KIND_RWLOCK, Mode: mode}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return req
}

// MustGrant sends req and fails the spec unless it acquired.
func (sc *ServiceContext) MustGrant(ctx context.Context, req *lockv1.AcquireRequest) *lockv1.Lease {
	GinkgoHelper()
	res, err := sc.RPC.Acquire(ctx, req)
	Expect(err).NotTo(HaveOccurred(), "Acquire %q", req.GetKey())
	Expect(res.GetAcquired()).To(BeTrue(), "Acquire of %q (%s) refused: %v", req.GetKey(), req.GetKind(), res.GetCurrent())
	return res.GetLease()
}

// acquireAsync sends req on its own goroutine; the answer comes on the
// channel (nil response with the error).
func acquireAsync(ctx context.Context, rpc lockv1connect.LockServiceClient, req *lockv1.AcquireRequest) <-chan *lockv1.AcquireResponse {
	out := make(chan *lockv1.AcquireResponse, 1)
	go func() {
		defer GinkgoRecover()
		res, err := rpc.Acquire(ctx, req)
		if err != nil {
			res = nil
		}
		out <- res
	}()
	return out
}

// awaitWaiters polls Inspect until key (held) has n waiters.
func (sc *ServiceContext) awaitWaiters(ctx context.Context, key string, n uint32) {
	GinkgoHelper()
	Eventually(ctx, func() uint32 {
		res, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		return res.GetState().GetWaiters()
	}).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).Should(Equal(n), "waiters queued for %q", key)
}

// Semaphores and rwlocks through the API: every grant a lease, the limit
// never exceeded, strict arrival order per key.
var _ = describeService("semaphore", Label("semaphore"), func(sc *ServiceContext) {
	BeforeEach(func() {
		if !sc.hasKind(lockv1.Kind_KIND_SEMAPHORE) {
			Skip("the backend does not list KIND_SEMAPHORE in BackendInfo.kinds")
		}
	})

	It("never holds more permits than the limit among racing waiters, checked at a fenced counter", func(ctx SpecContext) {
		const limit = 3
		key := sc.Key("race")
		n := min(sc.Config.Racers, 16)
		counter := newFencedCounter(limit)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				defer GinkgoRecover()
				for range 4 {
					permits := uint32(1 + i%2)
					res, err := sc.RPC.Acquire(ctx, sc.SemaphoreRequest(key, limit, permits, sc.LongTTL(), 20*time.Second))
					if err != nil || !res.GetAcquired() {
						errs <- fmt.Errorf("acquire: acquired=%v, %w", res.GetAcquired(), err)
						return
					}
					l := res.GetLease()
					if err := counter.enter(l.GetFencingToken(), int(permits)); err != nil {
						errs <- err
						return
					}
					counter.leave(int(permits))
					if !sc.Release(ctx, key, l.GetOwnerToken()) {
						errs <- fmt.Errorf("a winner's release answered false")
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred(), "a racer failed (or waited out its wait)")
		}
	}, SpecTimeout(2*time.Minute))

	It("refuses a kind or limit other than the key's with failed_precondition naming both", func(ctx SpecContext) {
		sem, mu := sc.Key("sem"), sc.Key("mutex")
		sc.MustGrant(ctx, sc.SemaphoreRequest(sem, 3, 1, sc.LongTTL(), 0))
		sc.MustAcquire(ctx, mu, sc.LongTTL())
		for _, c := range []struct {
			what string
			req  *lockv1.AcquireRequest
			says []string
		}{
			{"limit 4 for a semaphore of limit 3", sc.SemaphoreRequest(sem, 4, 1, sc.LongTTL(), 0), []string{"limit 3", "limit 4"}},
			{"a mutex for a semaphore", &lockv1.AcquireRequest{Key: sem, Ttl: durationpb.New(sc.LongTTL())}, []string{"semaphore of limit 3", "mutex"}},
			{"a semaphore for a mutex", sc.SemaphoreRequest(mu, 3, 1, sc.LongTTL(), time.Second), []string{"mutex", "semaphore of limit 3"}},
		} {
			_, err := sc.RPC.Acquire(ctx, c.req)
			Expect(codeOf(err)).To(Equal(connect.CodeFailedPrecondition), "%s: %v", c.what, err)
			for _, s := range c.says {
				Expect(err.Error()).To(ContainSubstring(s), c.what)
			}
		}
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: sem})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetPermitsInUse()).To(Equal(uint32(1)), "a refused request changed the semaphore")
		if sc.hasCap(lockv1.Capability_CAPABILITY_MULTI_KEY) {
			_, err := sc.AcquireSet(ctx, sc.RPC, sc.LongTTL(), 0, sem, sc.Key("other"))
			Expect(codeOf(err)).To(Equal(connect.CodeFailedPrecondition), "a set claiming a semaphore: %v", err)
			Expect(err.Error()).To(ContainSubstring("mutexes only"))
		}
	}, SpecTimeout(30*time.Second))

	It("refuses a semaphore or rwlock request outside its bounds with invalid_argument naming the field", func(ctx SpecContext) {
		key := sc.Key("bad")
		ttl := durationpb.New(sc.LongTTL())
		maxLimit := sc.Backend().GetMaxLimit()
		for _, c := range []struct {
			req   *lockv1.AcquireRequest
			field string
		}{
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE}, "limit"},
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: maxLimit + 1}, "limit"},
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3, Permits: 4}, "permits"},
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3, Mode: lockv1.Mode_MODE_SHARED}, "mode"},
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Limit: 2}, "limit"},
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind(99)}, "kind"},
			{&lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3, LockDelay: durationpb.New(time.Second)}, "lock_delay"},
			{&lockv1.AcquireRequest{Claims: []*lockv1.Claim{{Key: key}}, Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3}, "claims"},
		} {
			_, err := sc.RPC.Acquire(ctx, c.req)
			Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "%v: %v", c.req, err)
			Expect(err.Error()).To(ContainSubstring(c.field), "the message does not name %s", c.field)
		}
		if sc.hasKind(lockv1.Kind_KIND_RWLOCK) {
			_, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: ttl, Kind: lockv1.Kind_KIND_RWLOCK})
			Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "an rwlock without a mode: %v", err)
			Expect(err.Error()).To(ContainSubstring("mode"))
		}
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeFalse(), "a refused request took the key")
	}, SpecTimeout(30*time.Second))

	It("serves waiters in arrival order: a large request is not overtaken by a later small one that fits", func(ctx SpecContext) {
		key := sc.Key("fifo")
		first := sc.MustGrant(ctx, sc.SemaphoreRequest(key, 3, 2, sc.LongTTL(), 0))
		large := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(key, 3, 3, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, key, 1)
		small := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(key, 3, 1, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, key, 2)
		// One permit is free, but two callers queue for the key: a try
		// does not pass them.
		res, err := sc.RPC.Acquire(ctx, sc.SemaphoreRequest(key, 3, 1, sc.LongTTL(), 0))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeFalse(), "a try took a permit past two waiters")
		Expect(small).NotTo(Receive(), "the small request overtook the large one")

		Expect(sc.Release(ctx, key, first.GetOwnerToken())).To(BeTrue())
		var got *lockv1.AcquireResponse
		Eventually(ctx, large).WithTimeout(10*time.Second).Should(Receive(&got), "the large request was not served when its permits came free")
		Expect(got.GetAcquired()).To(BeTrue(), "the large request was not granted: a smaller later one overtook it")
		Expect(got.GetLease().GetPermits()).To(Equal(uint32(3)))
		Expect(small).NotTo(Receive(), "the small request was granted beside 3 of 3 permits")
		sc.awaitWaiters(ctx, key, 1)

		Expect(sc.Release(ctx, key, got.GetLease().GetOwnerToken())).To(BeTrue())
		Eventually(ctx, small).WithTimeout(10 * time.Second).Should(Receive(&got))
		Expect(got.GetAcquired()).To(BeTrue())
		Expect(got.GetLease().GetFencingToken()).To(BeNumerically(">", first.GetFencingToken()))
	}, SpecTimeout(time.Minute))

	It("wakes the head when a permit is released, and the next waiter too when it fits", func(ctx SpecContext) {
		key := sc.Key("wake")
		a := sc.MustGrant(ctx, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 0))
		b := sc.MustGrant(ctx, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 0))
		w1 := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, key, 1)
		w2 := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, key, 2)

		Expect(sc.Release(ctx, key, a.GetOwnerToken())).To(BeTrue())
		var got *lockv1.AcquireResponse
		Eventually(ctx, w1).WithTimeout(10*time.Second).Should(Receive(&got), "the head was not woken by the release of one permit")
		Expect(got.GetAcquired()).To(BeTrue())
		Expect(w2).NotTo(Receive(), "the second waiter was granted beside 2 of 2 permits")
		Expect(sc.Release(ctx, key, b.GetOwnerToken())).To(BeTrue())
		Eventually(ctx, w2).WithTimeout(10*time.Second).Should(Receive(&got), "the next waiter was not served when a permit came free")
		Expect(got.GetAcquired()).To(BeTrue())

		// Two waiters that both fit are both served when room comes.
		c := sc.Key("wake-both")
		full := sc.MustGrant(ctx, sc.SemaphoreRequest(c, 2, 2, sc.LongTTL(), 0))
		x := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(c, 2, 1, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, c, 1)
		y := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(c, 2, 1, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, c, 2)
		Expect(sc.Release(ctx, c, full.GetOwnerToken())).To(BeTrue())
		for _, w := range []<-chan *lockv1.AcquireResponse{x, y} {
			Eventually(ctx, w).WithTimeout(10*time.Second).Should(Receive(&got), "a waiter that fits was not served after the head")
			Expect(got.GetAcquired()).To(BeTrue())
		}
	}, SpecTimeout(time.Minute))

	It("frees only the permits of a holder that expires, and serves a waiter with them", func(ctx SpecContext) {
		key := sc.Key("expiry")
		long := sc.MustGrant(ctx, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 0))
		sc.MustGrant(ctx, sc.SemaphoreRequest(key, 2, 1, sc.TTL(), 0))
		w := acquireAsync(ctx, sc.RPC, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), sc.FreeWithin()+10*time.Second))
		var got *lockv1.AcquireResponse
		Eventually(ctx, w).WithTimeout(sc.FreeWithin() + 10*time.Second).Should(Receive(&got))
		Expect(got.GetAcquired()).To(BeTrue(), "the waiter was not served with the expired holder's permit")
		ext, err := sc.RPC.Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: long.GetOwnerToken(), Ttl: durationpb.New(sc.LongTTL())})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.GetExtended()).To(BeTrue(), "the holder that did not expire lost its lease")
		Expect(ext.GetLease().GetKind()).To(Equal(lockv1.Kind_KIND_SEMAPHORE))
		Expect(ext.GetLease().GetPermits()).To(Equal(uint32(1)))
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetPermitsInUse()).To(Equal(uint32(2)))
		Expect(ins.GetState().GetHolders()).To(HaveLen(2))
	}, SpecTimeout(time.Minute))

	It("shows every holder in Inspect, List and Watch, with the key's kind, limit and permits in use, never an owner token", Label("watch"), func(ctx SpecContext) {
		Expect(sc.Backend().GetKinds()).To(ContainElement(lockv1.Kind_KIND_MUTEX), "BackendInfo.kinds leaves out the mutex")
		Expect(sc.Backend().GetMaxLimit()).To(BeNumerically(">=", 1), "BackendInfo.max_limit with KIND_SEMAPHORE")
		prefix := sc.Key("show/")
		key := prefix + "s"
		stream, err := sc.RPC.Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: prefix}})
		Expect(err).NotTo(HaveOccurred())
		defer stream.Close()
		Expect(stream.Receive()).To(BeTrue())
		Expect(stream.Msg().GetType()).To(Equal(lockv1.EventType_EVENT_TYPE_SYNCED))

		a := sc.MustGrant(ctx, sc.SemaphoreRequest(key, 4, 1, sc.LongTTL(), 0))
		b := sc.MustGrant(ctx, sc.SemaphoreRequest(key, 4, 2, sc.LongTTL(), 0))
		Expect(a.GetKind()).To(Equal(lockv1.Kind_KIND_SEMAPHORE))
		Expect(a.GetLimit()).To(Equal(uint32(4)))
		Expect(b.GetPermits()).To(Equal(uint32(2)))
		Expect(b.GetFencingToken()).To(BeNumerically(">", a.GetFencingToken()))
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue())
		st := ins.GetState()
		Expect(st.GetKind()).To(Equal(lockv1.Kind_KIND_SEMAPHORE))
		Expect(st.GetLimit()).To(Equal(uint32(4)))
		Expect(st.GetPermitsInUse()).To(Equal(uint32(3)))
		Expect(st.GetHolders()).To(HaveLen(2))
		Expect(st.GetHolders()[0].GetFencingToken()).To(Equal(a.GetFencingToken()))
		Expect(st.GetHolders()[1].GetPermits()).To(Equal(uint32(2)))
		Expect(st.GetHolders()[1].GetExpiresAt()).NotTo(BeNil())
		Expect(st.String()).NotTo(ContainSubstring(a.GetOwnerToken()), "Inspect shows an owner token")
		Expect(st.String()).NotTo(ContainSubstring(b.GetOwnerToken()), "Inspect shows an owner token")
		list, err := sc.RPC.List(ctx, &lockv1.ListRequest{Prefix: prefix})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.GetLocks()).To(HaveLen(1), "List shows a key of two holders more than once")
		Expect(list.GetLocks()[0].GetHolders()).To(HaveLen(2))

		Expect(sc.Release(ctx, key, a.GetOwnerToken())).To(BeTrue())
		for _, w := range []struct {
			t     lockv1.EventType
			fence uint64
		}{{lockv1.EventType_EVENT_TYPE_ACQUIRED, a.GetFencingToken()}, {lockv1.EventType_EVENT_TYPE_ACQUIRED, b.GetFencingToken()}, {lockv1.EventType_EVENT_TYPE_RELEASED, a.GetFencingToken()}} {
			Expect(stream.Receive()).To(BeTrue(), "the watch ended: %v", stream.Err())
			msg := stream.Msg()
			Expect(msg.GetType()).To(Equal(w.t))
			Expect(msg.GetState().GetFencingToken()).To(Equal(w.fence), "a %s event about another grant", w.t)
			Expect(msg.GetState().GetKind()).To(Equal(lockv1.Kind_KIND_SEMAPHORE))
			Expect(msg.GetState().GetHolders()).To(HaveLen(1), "a watch event is about one grant")
			Expect(msg.GetState().GetHolders()[0].GetFencingToken()).To(Equal(w.fence))
		}
	}, SpecTimeout(30*time.Second))

	It("answers unimplemented, naming the backend, for a kind the backend does not keep", func(ctx SpecContext) {
		var missing []lockv1.Kind
		for _, k := range []lockv1.Kind{lockv1.Kind_KIND_SEMAPHORE, lockv1.Kind_KIND_RWLOCK} {
			if !sc.hasKind(k) {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			Skip("the backend keeps every kind")
		}
		for _, k := range missing {
			req := sc.SemaphoreRequest(sc.Key("unkept"), 3, 1, sc.LongTTL(), 0)
			if k == lockv1.Kind_KIND_RWLOCK {
				req = sc.RWLockRequest(sc.Key("unkept"), lockv1.Mode_MODE_SHARED, sc.LongTTL(), 0)
			}
			_, err := sc.RPC.Acquire(ctx, req)
			Expect(codeOf(err)).To(Equal(connect.CodeUnimplemented), "%s: %v", k, err)
			Expect(err.Error()).To(ContainSubstring(sc.Backend().GetName()))
		}
	}, SpecTimeout(30*time.Second))
})

var _ = describeService("rwlock", Label("rwlock"), func(sc *ServiceContext) {
	BeforeEach(func() {
		if !sc.hasKind(lockv1.Kind_KIND_RWLOCK) {
			Skip("the backend does not list KIND_RWLOCK in BackendInfo.kinds")
		}
	})

	It("lets readers share the key; a writer waits for them, and a reader behind a waiting writer waits for it", func(ctx SpecContext) {
		key := sc.Key("rw")
		r1 := sc.MustGrant(ctx, sc.RWLockRequest(key, lockv1.Mode_MODE_SHARED, sc.LongTTL(), 0))
		r2 := sc.MustGrant(ctx, sc.RWLockRequest(key, lockv1.Mode_MODE_SHARED, sc.LongTTL(), 0))
		Expect(r1.GetMode()).To(Equal(lockv1.Mode_MODE_SHARED))
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetHolders()).To(HaveLen(2), "readers do not see each other")
		for _, h := range ins.GetState().GetHolders() {
			Expect(h.GetMode()).To(Equal(lockv1.Mode_MODE_SHARED))
		}
		w := acquireAsync(ctx, sc.RPC, sc.RWLockRequest(key, lockv1.Mode_MODE_EXCLUSIVE, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, key, 1)
		res, err := sc.RPC.Acquire(ctx, sc.RWLockRequest(key, lockv1.Mode_MODE_SHARED, sc.LongTTL(), 0))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeFalse(), "a reader passed a waiting writer")
		r3 := acquireAsync(ctx, sc.RPC, sc.RWLockRequest(key, lockv1.Mode_MODE_SHARED, sc.LongTTL(), 30*time.Second))
		sc.awaitWaiters(ctx, key, 2)

		Expect(sc.Release(ctx, key, r1.GetOwnerToken())).To(BeTrue())
		Expect(w).NotTo(Receive(), "the writer was granted beside a reader")
		Expect(sc.Release(ctx, key, r2.GetOwnerToken())).To(BeTrue())
		var got *lockv1.AcquireResponse
		Eventually(ctx, w).WithTimeout(10*time.Second).Should(Receive(&got), "the writer was not served when the readers left")
		Expect(got.GetAcquired()).To(BeTrue(), "the writer was not granted: the later reader overtook it")
		Expect(got.GetLease().GetMode()).To(Equal(lockv1.Mode_MODE_EXCLUSIVE))
		ins, err = sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetHolders()).To(HaveLen(1), "the writer sees somebody")
		Expect(r3).NotTo(Receive(), "a reader was granted beside the writer")

		Expect(sc.Release(ctx, key, got.GetLease().GetOwnerToken())).To(BeTrue())
		Eventually(ctx, r3).WithTimeout(10 * time.Second).Should(Receive(&got))
		Expect(got.GetAcquired()).To(BeTrue())
	}, SpecTimeout(time.Minute))

	It("never lets a writer hold the key beside anyone among racing readers and writers, checked at a fenced counter", func(ctx SpecContext) {
		readers := int(sc.Backend().GetRwlockReaders())
		Expect(readers).To(BeNumerically(">", 1), "BackendInfo.rwlock_readers with KIND_RWLOCK")
		key := sc.Key("race")
		n := min(sc.Config.Racers, 16)
		// A writer enters with every permit, a reader with one.
		counter := newFencedCounter(readers)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				defer GinkgoRecover()
				mode, permits := lockv1.Mode_MODE_SHARED, 1
				if i%4 == 0 {
					mode, permits = lockv1.Mode_MODE_EXCLUSIVE, readers
				}
				for range 4 {
					res, err := sc.RPC.Acquire(ctx, sc.RWLockRequest(key, mode, sc.LongTTL(), 20*time.Second))
					if err != nil || !res.GetAcquired() {
						errs <- fmt.Errorf("%s acquire: acquired=%v, %w", mode, res.GetAcquired(), err)
						return
					}
					if err := counter.enter(res.GetLease().GetFencingToken(), permits); err != nil {
						errs <- fmt.Errorf("%s: %w", mode, err)
						return
					}
					counter.leave(permits)
					sc.Release(ctx, key, res.GetLease().GetOwnerToken())
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred(), "a racer failed, waited out its wait, or held a writer beside someone")
		}
	}, SpecTimeout(2*time.Minute))
})
