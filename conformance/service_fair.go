package conformance

import (
	"context"
	"sync"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 7 across servers: a backend that says fair=true serves the waiters
// of every server sharing it in one arrival order.
var _ = describeService("fair waiting", Label("fair", "waiting", "sharing"), func(sc *ServiceContext) {
	It("serves waiters in arrival order across two servers sharing a fair backend", func(ctx SpecContext) {
		b := sc.Backend()
		if !b.GetFair() {
			Skip("the backend declares fair=false: arrival order holds within one server only")
		}
		if !b.GetShared() {
			Skip("the backend declares shared=false: there is no second server on the same locks")
		}
		url, err := sc.SecondURL(ctx)
		Expect(err).NotTo(HaveOccurred())
		if url == "" {
			Skip("no second server (Config.SecondAddr / --second-addr, or Config.Serve)")
		}
		servers := []lockv1connect.LockServiceClient{sc.RPC, sc.RPCFor(url)}
		// queued is how many callers both servers count as waiting on key.
		queued := func(ctx context.Context, key string) (int, error) {
			n := 0
			for _, rpc := range servers {
				ins, err := rpc.Inspect(ctx, &lockv1.InspectRequest{Key: key})
				if err != nil {
					return 0, err
				}
				n += int(ins.GetState().GetWaiters())
			}
			return n, nil
		}

		key := sc.Key("fair-across")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		const n = 6
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			rpc := servers[i%2]
			wg.Go(func() {
				defer GinkgoRecover()
				res, err := sc.Acquire(ctx, rpc, key, sc.LongTTL(), 30*time.Second)
				Expect(err).NotTo(HaveOccurred())
				Expect(res.GetAcquired()).To(BeTrue(), "waiter %d", i)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				rel, err := rpc.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: res.GetLease().GetOwnerToken()})
				Expect(err).NotTo(HaveOccurred())
				Expect(rel.GetReleased()).To(BeTrue())
			})
			// The next waiter arrives, on the other server, once this one
			// is queued.
			Eventually(ctx, func() (int, error) { return queued(ctx, key) }).
				WithTimeout(5*time.Second).WithPolling(2*time.Millisecond).Should(Equal(i+1), "waiter %d never queued", i)
		}
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
		wg.Wait()
		Expect(order).To(Equal([]int{0, 1, 2, 3, 4, 5}), "order in which waiters queued alternately on two servers got the lock")
	}, SpecTimeout(time.Minute))
})
