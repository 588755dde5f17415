package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Semaphores through an SDK (docs/sdk-behaviour.md, "Semaphores and
// read-write locks"): the same builder and guard as a lock, every grant a
// lease of its own.
var _ = describeSDK("semaphore", Label("semaphore"), func(sc *SDKContext) {
	BeforeEach(func() { sc.needKind(sdkrunner.CapSemaphore) })

	It("grants permits up to the limit at once and no further: the default of 1 permit, grants of several, a waiter taking what a release frees, fencing tokens increasing over the grants", func(ctx SpecContext) {
		key := sc.Key("sdk-sem-limit")
		c1, c2, c3 := sc.SDK(ctx), sc.SDK(ctx), sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		one, err := c1.LockWith(ctx, semArgs(key, 3, nil, long, true))
		Expect(err).NotTo(HaveOccurred(), "the first permit of a free semaphore")
		Expect(one.Kind).To(Equal(sdkrunner.LockKindSemaphore), "the guard's kind")
		Expect(one.Limit).To(Equal(3), "the guard's limit")
		Expect(one.Permits).To(Equal(1), "permits default to 1")
		Expect(one.Mode).To(Equal(sdkrunner.ModeExclusive), "a semaphore grant's mode")
		two, err := c2.LockWith(ctx, semArgs(key, 3, new(2), long, true))
		Expect(err).NotTo(HaveOccurred(), "2 more permits of a limit-3 semaphore holding 1")
		Expect(two.Permits).To(Equal(2))
		Expect(two.FencingToken).To(BeNumerically(">", one.FencingToken), "a later grant of the key")

		// The SDK's inspect shows the key and every grant on it.
		st := c3.Inspect(ctx, key)
		Expect(st.Held).To(BeTrue())
		Expect(st.State).NotTo(BeNil())
		Expect(st.State.Kind).To(Equal(sdkrunner.LockKindSemaphore), "inspect: the key's kind")
		Expect(st.State.Limit).To(Equal(3), "inspect: the key's limit")
		Expect(st.State.PermitsInUse).To(Equal(3), "inspect: permits in use")
		Expect(st.State.Holders).To(HaveLen(2), "inspect: every grant on the key")
		Expect([]sdkrunner.U64{st.State.Holders[0].FencingToken, st.State.Holders[1].FencingToken}).To(Equal([]sdkrunner.U64{one.FencingToken, two.FencingToken}), "inspect: the grants in fencing-token order")
		Expect([]int{st.State.Holders[0].Permits, st.State.Holders[1].Permits}).To(Equal([]int{1, 2}), "inspect: each grant's permits")

		_, err = c3.LockWith(ctx, semArgs(key, 3, nil, long, true))
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired), "a permit of a semaphore whose 3 permits are all held")

		w := c3.SendLock(semArgs(key, 3, nil, long, false, 20*time.Second))
		sc.AwaitQueued(ctx, sc.RPC, key, 1, w)
		Expect(c1.Unlock(ctx, one.Guard)).To(Succeed())
		var three sdkrunner.LockResult
		Expect(w.Wait(ctx, &three)).To(Succeed(), "the waiter takes the permit the release freed")
		Expect(three.FencingToken).To(BeNumerically(">", two.FencingToken), "a grant after the others")
		Expect(c2.GuardState(ctx, two.Guard).State).To(Equal(sdkrunner.StateHeld), "the other grant is untouched by the release")

		Expect(c2.Unlock(ctx, two.Guard)).To(Succeed())
		Expect(c3.Unlock(ctx, three.Guard)).To(Succeed())
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "every grant released")
	}, SpecTimeout(time.Minute))

	It("never holds more permits than the limit among SDK clients racing in two adapter processes", func(ctx SpecContext) {
		const limit, racers, rounds = 3, 6, 8
		key := sc.Key("sdk-sem-race")
		a2, err := sc.StartAdapter(ctx)
		Expect(err).NotTo(HaveOccurred())
		long := sc.LongTTL().Milliseconds()
		// The suite sees a grant from the moment lock answers to the
		// moment it sends unlock, inside the lease's real life on the
		// server: more permits in use than the limit here is an
		// over-grant there.
		counter := newFencedCounter(limit)
		var mu sync.Mutex
		var over []string
		var wg sync.WaitGroup
		for r := range racers {
			a := sc.Adapter
			if r%2 == 1 {
				a = a2
			}
			c := sc.Connect(ctx, a, sc.URL, "")
			wg.Go(func() {
				defer GinkgoRecover()
				for i := range rounds {
					permits := 1 + (r+i)%2
					res, err := c.LockWith(ctx, semArgs(key, limit, &permits, long, false, 30*time.Second))
					Expect(err).NotTo(HaveOccurred(), "racer %d, round %d: %d permits", r, i, permits)
					Expect(res.Permits).To(Equal(permits), "racer %d: the guard's permits", r)
					entered := counter.enter(uint64(res.FencingToken), permits)
					if entered != nil {
						mu.Lock()
						over = append(over, fmt.Sprintf("racer %d, round %d: %v", r, i, entered))
						mu.Unlock()
					}
					// Holding a moment is the workload: it lets the other
					// racers' grants overlap this one.
					time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
					if entered == nil {
						counter.leave(permits)
					}
					Expect(c.Unlock(ctx, res.Guard)).To(Succeed(), "racer %d, round %d", r, i)
				}
			})
		}
		wg.Wait()
		AddReportEntry("semaphore racers", fmt.Sprintf("peak %d of limit %d, %d grants", counter.peak, limit, len(counter.seen)), ReportEntryVisibilityFailureOrVerbose)
		Expect(over).To(BeEmpty(), "grants beyond the semaphore's limit %d, or sharing a fencing token", limit)
		Expect(counter.seen).To(HaveLen(racers*rounds), "every racer's every round was granted")
		Expect(counter.peak).To(BeNumerically(">=", 2), "the racers never held permits together: a semaphore that acts as a mutex")
	}, SpecTimeout(2*time.Minute))

	It("poisons a grant released behind its guard's back (reason rejected), leaving the key's other grants held", func(ctx SpecContext) {
		key := sc.Key("sdk-sem-rejected")
		p := sc.Proxy(sc.URL)
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
		other := sc.SDK(ctx)
		ttl := sc.TTL()
		g, err := c.LockWith(ctx, semArgs(key, 2, nil, ttl.Milliseconds(), true))
		Expect(err).NotTo(HaveOccurred())
		kept, err := other.LockWith(ctx, semArgs(key, 2, nil, ttl.Milliseconds(), true))
		Expect(err).NotTo(HaveOccurred())
		lease, ok := p.Lease(uint64(g.FencingToken))
		Expect(ok).To(BeTrue(), "the proxy saw the grant")
		Expect(sc.Release(ctx, lease.Key, lease.OwnerToken)).To(BeTrue(), "releasing the grant by its owner token")
		wctx, cancel := context.WithTimeout(ctx, ttl+sc.Config.Slack)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, g.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event within TTL %s + slack after the grant was released behind the guard", ttl)
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonRejected))
		_, err = c.FencingToken(ctx, g.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "fencing_token of a poisoned grant")
		Expect(c.Unlock(ctx, g.Guard)).To(BeKind(sdkrunner.KindLeaseLost), "unlock of a poisoned grant")
		Expect(other.GuardState(ctx, kept.Guard).State).To(Equal(sdkrunner.StateHeld), "the key's other grant")
		tok, err := other.FencingToken(ctx, kept.Guard)
		Expect(err).NotTo(HaveOccurred())
		Expect(tok).To(Equal(uint64(kept.FencingToken)))
		Expect(other.Unlock(ctx, kept.Guard)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("poisons a grant whose renewals stop getting through by its local expiry (reason expired)", func(ctx SpecContext) {
		key := sc.Key("sdk-sem-expired")
		p := sc.Proxy(sc.URL)
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
		ttl := sc.TTL()
		g, err := c.LockWith(ctx, semArgs(key, 3, new(2), ttl.Milliseconds(), true))
		Expect(err).NotTo(HaveOccurred())
		p.SetMode(faultproxy.Unavailable)
		// The last renewal that got through was sent before this moment.
		stopped := time.Now()
		bound := ttl + sc.Config.Slack
		wctx, cancel := context.WithTimeout(ctx, bound+2*time.Second)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, g.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event for the semaphore grant while its renewals are answered unavailable")
		Expect(ev.At.Sub(stopped)).To(BeNumerically("<=", bound), "poisoned %s after renewals stopped (TTL %s + slack %s)", ev.At.Sub(stopped), ttl, sc.Config.Slack)
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonExpired))
		_, err = c.FencingToken(ctx, g.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost))
		p.SetMode(faultproxy.Pass)
	}, SpecTimeout(time.Minute))

	It("answers failed_precondition for a limit other than the key's, and for a lock's key taken as a semaphore", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		key := sc.Key("sdk-sem-mismatch")
		g, err := c.LockWith(ctx, semArgs(key, 3, nil, long, true))
		Expect(err).NotTo(HaveOccurred())
		_, err = c.LockWith(ctx, semArgs(key, 4, nil, long, true))
		Expect(err).To(HaveCode("failed_precondition"), "limit 4 asked of a limit-3 semaphore")
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: long, Try: true})
		Expect(err).To(HaveCode("failed_precondition"), "a semaphore's key taken as a lock")
		Expect(c.Unlock(ctx, g.Guard)).To(Succeed())

		lockKey := sc.Key("sdk-sem-mismatch-lock")
		held := sc.MustAcquire(ctx, lockKey, sc.LongTTL())
		_, err = c.LockWith(ctx, semArgs(lockKey, 3, nil, long, true))
		Expect(err).To(HaveCode("failed_precondition"), "a held lock's key taken as a semaphore")
		Expect(sc.Release(ctx, lockKey, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("refuses a limit below 1 and permits outside 1..limit with invalid_argument before anything is sent", Label("bad-input"), func(ctx SpecContext) {
		const budget = 3 * time.Second
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.ClosedURL(), RetryBudgetMs: budget.Milliseconds()})
		long := sc.LongTTL().Milliseconds()
		for _, tc := range []struct {
			what    string
			limit   int
			permits *int
			field   string
		}{
			{"limit 0", 0, nil, "limit"},
			{"limit -1", -1, nil, "limit"},
			{"0 permits", 3, new(0), "permits"},
			{"-1 permits", 3, new(-1), "permits"},
			{"4 permits of a limit-3 semaphore", 3, new(4), "permits"},
		} {
			for _, try := range []bool{true, false} {
				start := time.Now()
				_, err := c.LockWith(ctx, semArgs(sc.Key("sdk-sem-bad"), tc.limit, tc.permits, long, try))
				Expect(err).To(HaveCode("invalid_argument"), "%s (try=%v)", tc.what, try)
				Expect(time.Since(start)).To(BeNumerically("<", budget/3), "%s answered after %s: was it sent? (the address refuses connections)", tc.what, time.Since(start))
				Expect(ErrorOf(err).Message).To(ContainSubstring(tc.field), "%s: the message must name the field", tc.what)
			}
		}
	}, SpecTimeout(30*time.Second))
})

