package conformance

import (
	"context"
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
		l := holder.MustLock(ctx, key, sc.LongTTL())
		w := waitFor(ctx, waiter, key, 10*time.Second)
		sc.AwaitWaiters(ctx, key, 1)
		sent := time.Now()
		Expect(holder.Unlock(ctx, l.Guard)).To(Succeed())
		unlocked := time.Now()
		var r got
		Eventually(w).WithTimeout(5 * time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		// The unlock's own round trip through the adapter is not the
		// waiter's business: the bound counts from its answer.
		AddReportEntry("SDK unlock answered to SDK waiter holding", r.at.Sub(unlocked).String(), ReportEntryVisibilityFailureOrVerbose)
		Expect(r.at.Sub(unlocked)).To(BeNumerically("<=", sc.Config.WakeBound),
			"the SDK waiter held the lock %s after the unlock was answered (sent %s before; bound %s)", r.at.Sub(unlocked), unlocked.Sub(sent), sc.Config.WakeBound)
		Expect(r.res.FencingToken).To(BeNumerically(">", l.FencingToken))
		Expect(waiter.Unlock(ctx, r.res.Guard)).To(Succeed())
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
