package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 7 through an SDK: a Lock with a wait queues on the server.
var _ = describeSDK("waiting", Label("waiting"), func(sc *SDKContext) {
	type got struct {
		res sdkrunner.LockResult
		err error
		at  time.Time
	}
	waitFor := func(ctx context.Context, c SDKClient, key string, wait time.Duration) <-chan got {
		out := make(chan got, 1)
		go func() {
			res, err := c.Lock(ctx, key, sc.LongTTL(), wait)
			out <- got{res, err, time.Now()}
		}()
		return out
	}

	It("hands the lock to a waiting SDK caller promptly after the holder's SDK unlock", func(ctx SpecContext) {
		key := sc.Key("sdk-wake")
		holder, waiter := sc.SDK(ctx), sc.SDK(ctx)
		// The waiter's answer crosses the adapter (a Node or Python event
		// loop, a pipe), whose speed on this machine is its own: the bound
		// is Config.WakeBound on top of two uncontended lock+unlock round
		// trips through the adapter measured just before, as at the
		// service level.
		start := time.Now()
		base := waiter.MustLock(ctx, sc.Key("sdk-wake-baseline"), sc.LongTTL())
		Expect(waiter.Unlock(ctx, base.Guard)).To(Succeed())
		roundTrip := time.Since(start)
		bound := sc.Config.WakeBound + 2*roundTrip
		l := holder.MustLock(ctx, key, sc.LongTTL())
		var lags []time.Duration
		for range wakeHandoffs {
			w := waitFor(ctx, waiter, key, 10*time.Second)
			sc.AwaitWaiters(ctx, key, 1)
			Expect(holder.Unlock(ctx, l.Guard)).To(Succeed())
			// The unlock's own round trip through the adapter is not the
			// waiter's business: the lag counts from its answer.
			unlocked := time.Now()
			var r got
			Eventually(w).WithTimeout(5 * time.Second).Should(Receive(&r))
			Expect(r.err).NotTo(HaveOccurred())
			Expect(r.res.FencingToken).To(BeNumerically(">", l.FencingToken))
			lags = append(lags, r.at.Sub(unlocked))
			l = r.res
			holder, waiter = waiter, holder
		}
		AddReportEntry("SDK unlock answered to SDK waiter holding", fmt.Sprint(lags), ReportEntryVisibilityFailureOrVerbose)
		Expect(medianOf(lags)).To(BeNumerically("<=", bound),
			"the SDK waiters held the lock %v after the unlock was answered: median %s (bound %s: %s + 2 x round trip %s)",
			lags, medianOf(lags), bound, sc.Config.WakeBound, roundTrip)
		Expect(holder.Unlock(ctx, l.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("serves SDK waiters in arrival order", func(ctx SpecContext) {
		key := sc.Key("sdk-fifo")
		holder := sc.SDK(ctx)
		l := holder.MustLock(ctx, key, sc.LongTTL())
		const n = 4
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			c := sc.SDK(ctx)
			wg.Go(func() {
				defer GinkgoRecover()
				res, err := c.Lock(ctx, key, sc.LongTTL(), 20*time.Second)
				Expect(err).NotTo(HaveOccurred(), "waiter %d", i)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				Expect(c.Unlock(ctx, res.Guard)).To(Succeed())
			})
			// The next waiter arrives only once this one is queued.
			sc.AwaitWaiters(ctx, key, i+1)
		}
		Expect(holder.Unlock(ctx, l.Guard)).To(Succeed())
		wg.Wait()
		Expect(order).To(Equal([]int{0, 1, 2, 3}), "order in which queued SDK waiters got the lock")
	}, SpecTimeout(time.Minute))

	It("gives up with not_acquired when the wait runs out, and not much later", func(ctx SpecContext) {
		key := sc.Key("sdk-wait-bound")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		c := sc.SDK(ctx)
		const w = 300 * time.Millisecond
		start := time.Now()
		_, err := c.Lock(ctx, key, sc.LongTTL(), w)
		took := time.Since(start)
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired))
		// Measured through the adapter's pipe and process, so twice the
		// slack; an SDK that ignores the wait or keeps retrying past it
		// takes far longer.
		Expect(took).To(BeNumerically("<=", w+2*sc.Config.Slack), "waited %s for wait=%s (bound: wait + 2 x slack %s)", took, w, sc.Config.Slack)
		Expect(took).To(BeNumerically(">=", w/2), "gave up after %s of wait=%s", took, w)
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetState().GetFencingToken()).To(Equal(held.GetFencingToken()))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))
})
