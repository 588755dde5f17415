package conformance

import (
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// A semaphore across two servers sharing a backend: a waiter on one is
// woken by a permit released through the other, by the store's event.
var _ = describeService("semaphore sharing", Label("semaphore", "sharing", "waiting"), func(sc *ServiceContext) {
	It("grants a semaphore's waiter on another server when a permit is released through the first", func(ctx SpecContext) {
		if !sc.hasKind(lockv1.Kind_KIND_SEMAPHORE) {
			Skip("the backend does not list KIND_SEMAPHORE in BackendInfo.kinds")
		}
		if !sc.Backend().GetShared() {
			Skip("the backend declares shared=false: there is no second server on the same locks")
		}
		url, err := sc.SecondURL(ctx)
		Expect(err).NotTo(HaveOccurred())
		if url == "" {
			Skip("no second server (Config.SecondAddr / --second-addr, or Config.Serve)")
		}
		second := sc.RPCFor(url)
		key := sc.Key("shared-sem")
		// The holders' TTL is long: only the release's event, through the
		// store, can wake the waiter within its wait.
		var held []*lockv1.Lease
		for range 2 {
			held = append(held, sc.MustGrant(ctx, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 0)))
		}
		waiter := acquireAsync(ctx, second, sc.SemaphoreRequest(key, 2, 1, sc.LongTTL(), 30*time.Second))
		Eventually(ctx, func() uint32 {
			ins, err := second.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			Expect(err).NotTo(HaveOccurred())
			return ins.GetState().GetWaiters()
		}).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).Should(Equal(uint32(1)), "the waiter never queued on the second server")
		ins, err := second.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetPermitsInUse()).To(Equal(uint32(2)), "the second server does not see both permits held")
		Expect(ins.GetState().GetHolders()).To(HaveLen(2))

		released := time.Now()
		Expect(sc.Release(ctx, key, held[0].GetOwnerToken())).To(BeTrue(), "the release of a permit")
		var res *lockv1.AcquireResponse
		Eventually(waiter).WithTimeout(20*time.Second).Should(Receive(&res), "the waiter on the second server was not granted")
		GinkgoWriter.Printf("the semaphore's waiter on server 2 was granted %s after a permit was released on server 1\n", time.Since(released))
		Expect(res).NotTo(BeNil(), "the waiter's Acquire failed")
		Expect(res.GetAcquired()).To(BeTrue(), "the waiter's wait ended without a permit: %v", res.GetCurrent())
		Expect(res.GetLease().GetFencingToken()).To(BeNumerically(">", held[1].GetFencingToken()), "the waiter's fencing token is not above the earlier grants'")
		ins, err = sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetPermitsInUse()).To(Equal(uint32(2)), "after the wake the first server does not see two permits held")
		Expect(ins.GetState().GetHolders()).To(HaveLen(2))
		Expect(sc.Release(ctx, key, held[1].GetOwnerToken())).To(BeTrue())
		rel, err := second.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: res.GetLease().GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue())
	}, SpecTimeout(time.Minute))
})