// semArgs is a lock of permits (nil: the SDK's default) of the semaphore
// key with the given limit: one attempt when try, else waiting for wait
// (the first of waits; none given: one attempt through the acquire).
func semArgs(key string, limit int, permits *int, ttlMs int64, try bool, waits ...time.Duration) sdkrunner.LockArgs {
	a := sdkrunner.LockArgs{Key: key, Kind: sdkrunner.LockKindSemaphore, Limit: limit, Permits: permits, TTLMs: ttlMs, Try: try}
	if len(waits) > 0 {
		a.WaitMs = waits[0].Milliseconds()
	}
	return a
}

// needKind skips a spec of a kind the adapter does not claim (its
// capability) or the backend does not serve.
func (sc *SDKContext) needKind(capability string) {
	if !sc.Adapter.Has(capability) {
		Skip("the adapter does not claim " + capability)
	}
	kind := lockv1.Kind_KIND_SEMAPHORE
	if capability == sdkrunner.CapRWLock {
		kind = lockv1.Kind_KIND_RWLOCK
	}
	if !slices.Contains(sc.Backend().GetKinds(), kind) {
		Skip(fmt.Sprintf("the backend does not keep %s keys (BackendInfo.kinds %v)", kind, sc.Backend().GetKinds()))
	}
}
