package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// wakeHandoffs is how many release-to-waiter handoffs a wake spec times
// (service and SDK level); it judges their median. A server that polls every
// P ms lags about P/2 on a typical handoff, so the median exposes it as well
// as one sample would; but one or two handoffs delayed because a loaded
// machine left a process without a CPU for a while (tens of ms, seen on
// 2-core CI under -race) cannot fail the spec on their own.
const wakeHandoffs = 5

// medianOf returns the median of ds (the upper one of an even count).
func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Promise 7: waiting on the server, in arrival order, woken by events.
var _ = describeService("waiting", Label("waiting"), func(sc *ServiceContext) {
	// awaitWaiters waits until the server reports n callers queued on key.
	awaitWaiters := func(ctx context.Context, key string, n int) {
		GinkgoHelper()
		Eventually(ctx, func(g Gomega) {
			ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ins.GetState().GetWaiters()).To(BeNumerically("==", n))
		}).WithTimeout(5*time.Second).WithPolling(2*time.Millisecond).Should(Succeed(), "waiting for %d queued callers on %q", n, key)
	}
	// wakeBound is how soon after a release a queued waiter must hold the
	// lock: Config.WakeBound on top of two uncontended acquire+release round
	// trips measured just before, on this server and backend. A handoff costs
	// the release's and the waiter's acquire's backend writes (an fsync'd
	// etcd or PostgreSQL commit is milliseconds); a waiter woken by polling
	// (etcd's 100 ms watch resync, a retry timer) would still overshoot it.
	wakeBound := func(ctx context.Context) time.Duration {
		GinkgoHelper()
		key := sc.Key("wake-baseline")
		start := time.Now()
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
		roundTrip := time.Since(start)
		bound := sc.Config.WakeBound + 2*roundTrip
		AddReportEntry("wake bound", fmt.Sprintf("%s (acquire+release round trip %s)", bound, roundTrip), ReportEntryVisibilityFailureOrVerbose)
		return bound
	}
	type result struct {
		res *lockv1.AcquireResponse
		err error
		at  time.Time
	}
	wait := func(ctx context.Context, key string, ttl, wait time.Duration) <-chan result {
		out := make(chan result, 1)
		go func() {
			res, err := sc.Acquire(ctx, sc.RPC, key, ttl, wait)
			out <- result{res, err, time.Now()}
		}()
		return out
	}

	It("hands the lock to a queued waiter within a few milliseconds of the release", func(ctx SpecContext) {
		key := sc.Key("wake-release")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		bound := wakeBound(ctx)
		var lags []time.Duration
		for range wakeHandoffs {
			w := wait(ctx, key, sc.LongTTL(), 10*time.Second)
			awaitWaiters(ctx, key, 1)
			released := time.Now()
			Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
			var r result
			Eventually(w).WithTimeout(5 * time.Second).Should(Receive(&r))
			Expect(r.err).NotTo(HaveOccurred())
			Expect(r.res.GetAcquired()).To(BeTrue())
			Expect(r.res.GetLease().GetFencingToken()).To(BeNumerically(">", held.GetFencingToken()))
			lags = append(lags, r.at.Sub(released))
			held = r.res.GetLease()
		}
		AddReportEntry("release to waiter holding", fmt.Sprint(lags), ReportEntryVisibilityFailureOrVerbose)
		Expect(medianOf(lags)).To(BeNumerically("<=", bound),
			"the waiters got the lock %v after the release was sent: median %s (bound %s)", lags, medianOf(lags), bound)
	}, SpecTimeout(30*time.Second))

	It("hands the lock to an SDK Lock().Wait() caller within a few milliseconds of the holder's Unlock", func(ctx SpecContext) {
		key := sc.Key("sdk-wake")
		holder, err := sc.Client().Lock(key).TTL(sc.LongTTL()).TryLock(ctx)
		Expect(err).NotTo(HaveOccurred())
		type got struct {
			g   *holdfast.Guard
			err error
			at  time.Time
		}
		bound := wakeBound(ctx)
		var lags []time.Duration
		for range wakeHandoffs {
			w := make(chan got, 1)
			waiter := sc.Client()
			go func() {
				g, err := waiter.Lock(key).TTL(sc.LongTTL()).Wait(10 * time.Second).Lock(ctx)
				w <- got{g, err, time.Now()}
			}()
			awaitWaiters(ctx, key, 1)
			unlocked := time.Now()
			Expect(holder.Unlock(ctx)).To(Succeed())
			var r got
			Eventually(w).WithTimeout(5 * time.Second).Should(Receive(&r))
			Expect(r.err).NotTo(HaveOccurred())
			lags = append(lags, r.at.Sub(unlocked))
			holder = r.g
		}
		AddReportEntry("SDK unlock to waiter holding", fmt.Sprint(lags), ReportEntryVisibilityFailureOrVerbose)
		Expect(medianOf(lags)).To(BeNumerically("<=", bound),
			"the SDK waiters got the lock %v after Unlock was called: median %s (bound %s)", lags, medianOf(lags), bound)
		Expect(holder.Unlock(ctx)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("hands the lock to a queued waiter when the holder's lease expires", func(ctx SpecContext) {
		key := sc.Key("wake-expiry")
		sent := time.Now()
		held := sc.MustAcquire(ctx, key, sc.TTL())
		answered := time.Now()
		w := wait(ctx, key, sc.LongTTL(), 10*time.Second)
		var r result
		Eventually(w).WithTimeout(sc.FreeWithin() + 5*time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.res.GetAcquired()).To(BeTrue())
		Expect(r.at.Sub(sent)).To(BeNumerically(">=", sc.TTL()), "the waiter got the lock before the lease ran out")
		Expect(r.at.Sub(answered)).To(BeNumerically("<=", sc.FreeWithin()+sc.Config.WakeBound),
			"the waiter got the lock %s after the acquisition (TTL %s)", r.at.Sub(answered), sc.TTL())
		Expect(r.res.GetLease().GetFencingToken()).To(BeNumerically(">", held.GetFencingToken()))
	}, SpecTimeout(30*time.Second))

	It("serves waiters in arrival order", func(ctx SpecContext) {
		key := sc.Key("fifo")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		const n = 5
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				defer GinkgoRecover()
				res, err := sc.Acquire(ctx, sc.RPC, key, sc.LongTTL(), 20*time.Second)
				Expect(err).NotTo(HaveOccurred())
				Expect(res.GetAcquired()).To(BeTrue(), "waiter %d", i)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				Expect(sc.Release(ctx, key, res.GetLease().GetOwnerToken())).To(BeTrue())
			})
			// The next waiter arrives only once this one is queued.
			awaitWaiters(ctx, key, i+1)
		}
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
		wg.Wait()
		Expect(order).To(Equal([]int{0, 1, 2, 3, 4}), "order in which queued waiters got the lock")
	}, SpecTimeout(time.Minute))

	It("never waits longer than wait", func(ctx SpecContext) {
		key := sc.Key("wait-bound")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		const w = 300 * time.Millisecond
		start := time.Now()
		res, err := sc.Acquire(ctx, sc.RPC, key, sc.LongTTL(), w)
		took := time.Since(start)
		Expect(err).NotTo(HaveOccurred(), "contention is not an error")
		Expect(res.GetAcquired()).To(BeFalse())
		Expect(res.GetCurrent().GetFencingToken()).To(Equal(held.GetFencingToken()), "the answer names the holder")
		Expect(took).To(BeNumerically("<=", w+sc.Config.Slack), "waited %s for wait=%s", took, w)
		Expect(took).To(BeNumerically(">=", w/2), "gave up after %s of wait=%s", took, w)
	}, SpecTimeout(30*time.Second))

	It("hands the lock to the next waiter when the one queued before it disconnected (on another server when shared)", func(ctx SpecContext) {
		key := sc.Key("wait-cancel-handoff")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		rpc2, second, behind := sc.RPC, sc.URL, 1 // behind: waiters on the first waiter's server once it left
		if sc.Backend().GetShared() {
			url, err := sc.SecondURL(ctx)
			Expect(err).NotTo(HaveOccurred())
			if url != "" {
				rpc2, second, behind = sc.RPCFor(url), url, 0
			}
		}
		AddReportEntry("second waiter's server", second, ReportEntryVisibilityFailureOrVerbose)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		first := wait(wctx, key, sc.LongTTL(), 20*time.Second)
		awaitWaiters(ctx, key, 1)
		next := make(chan result, 1)
		go func() {
			res, err := sc.Acquire(ctx, rpc2, key, sc.LongTTL(), 20*time.Second)
			next <- result{res, err, time.Now()}
		}()
		// The second waiter is queued once its server counts it (behind
		// the first, when it is the same server).
		Eventually(ctx, func(g Gomega) {
			ins, err := rpc2.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ins.GetState().GetWaiters()).To(BeNumerically("==", behind+1))
		}).WithTimeout(5*time.Second).WithPolling(2*time.Millisecond).Should(Succeed(), "the second waiter never queued")
		cancel()
		Eventually(first).WithTimeout(5 * time.Second).Should(Receive())
		awaitWaiters(ctx, key, behind)
		released := time.Now()
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
		var r result
		Eventually(next).WithTimeout(25 * time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.res.GetAcquired()).To(BeTrue(), "the waiter behind one that disconnected never got the lock (the first one's place in the queue outlived it?)")
		Expect(r.at.Sub(released)).To(BeNumerically("<=", sc.FreeWithin()+time.Second),
			"the waiter behind one that disconnected got the lock %s after the release", r.at.Sub(released))
		Expect(sc.Release(ctx, key, r.res.GetLease().GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(time.Minute))

	It("drops a waiter that disconnects from the queue at once", func(ctx SpecContext) {
		key := sc.Key("wait-cancel")
		sc.MustAcquire(ctx, key, sc.LongTTL())
		wctx, cancel := context.WithCancel(ctx)
		w := wait(wctx, key, sc.LongTTL(), 20*time.Second)
		awaitWaiters(ctx, key, 1)
		cancel()
		Eventually(w).WithTimeout(5 * time.Second).Should(Receive())
		awaitWaiters(ctx, key, 0)
	}, SpecTimeout(30*time.Second))
})
