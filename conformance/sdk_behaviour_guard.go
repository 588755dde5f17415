package conformance

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "The guard and the watchdog". Renewals are timed
// where they arrive, at the fault proxy in front of the server; leases are
// ended behind their guard's back by releasing them with the owner token
// the proxy saw in the Acquire answer, which works on every backend.
var _ = describeSDK("behaviour table: the guard and the watchdog", Label("sdk-behaviour", "watchdog"), func(sc *SDKContext) {
	// proxied is a client whose every request goes through a fresh proxy.
	proxied := func(ctx SpecContext, args sdkrunner.ConnectArgs) (SDKClient, *faultproxy.Proxy) {
		p := sc.Proxy(sc.URL)
		args.Addr = p.URL
		return sc.ConnectWith(ctx, sc.Adapter, args), p
	}
	// arrivals are the arrival times of the requests of method with the
	// outcome, after since.
	arrivals := func(p *faultproxy.Proxy, method string, outcome faultproxy.Outcome, since time.Time) []time.Time {
		var at []time.Time
		for _, r := range p.Requests(method) {
			if r.Outcome == outcome && !r.Arrived.Before(since) {
				at = append(at, r.Arrived)
			}
		}
		return at
	}
	gapsOf := func(at []time.Time) []time.Duration {
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			gaps = append(gaps, at[i].Sub(at[i-1]))
		}
		return gaps
	}
	// endLease releases the guard's lease with its owner token, from
	// outside the SDK, as an operator (or a store that lost it) would.
	endLease := func(ctx SpecContext, p *faultproxy.Proxy, l sdkrunner.LockResult) {
		GinkgoHelper()
		lease, ok := p.Lease(uint64(l.FencingToken))
		Expect(ok).To(BeTrue(), "the proxy saw no Acquire answer with fencing token %d", l.FencingToken)
		Expect(sc.Release(ctx, lease.Key, lease.OwnerToken)).To(BeTrue(), "releasing the guard's lease from outside")
	}
	// endLeaseOf is endLease for a guard on key among several taken together
	// (their fencing tokens may be equal: unique per key only).
	endLeaseOf := func(ctx SpecContext, p *faultproxy.Proxy, key string, l sdkrunner.LockResult) {
		GinkgoHelper()
		lease, ok := p.LeaseOf(key, uint64(l.FencingToken))
		Expect(ok).To(BeTrue(), "the proxy saw no Acquire answer for %q with fencing token %d", key, l.FencingToken)
		Expect(sc.Release(ctx, lease.Key, lease.OwnerToken)).To(BeTrue(), "releasing the guard's lease from outside")
	}
	defaultMargin := func(ttl time.Duration) time.Duration { return ttl/100 + 20*time.Millisecond }

	renewalsOf := func(ctx SpecContext, c SDKClient, guard string) int {
		GinkgoHelper()
		st := c.GuardState(ctx, guard)
		Expect(st.Renewals).NotTo(BeNil(), "guard_state must report renewals")
		return *st.Renewals
	}
	keysFor := func(name string, n int) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = sc.Key(fmt.Sprintf("%s-%d", name, i))
		}
		return keys
	}

	It("one watchdog per client: a client's guards due together are renewed in one call (ExtendBatch), so renewal calls grow with the clients, not with the leases", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		// Guards are renewed together when they fall due within a sixth of
		// their TTL of each other. Their acquisitions, sent at once, end
		// over a store's latency times n over its connection pool (200 ms
		// and more on PostgreSQL on a loaded machine): a TTL of three times
		// the usual keeps that spread well inside TTL/6.
		ttl := 3 * sc.TTL()
		const n = 20
		start := time.Now()
		gs := c.MustLockMany(ctx, keysFor("sdk-batch", n), ttl)
		// Every guard renewed at least twice: two renewal periods or more.
		Eventually(func() int {
			least := -1
			for _, g := range gs {
				if r := renewalsOf(ctx, c, g.Guard); least < 0 || r < least {
					least = r
				}
			}
			return least
		}).WithContext(ctx).WithTimeout(ttl+2*sc.Config.Slack).WithPolling(20*time.Millisecond).Should(BeNumerically(">=", 2), "the fewest renewals of %d guards", n)
		elapsed := time.Since(start)
		calls := len(arrivals(p, "Extend", faultproxy.Forwarded, start)) + len(arrivals(p, "ExtendBatch", faultproxy.Forwarded, start))
		periods := int(elapsed/(ttl/3)) + 1
		AddReportEntry("renewal calls for the client's guards", fmt.Sprintf("%d calls (%d Extend, %d ExtendBatch) for %d guards in %s (%d periods of TTL/3)",
			calls, len(p.Requests("Extend")), len(p.Requests("ExtendBatch")), n, elapsed.Round(time.Millisecond), periods), ReportEntryVisibilityFailureOrVerbose)
		// A watchdog per guard would make n calls a period; one per client
		// makes one (the guards were taken together), a few at most.
		Expect(calls).To(BeNumerically("<=", 3*periods), "renewal calls for %d guards over %d renewal periods", n, periods)
		for _, g := range gs {
			Expect(c.GuardState(ctx, g.Guard).State).To(Equal(sdkrunner.StateHeld))
			Expect(c.Unlock(ctx, g.Guard)).To(Succeed())
		}
	}, SpecTimeout(time.Minute))

	It("one watchdog per client: semaphore and read-write lock grants are renewed with the client's locks, in a few calls a period", Label("semaphore", "rwlock"), func(ctx SpecContext) {
		sc.needKind(sdkrunner.CapSemaphore)
		sc.needKind(sdkrunner.CapRWLock)
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		ttl := 3 * sc.TTL() // as above: the acquisitions' spread stays inside TTL/6
		ms := ttl.Milliseconds()
		sem, rw := sc.Key("sdk-batch-sem"), sc.Key("sdk-batch-rw")
		var args []sdkrunner.LockArgs
		for range 6 {
			args = append(args, semArgs(sem, 6, nil, ms, true))
		}
		for range 4 {
			args = append(args, rwArgs(rw, sdkrunner.ModeShared, ms, true))
		}
		for _, k := range keysFor("sdk-batch-mixed", 2) {
			args = append(args, sdkrunner.LockArgs{Key: k, TTLMs: ms, Try: true})
		}
		start := time.Now()
		pending := make([]*sdkrunner.Pending, len(args))
		for i, a := range args {
			pending[i] = c.SendLock(a) // all at once: they fall due together
		}
		gs := make([]sdkrunner.LockResult, len(args))
		for i, pd := range pending {
			Expect(pd.Wait(ctx, &gs[i])).To(Succeed(), "grant %d (%s %s)", i, args[i].Kind, args[i].Key)
		}
		Eventually(func() int {
			least := -1
			for _, g := range gs {
				if r := renewalsOf(ctx, c, g.Guard); least < 0 || r < least {
					least = r
				}
			}
			return least
		}).WithContext(ctx).WithTimeout(ttl+2*sc.Config.Slack).WithPolling(20*time.Millisecond).Should(BeNumerically(">=", 2), "the fewest renewals of %d grants and locks", len(gs))
		elapsed := time.Since(start)
		calls := len(arrivals(p, "Extend", faultproxy.Forwarded, start)) + len(arrivals(p, "ExtendBatch", faultproxy.Forwarded, start))
		periods := int(elapsed/(ttl/3)) + 1
		AddReportEntry("renewal calls for semaphore, rwlock and lock guards", fmt.Sprintf("%d calls for %d guards over %d periods", calls, len(gs), periods), ReportEntryVisibilityFailureOrVerbose)
		// A watchdog per guard would make 12 calls a period.
		Expect(calls).To(BeNumerically("<=", 3*periods), "renewal calls for %d guards over %d renewal periods", len(gs), periods)
		for _, g := range gs {
			Expect(c.GuardState(ctx, g.Guard).State).To(Equal(sdkrunner.StateHeld))
			Expect(c.Unlock(ctx, g.Guard)).To(Succeed())
		}
	}, SpecTimeout(time.Minute))

	It("one watchdog per client: a renewal answered extended=false for one of the guards renewed together poisons that guard alone, reason rejected; the others keep their leases", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		ttl := sc.TTL()
		keys := keysFor("sdk-batch-reject", 5)
		gs := c.MustLockMany(ctx, keys, ttl)
		endLeaseOf(ctx, p, keys[2], gs[2])
		wctx, cancel := context.WithTimeout(ctx, ttl/3+sc.Config.Slack+2*time.Second)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, gs[2].Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event for the guard whose lease ended")
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonRejected))
		before := make([]int, len(gs))
		for i, g := range gs {
			if i != 2 {
				before[i] = renewalsOf(ctx, c, g.Guard)
			}
		}
		for i, g := range gs {
			if i == 2 {
				continue
			}
			Eventually(func() int { return renewalsOf(ctx, c, g.Guard) }).WithContext(ctx).WithTimeout(ttl/3+2*sc.Config.Slack).WithPolling(20*time.Millisecond).
				Should(BeNumerically(">", before[i]), "guard %d renewed again beside the rejected one", i)
			Expect(c.GuardState(ctx, g.Guard).State).To(Equal(sdkrunner.StateHeld), "guard %d", i)
		}
		for _, e := range sc.Adapter.Events() {
			for i, g := range gs {
				if i != 2 && e.Event == "lease_lost" {
					Expect(e.Guard).NotTo(Equal(g.Guard), "lease_lost event for guard %d, which held: %+v", i, e.Message)
				}
			}
		}
		for i, g := range gs {
			if i != 2 {
				Expect(c.Unlock(ctx, g.Guard)).To(Succeed())
			}
		}
	}, SpecTimeout(time.Minute))

	It("renewal cadence: the watchdog renews every TTL/3 after the last successful renewal was sent, and retries a failed renewal with the backoff", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		ttl := sc.TTL()
		start := time.Now()
		l := c.MustLock(ctx, sc.Key("sdk-cadence"), ttl)
		Eventually(func() int { return len(arrivals(p, "Extend", faultproxy.Forwarded, start)) }).
			WithContext(ctx).WithTimeout(3*ttl+5*time.Second).WithPolling(10*time.Millisecond).Should(BeNumerically(">=", 5), "renewals in 5 TTL/3")
		gaps := gapsOf(arrivals(p, "Extend", faultproxy.Forwarded, start))
		third := ttl / 3
		AddReportEntry("intervals between renewals (TTL "+ttl.String()+")", fmt.Sprint(gaps), ReportEntryVisibilityFailureOrVerbose)
		med := medianOf(gaps)
		Expect(med).To(BeNumerically(">=", third*9/10), "median interval between renewals %s (all %v), want TTL/3 = %s", med, gaps, third)
		Expect(med).To(BeNumerically("<=", third+sc.Config.Slack/2), "median interval between renewals %s (all %v), want TTL/3 = %s", med, gaps, third)

		// From now on renewals are answered unavailable: the next one is
		// retried at once with the backoff (50ms doubling: [25ms, 50ms],
		// [50ms, 100ms], ...), not at the next TTL/3.
		cut := time.Now()
		p.SetMode(faultproxy.Unavailable)
		wctx, cancel := context.WithTimeout(ctx, ttl+sc.Config.Slack+2*time.Second)
		defer cancel()
		_, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event after renewals stopped getting through")
		failed := arrivals(p, "Extend", faultproxy.Refused, cut)
		Expect(len(failed)).To(BeNumerically(">=", 3), "renewal attempts between the first failure and the local expiry")
		retries := gapsOf(failed)
		AddReportEntry("pauses between failed renewals", fmt.Sprint(retries), ReportEntryVisibilityFailureOrVerbose)
		for i, gap := range retries {
			d := min(50*time.Millisecond<<i, time.Second)
			// The last attempt may come early: a pause is the backoff or the
			// time left to the local expiry, whichever is less, and the
			// first failure leaves about 2/3 of the TTL: the backoff's
			// pauses add up to that within four or five attempts.
			if i < len(retries)-1 {
				Expect(gap).To(BeNumerically(">=", d/2-10*time.Millisecond), "pause %d after a failed renewal: %s (all %v), want at least %s", i, gap, retries, d/2)
			}
			Expect(gap).To(BeNumerically("<=", d+2*sc.Config.Slack), "pause %d after a failed renewal: %s (all %v), want at most %s (+ 2 x slack)", i, gap, retries, d)
		}
	}, SpecTimeout(time.Minute))

	It("local expiry: the guard counts its lease from the moment the acquire was sent, minus the expiry margin (TTL/100 + 20ms by default, or as configured)", Label("backend-independent"), func(ctx SpecContext) {
		ttl := max(10*time.Second, sc.TTL())
		for _, m := range []*sdkrunner.ExpiryMargin{nil, {DriftFactor: 0.1, FixedMs: 200}} {
			margin := defaultMargin(ttl)
			if m != nil {
				margin = time.Duration(float64(ttl)*m.DriftFactor) + time.Duration(m.FixedMs)*time.Millisecond
			}
			c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.URL, ExpiryMargin: m})
			sent := time.Now() // before the SDK sent its Acquire
			l := c.MustLock(ctx, sc.Key("sdk-local-expiry"), ttl)
			st := c.GuardState(ctx, l.Guard)
			elapsed := time.Since(sent) // the guard's clock read within this
			Expect(st.RemainingMs).NotTo(BeNil(), "guard_state must report remaining_ms (the guard's remaining())")
			remaining := time.Duration(*st.RemainingMs * float64(time.Millisecond))
			local := ttl - margin
			Expect(remaining).To(BeNumerically("<=", local+time.Millisecond),
				"remaining %s right after the acquire, TTL %s: the local expiry must keep the margin %s (expiry margin %+v) back", remaining, ttl, margin, m)
			Expect(remaining).To(BeNumerically(">=", local-elapsed-time.Millisecond),
				"remaining %s %s after the acquire was sent, TTL %s, margin %s: counted from a moment before the send?", remaining, elapsed, ttl, margin)
			Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
		}
	}, SpecTimeout(30*time.Second))

	It("local expiry: a guard cut off from its server is poisoned at least the expiry margin before the store could grant the key to another holder", func(ctx SpecContext) {
		ttl := max(sc.TTL(), 2*time.Second)
		// A wide margin (700ms of a 2s lease), so that the check does not
		// hinge on how fast the adapter's report crosses its pipe on a
		// loaded machine.
		m := &sdkrunner.ExpiryMargin{DriftFactor: 0.2, FixedMs: 300}
		margin := time.Duration(float64(ttl)*m.DriftFactor) + 300*time.Millisecond
		c, p := proxied(ctx, sdkrunner.ConnectArgs{ExpiryMargin: m})
		key := sc.Key("sdk-margin")
		start := time.Now()
		l := c.MustLock(ctx, key, ttl)
		// Cut it off right after a renewal got through.
		Eventually(func() int { return len(arrivals(p, "Extend", faultproxy.Forwarded, start)) }).
			WithContext(ctx).WithTimeout(ttl + 5*time.Second).WithPolling(time.Millisecond).Should(BeNumerically(">=", 1))
		p.SetMode(faultproxy.Blackhole)
		// The last request that got through was sent at or before it
		// arrived; the store counts that lease from no earlier.
		var last time.Time
		for _, r := range p.Requests("") {
			if r.Outcome == faultproxy.Forwarded && r.Arrived.After(last) {
				last = r.Arrived
			}
		}
		wctx, cancel := context.WithTimeout(ctx, ttl+5*time.Second)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event for a guard cut off from its server")
		next, stillHeld, err := sc.AwaitTakeover(ctx, key, uint64(l.FencingToken), sc.LongTTL(), sc.FreeWithin()+5*time.Second)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { sc.Release(ctx, key, next.GetOwnerToken()) })
		// The store still held the guard's lease when the last attempt it
		// refused for that lease was sent, after the loss was reported: it
		// could grant the key no earlier.
		Expect(stillHeld).NotTo(BeZero(), "the store had let the key go before the guard reported its loss")
		grantedAt := stillHeld
		tol := min(sc.Config.Slack, margin/2)
		lostAfter := ev.At.Sub(last)
		AddReportEntry("last renewal through to lease_lost / to the store's grant", fmt.Sprintf("%s / %s (TTL %s, margin %s)", lostAfter, grantedAt.Sub(last), ttl, margin), ReportEntryVisibilityFailureOrVerbose)
		Expect(lostAfter).To(BeNumerically("<=", ttl-margin+tol),
			"poisoned %s after the last renewal got through: want TTL %s - margin %s (+%s for the report to cross the pipe)", lostAfter, ttl, margin, tol)
		Expect(lostAfter).To(BeNumerically(">=", ttl-margin-sc.Config.Slack), "poisoned %s after the last renewal got through: too early for TTL %s - margin %s", lostAfter, ttl, margin)
		Expect(grantedAt.Sub(ev.At)).To(BeNumerically(">=", margin-tol),
			"the store granted the key %s after the guard reported its loss: want at least the margin %s", grantedAt.Sub(ev.At), margin)
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonExpired))
	}, SpecTimeout(time.Minute))

	It("renewal answered extended=false: the guard is poisoned at once, reason rejected", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		ttl := sc.TTL()
		l := c.MustLock(ctx, sc.Key("sdk-rejected"), ttl)
		endLease(ctx, p, l)
		ended := time.Now()
		wctx, cancel := context.WithTimeout(ctx, ttl/3+sc.Config.Slack+2*time.Second)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event after the lease was released behind the guard's back")
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonRejected))
		// The next renewal (within TTL/3) is answered extended=false, and
		// that answer poisons it.
		Expect(ev.At.Sub(ended)).To(BeNumerically("<=", ttl/3+sc.Config.Slack), "poisoned %s after the lease ended (TTL %s: the next renewal is due within TTL/3)", ev.At.Sub(ended), ttl)
		st := c.GuardState(ctx, l.Guard)
		Expect(st.State).To(Equal(sdkrunner.StateLost))
		Expect(st.Reason).To(Equal(sdkrunner.ReasonRejected))
	}, SpecTimeout(30*time.Second))

	It("no renewal succeeded by the local expiry: the guard is poisoned, reason expired, with the last renewal error as its cause", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		ttl := sc.TTL()
		start := time.Now()
		l := c.MustLock(ctx, sc.Key("sdk-expired"), ttl)
		p.SetMode(faultproxy.Unavailable)
		wctx, cancel := context.WithTimeout(ctx, ttl+sc.Config.Slack+2*time.Second)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event with renewals answered unavailable")
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonExpired))
		var last time.Time
		for _, r := range p.Requests("") {
			if r.Outcome == faultproxy.Forwarded && r.Arrived.After(last) {
				last = r.Arrived
			}
		}
		Expect(last.After(start)).To(BeTrue())
		Expect(ev.At.Sub(last)).To(BeNumerically("<=", ttl-defaultMargin(ttl)+2*sc.Config.Slack), "poisoned %s after the last request that got through (TTL %s)", ev.At.Sub(last), ttl)
		_, err = c.FencingToken(ctx, l.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost))
		e := ErrorOf(err)
		Expect(e.Code).To(Equal("lease_lost"))
		Expect(e.Reason).To(Equal(sdkrunner.ReasonExpired))
		Expect(e.CauseCode).To(Equal("unavailable"), "the loss's cause is the last renewal error (unavailable), in the error's cause_code")
	}, SpecTimeout(30*time.Second))

	It("after loss: the fencing token accessor, extend and unlock fail with the lease-lost error, every time the same, and the guard no longer holds; unlock never succeeds quietly", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		ttl := sc.TTL()
		key := sc.Key("sdk-after-loss")
		l := c.MustLock(ctx, key, ttl)
		endLease(ctx, p, l)
		successor := sc.MustAcquire(ctx, key, sc.LongTTL())
		wctx, cancel := context.WithTimeout(ctx, ttl/3+sc.Config.Slack+2*time.Second)
		defer cancel()
		_, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred())
		var msgs []string
		for range 2 {
			_, err := c.FencingToken(ctx, l.Guard)
			Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "fencing_token after loss")
			msgs = append(msgs, ErrorOf(err).Message)
			err = c.Extend(ctx, l.Guard, 0)
			Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "extend after loss")
			msgs = append(msgs, ErrorOf(err).Message)
			err = c.Unlock(ctx, l.Guard)
			Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "unlock after loss")
			Expect(err).To(HaveCode("lease_lost"))
			Expect(ErrorOf(err).Reason).To(Equal(sdkrunner.ReasonRejected))
			msgs = append(msgs, ErrorOf(err).Message)
		}
		Expect(slices.Compact(slices.Clone(msgs))).To(HaveLen(1), "the same lease-lost error every time: %q", msgs)
		st := c.GuardState(ctx, l.Guard)
		Expect(st.State).To(Equal(sdkrunner.StateLost))
		if st.RemainingMs != nil {
			Expect(*st.RemainingMs).To(BeZero(), "remaining once lost")
		}
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetState().GetFencingToken()).To(Equal(successor.GetFencingToken()), "the stale guard's unlock touched the successor's lock")
		Expect(sc.Release(ctx, key, successor.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("unlock: released=false is lease_lost (rejected); released=false on a retry after an attempt lost in transit is lease_lost (release_unconfirmed), unless the retry's request id is answered as the first attempt was (released); a second unlock after a successful one is a no-op", func(ctx SpecContext) {
		c, p := proxied(ctx, sdkrunner.ConnectArgs{})
		long := sc.LongTTL() // no renewal during the spec: the unlock meets the truth first

		l := c.MustLock(ctx, sc.Key("sdk-unlock-rejected"), long)
		endLease(ctx, p, l)
		err := c.Unlock(ctx, l.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "unlock answered released=false")
		Expect(ErrorOf(err).Reason).To(Equal(sdkrunner.ReasonRejected))

		key := sc.Key("sdk-unlock-unconfirmed")
		l = c.MustLock(ctx, key, long)
		before := len(p.Requests("Release"))
		p.LoseNextAnswer("Release")
		err = c.Unlock(ctx, l.Guard)
		if sc.Adapter.Has(sdkrunner.CapRequestIDs) && slices.Contains(sc.Backend().GetCapabilities(), lockv1.Capability_CAPABILITY_REQUEST_ID) {
			// The retry carries the first attempt's request id, and the
			// backend answers it as it answered the first: released.
			Expect(err).NotTo(HaveOccurred(), "unlock whose first Release was lost in transit, retried with its request id")
		} else {
			Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "unlock whose first Release was lost in transit and whose retry was answered released=false")
			Expect(ErrorOf(err).Reason).To(Equal(sdkrunner.ReasonReleaseUnconfirmed))
		}
		Expect(p.Requests("Release")).To(HaveLen(before+2), "the lost Release and its retry")
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "the first Release did release it")

		key = sc.Key("sdk-unlock-twice")
		l = c.MustLock(ctx, key, long)
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
		before = len(p.Requests("Release"))
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed(), "a second unlock after a successful one")
		Expect(p.Requests("Release")).To(HaveLen(before), "a second unlock sends nothing")
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse())
	}, SpecTimeout(30*time.Second))
})
