package conformance

import (
	"context"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 5 through an SDK: the watchdog renews, and poisons the guard when
// the lease is lost.
var _ = describeSDK("watchdog", Label("watchdog"), func(sc *SDKContext) {
	It("keeps a guard and its fencing token for 3 TTLs by renewing it", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		key := sc.Key("sdk-watchdog")
		ttl := sc.TTL()
		l := c.MustLock(ctx, key, ttl)

		// Holding for 3 TTLs is what is being tested: this wait is the
		// subject, not a stand-in for synchronisation.
		end := time.After(3 * ttl)
	hold:
		for {
			select {
			case <-end:
				break hold
			case <-time.After(ttl / 2):
				res, err := sc.Acquire(ctx, sc.RPC, key, ttl, 0)
				Expect(err).NotTo(HaveOccurred())
				Expect(res.GetAcquired()).To(BeFalse(), "another client acquired a lock whose SDK guard should renew it")
			}
		}
		Expect(c.GuardState(ctx, l.Guard).State).To(Equal(sdkrunner.StateHeld))
		tok, err := c.FencingToken(ctx, l.Guard)
		Expect(err).NotTo(HaveOccurred())
		Expect(tok).To(Equal(uint64(l.FencingToken)), "a renewed lease keeps its fencing token")
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetHeld()).To(BeTrue())
		Expect(ins.GetState().GetFencingToken()).To(Equal(tok))
		for _, e := range sc.Adapter.Events() {
			Expect(e.Guard).NotTo(Equal(l.Guard), "lease_lost event for a guard that held: %+v", e.Message)
		}
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("poisons a guard within its TTL when its server stops answering (SIGSTOP), and fencing_token then fails", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot pause it (use Config.Serve)")
		}
		s, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = s.Signal(syscall.SIGCONT) })
		c := sc.Connect(ctx, sc.Adapter, s.URL, "")
		key := sc.Key("sdk-poison")
		ttl := sc.TTL()
		l := c.MustLock(ctx, key, ttl)

		// From now on no renewal gets through. The last successful renewal
		// was sent before this moment, so the guard must be poisoned by
		// stopped + TTL on the holder's clock; the report reaches us through
		// a pipe, hence the slack.
		Expect(s.Signal(syscall.SIGSTOP)).To(Succeed())
		stopped := time.Now()
		bound := ttl + sc.Config.Slack
		wctx, cancel := context.WithTimeout(ctx, bound+2*time.Second)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event for guard %s within %s of the server pausing (TTL %s)", l.Guard, bound+2*time.Second, ttl)
		AddReportEntry("server paused to lease_lost event", ev.At.Sub(stopped).String(), ReportEntryVisibilityFailureOrVerbose)
		Expect(ev.At.Sub(stopped)).To(BeNumerically("<=", bound), "guard poisoned %s after renewals stopped getting through (TTL %s + slack %s)", ev.At.Sub(stopped), ttl, sc.Config.Slack)
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonExpired))

		_, err = c.FencingToken(ctx, l.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "fencing_token of a poisoned guard")
		st := c.GuardState(ctx, l.Guard)
		Expect(st.State).To(Equal(sdkrunner.StateLost))
		Expect(st.Reason).To(Equal(sdkrunner.ReasonExpired))

		// The server, once it runs again, agrees: the lease runs out and
		// someone else takes it with a larger fencing token; the poisoned
		// guard stays poisoned and its unlock says so.
		Expect(s.Signal(syscall.SIGCONT)).To(Succeed())
		next, err := sc.AwaitFreeOn(ctx, sc.RPCFor(s.URL), key, sc.LongTTL(), sc.FreeWithin()+5*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(next.GetFencingToken()).To(BeNumerically(">", uint64(l.FencingToken)))
		Expect(c.Unlock(ctx, l.Guard)).To(BeKind(sdkrunner.KindLeaseLost))
		Expect(c.GuardState(ctx, l.Guard).State).To(Equal(sdkrunner.StateLost))
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("poisons a guard whose renewal is answered extended=false, with reason rejected", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot end a lease behind its guard's back (use Config.Serve)")
		}
		if sc.Backend().GetDurable() {
			Skip("the backend declares durable=true: killing its plugin does not end a lease")
		}
		if sc.Backend().GetShared() {
			Skip("the backend is shared: its locks live outside the plugin, so killing the plugin does not end a lease")
		}
		// As at the service level: the one honest way to end a lease behind
		// its guard is to lose the store, so kill -9 the (non-durable) plugin
		// of a server of our own. The host restarts it empty and the
		// guard's next renewal is answered extended=false.
		s, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		pid, err := childPID(s.PID())
		if err != nil {
			Skip("cannot find the server's plugin process: " + err.Error())
		}
		ttl := max(sc.TTL(), 3*time.Second)
		c := sc.Connect(ctx, sc.Adapter, s.URL, "")
		l := c.MustLock(ctx, sc.Key("sdk-poison-rejected"), ttl)
		Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		wctx, cancel := context.WithTimeout(ctx, ttl+sc.Config.Slack)
		defer cancel()
		ev, err := sc.Adapter.LeaseLost(wctx, l.Guard)
		Expect(err).NotTo(HaveOccurred(), "no lease_lost event within TTL %s + slack after the store forgot the lease", ttl)
		Expect(ev.Reason).To(Equal(sdkrunner.ReasonRejected),
			"the renewal after the plugin restart should have been answered extended=false")
		_, err = c.FencingToken(ctx, l.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost))
		Expect(c.GuardState(ctx, l.Guard).Reason).To(Equal(sdkrunner.ReasonRejected))
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))
})
