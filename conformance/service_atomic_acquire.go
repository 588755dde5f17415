package conformance

import (
	"errors"
	"sync"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 1 at the API.
var _ = describeService("atomic acquire", Label("atomic-acquire"), func(sc *ServiceContext) {
	It("lets exactly one of N racing clients win a free key", func(ctx SpecContext) {
		key := sc.Key("race")
		n := sc.Config.Racers
		start := make(chan struct{})
		res := make([]*lockv1.AcquireResponse, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				res[i], errs[i] = sc.Acquire(ctx, sc.RPC, key, sc.LongTTL(), 0)
			})
		}
		close(start)
		wg.Wait()
		var winner *lockv1.Lease
		wins := 0
		for i := range n {
			Expect(errs[i]).NotTo(HaveOccurred())
			if res[i].GetAcquired() {
				wins++
				winner = res[i].GetLease()
			}
		}
		Expect(wins).To(Equal(1), "%d racers on a free key", n)
		for i := range n {
			if !res[i].GetAcquired() {
				Expect(res[i].GetCurrent().GetFencingToken()).To(Equal(winner.GetFencingToken()),
					"a loser must be told the current holder")
			}
		}
	}, SpecTimeout(time.Minute))

	It("gives exactly one of N racing SDK clients a guard", func(ctx SpecContext) {
		key := sc.Key("sdk-race")
		n := sc.Config.Racers
		clients := make([]*holdfast.Client, n)
		for i := range n {
			clients[i] = sc.Client()
		}
		start := make(chan struct{})
		guards := make([]*holdfast.Guard, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				guards[i], errs[i] = clients[i].Lock(key).TTL(sc.LongTTL()).TryLock(ctx)
			})
		}
		close(start)
		wg.Wait()
		var winner *holdfast.Guard
		for i := range n {
			if errs[i] == nil {
				Expect(winner).To(BeNil(), "two SDK clients got a guard on %q", key)
				winner = guards[i]
				continue
			}
			Expect(errors.Is(errs[i], holdfast.ErrNotAcquired)).To(BeTrue(), "a loser's error must be ErrNotAcquired: %v", errs[i])
		}
		Expect(winner).NotTo(BeNil(), "no SDK client got the free key %q", key)
		Expect(winner.Unlock(ctx)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("mints a fresh owner token of at least 128 bits for every acquisition", func(ctx SpecContext) {
		key := sc.Key("tokens")
		seen := map[string]bool{}
		for range 20 {
			l := sc.MustAcquire(ctx, key, sc.LongTTL())
			Expect(len(l.GetOwnerToken())).To(BeNumerically(">=", 16), "owner token %q is too short for 128 random bits", l.GetOwnerToken())
			Expect(seen).NotTo(HaveKey(l.GetOwnerToken()), "owner token reused")
			seen[l.GetOwnerToken()] = true
			Expect(sc.Release(ctx, key, l.GetOwnerToken())).To(BeTrue())
		}
	}, SpecTimeout(30*time.Second))
})
