package conformance

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "Errors", "Lease events and logs" and "Fencing".
var _ = describeSDK("behaviour table: errors, events and fencing", Label("sdk-behaviour", "backend-independent"), func(sc *SDKContext) {
	It("errors: each situation answers its code, the same names in every SDK", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		var wrong []string
		check := func(situation, want string, err error) {
			switch e := sdkrunner.ErrorOf(err); {
			case e == nil:
				wrong = append(wrong, fmt.Sprintf("%s: answered %v, want an error with code %q", situation, err, want))
			case e.Code != want:
				wrong = append(wrong, fmt.Sprintf("%s: code %q (kind %s: %s), want %q", situation, e.Code, e.Kind, e.Message, want))
			}
		}

		key := sc.Key("sdk-codes")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		_, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: long, Try: true})
		check("try on a held key", "not_acquired", err)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: long, WaitMs: 200})
		check("acquire whose wait ran out", "not_acquired", err)
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())

		// Each situation on a key of its own, so that one wrong answer does
		// not spill into the next.
		l := c.MustLock(ctx, sc.Key("sdk-codes-released"), sc.LongTTL())
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
		_, err = c.FencingToken(ctx, l.Guard)
		check("fencing token of an unlocked guard", "lock_released", err)

		p := sc.Proxy(sc.URL)
		viaProxy := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
		l = viaProxy.MustLock(ctx, sc.Key("sdk-codes-lost"), sc.LongTTL())
		lease, ok := p.Lease(uint64(l.FencingToken))
		Expect(ok).To(BeTrue())
		Expect(sc.Release(ctx, lease.Key, lease.OwnerToken)).To(BeTrue())
		check("unlock of a lease released behind the guard's back", "lease_lost", viaProxy.Unlock(ctx, l.Guard))

		err = c.A.Call(ctx, sdkrunner.CmdValidateWrite, sdkrunner.ValidateWriteArgs{Token: 4, Watermark: 5}, nil)
		check("validate_write of a stale token", "stale_token", err)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: sc.Key("sdk-codes-ttl"), TTLMs: 50, Try: true})
		check("a TTL below the SDK minimum", "invalid_argument", err)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: strings.Repeat("k", 600), TTLMs: long, Try: true})
		check("a key the server refuses", "invalid_argument", err)
		err = c.A.Call(ctx, sdkrunner.CmdConnect, sdkrunner.ConnectArgs{Addr: "ftp://127.0.0.1:1"}, nil)
		check("a malformed address", "invalid_argument", err)
		if sc.Adapter.Has(sdkrunner.CapClockUpdate) {
			far := sdkrunner.Stamp{WallTimeNs: sdkrunner.I64(time.Now().Add(time.Hour).UnixNano())}
			err = c.A.Call(ctx, sdkrunner.CmdClockUpdate, sdkrunner.ClockUpdateArgs{Client: c.ID, Stamp: far}, nil)
			check("a remote stamp beyond the max clock offset", "clock_offset", err)
		}

		u := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.ClosedURL(), RetryBudgetMs: 300})
		err = u.A.Call(ctx, sdkrunner.CmdInspect, sdkrunner.InspectArgs{Client: u.ID, Key: key}, nil)
		check("an unreachable server", "unavailable", err)

		// The adapter forgets a closed client, so the SDK's answer is seen
		// through an acquire that was waiting when its client closed.
		waiter := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.URL})
		key = sc.Key("sdk-codes-closed")
		held = sc.MustAcquire(ctx, key, sc.LongTTL())
		w := waiter.SendLock(sdkrunner.LockArgs{Key: key, TTLMs: long, WaitMs: 20000})
		sc.AwaitQueued(ctx, sc.RPC, key, 1, w)
		Expect(waiter.A.Call(ctx, sdkrunner.CmdClose, sdkrunner.ClientArgs{Client: waiter.ID}, nil)).To(Succeed())
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		check("an acquire ended by closing its client", "client_closed", w.Wait(wctx, nil))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())

		Expect(wrong).To(BeEmpty(), "error codes (docs/sdk-behaviour.md, Errors)")
	}, SpecTimeout(time.Minute))

	It("lease events: renewed, renewal_failed (with the error), lost (with the reason) and released reach the client's listener", func(ctx SpecContext) {
		p := sc.Proxy(sc.URL)
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL, LeaseEvents: true})
		ttl := sc.TTL()
		within := ttl + sc.Config.Slack + 2*time.Second
		l := c.MustLock(ctx, sc.Key("sdk-events"), ttl)
		ev, err := c.LeaseEvent(ctx, l.FencingToken, sdkrunner.LeaseRenewed, within)
		Expect(err).NotTo(HaveOccurred(), "no renewed event")
		Expect(ev.Renewals).To(BeNumerically(">=", 1), "a renewed event counts the renewals")
		Expect(ev.Key).NotTo(BeEmpty())
		p.SetMode(faultproxy.Unavailable)
		ev, err = c.LeaseEvent(ctx, l.FencingToken, sdkrunner.LeaseRenewalFailed, within)
		Expect(err).NotTo(HaveOccurred(), "no renewal_failed event while renewals are answered unavailable")
		Expect(ev.ErrorCode).To(Equal("unavailable"), "renewal_failed carries the error")
		ev, err = c.LeaseEvent(ctx, l.FencingToken, sdkrunner.LeaseLost, within)
		Expect(err).NotTo(HaveOccurred(), "no lost event")
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonExpired), "lost carries the reason")
		p.SetMode(faultproxy.Pass)

		l2 := c.MustLock(ctx, sc.Key("sdk-events-released"), sc.LongTTL())
		Expect(c.Unlock(ctx, l2.Guard)).To(Succeed())
		_, err = c.LeaseEvent(ctx, l2.FencingToken, sdkrunner.LeaseReleased, 5*time.Second)
		Expect(err).NotTo(HaveOccurred(), "no released event after a confirmed unlock")
		for _, e := range c.A.Events() {
			if e.Event == sdkrunner.EventLease && e.FencingToken == l2.FencingToken {
				Expect(e.Type).NotTo(Equal(sdkrunner.LeaseLost), "a lost event for a guard that was released")
			}
		}
	}, SpecTimeout(time.Minute))

	It("fencing: validate_write returns the new watermark, max(token, watermark), exact over 64 bits", func(ctx SpecContext) {
		for _, tc := range []struct{ token, watermark, want uint64 }{
			{5, 5, 5}, {6, 5, 6}, {1, 0, 1}, {math.MaxUint64, math.MaxUint64 - 1, math.MaxUint64}, {1<<53 + 1, 1 << 53, 1<<53 + 1},
		} {
			var res sdkrunner.ValidateWriteResult
			err := sc.Adapter.Call(ctx, sdkrunner.CmdValidateWrite, sdkrunner.ValidateWriteArgs{Token: sdkrunner.U64(tc.token), Watermark: sdkrunner.U64(tc.watermark)}, &res)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Watermark).NotTo(BeNil(), "validate_write must answer the new watermark the SDK returned")
			Expect(uint64(*res.Watermark)).To(Equal(tc.want), "validate_write(%d, %d)", tc.token, tc.watermark)
		}
	}, SpecTimeout(30*time.Second))
})
