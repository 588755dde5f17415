package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "Acquiring". The fault proxy in front of the
// server counts the SDK's Acquire calls, so "one attempt" is checked as
// one request, not as a short time.
var _ = describeSDK("behaviour table: acquiring", Label("sdk-behaviour", "waiting"), func(sc *SDKContext) {
	via := func(ctx SpecContext, p *faultproxy.Proxy) SDKClient {
		return sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
	}

	It("acquire, free key: one Acquire RPC answers a guard holding the lease", func(ctx SpecContext) {
		p := sc.Proxy(sc.URL)
		c := via(ctx, p)
		key := sc.Key("sdk-acquire-free")
		res, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitUnset: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Requests("Acquire")).To(HaveLen(1), "Acquire calls for a free key")
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetHeld()).To(BeTrue())
		Expect(ins.GetState().GetFencingToken()).To(Equal(uint64(res.FencingToken)))
		Expect(c.GuardState(ctx, res.Guard).State).To(Equal(sdkrunner.StateHeld))
		Expect(c.Unlock(ctx, res.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("acquire, held key, no wait set: queues on the server until acquired, re-sending the Acquire each time the server's --max-wait ends it", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it needs one with a short --max-wait (use Config.Serve)")
		}
		s, err := sc.StartServerWith(ctx, "--max-wait", "1s")
		Expect(err).NotTo(HaveOccurred())
		rpc := sc.RPCFor(s.URL)
		p := sc.Proxy(s.URL)
		c := via(ctx, p)
		key := sc.Key("sdk-no-wait-set")
		held, err := sc.Acquire(ctx, rpc, key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(held.GetAcquired()).To(BeTrue())

		w := c.SendLock(sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitUnset: true})
		// Three waiting Acquires the server let through: at least two were
		// ended by its 1s cap and sent again, and the lock is still waiting.
		Eventually(func() int {
			if w.Answered() {
				StopTrying(fmt.Sprintf("the lock with no wait set answered while the key was held: %v", w.Wait(ctx, nil))).Now()
			}
			n := 0
			for _, r := range p.Requests("Acquire") {
				if r.Outcome == faultproxy.Forwarded {
					n++
				}
			}
			return n
		}).WithContext(ctx).WithTimeout(10*time.Second).WithPolling(20*time.Millisecond).Should(BeNumerically(">=", 3),
			"the SDK did not keep re-sending its waiting Acquire past the server's --max-wait 1s")
		sc.AwaitQueued(ctx, rpc, key, 1, w)
		released, err := rpc.Release(ctx, releaseReq(key, held.GetLease().GetOwnerToken()))
		Expect(err).NotTo(HaveOccurred())
		Expect(released.GetReleased()).To(BeTrue())
		var res sdkrunner.LockResult
		Expect(w.Wait(ctx, &res)).To(Succeed(), "the waiting lock, once the key was released")
		Expect(uint64(res.FencingToken)).To(BeNumerically(">", held.GetLease().GetFencingToken()))
		Expect(c.Unlock(ctx, res.Guard)).To(Succeed())
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("acquire, held key, wait = d: queues for at most d, then fails with not_acquired carrying the holder's state", func(ctx SpecContext) {
		key := sc.Key("sdk-wait-d")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		c := sc.SDK(ctx)
		const d = 500 * time.Millisecond
		start := time.Now()
		w := c.SendLock(sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitMs: d.Milliseconds()})
		sc.AwaitQueued(ctx, sc.RPC, key, 1, w)
		err := w.Wait(ctx, nil)
		took := time.Since(start)
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired))
		Expect(err).To(HaveCode("not_acquired"))
		Expect(took).To(BeNumerically(">=", d*9/10), "gave up after %s of wait %s", took, d)
		Expect(took).To(BeNumerically("<=", d+2*sc.Config.Slack), "gave up after %s of wait %s", took, d)
		cur := ErrorOf(err).Current
		Expect(cur).NotTo(BeNil(), "the not-acquired error carries the holder's state (current)")
		Expect(uint64(cur.FencingToken)).To(Equal(held.GetFencingToken()))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("acquire, wait = 0: exactly one attempt; a held key answers not_acquired with the holder's state", func(ctx SpecContext) {
		key := sc.Key("sdk-wait-0")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		p := sc.Proxy(sc.URL)
		c := via(ctx, p)
		_, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitMs: 0})
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired))
		Expect(p.Requests("Acquire")).To(HaveLen(1), "Acquire calls of an acquire with wait 0")
		cur := ErrorOf(err).Current
		Expect(cur).NotTo(BeNil(), "the not-acquired error carries the holder's state (current)")
		Expect(uint64(cur.FencingToken)).To(Equal(held.GetFencingToken()))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("acquire cancelled: the server-side wait is cancelled at once (the waiter leaves the queue) and the SDK reports the cancellation in its idiom", func(ctx SpecContext) {
		key := sc.Key("sdk-cancel")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		c := sc.SDK(ctx)
		w := c.SendLock(sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitUnset: true})
		sc.AwaitQueued(ctx, sc.RPC, key, 1, w)
		start := time.Now()
		Expect(c.A.Call(ctx, sdkrunner.CmdCancel, sdkrunner.CancelArgs{ID: w.ID}, nil)).To(Succeed())
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := w.Wait(wctx, nil)
		Expect(err).To(BeKind(sdkrunner.KindCanceled), "a cancelled acquire (Go: ctx cancelled; TS: signal aborted; Python: task cancelled)")
		Expect(time.Since(start)).To(BeNumerically("<", time.Second), "the cancelled acquire answered after %s", time.Since(start))
		sc.AwaitWaiters(ctx, key, 0)
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second), "the waiter left the server's queue %s after the cancel", time.Since(start))
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetState().GetFencingToken()).To(Equal(held.GetFencingToken()))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("try: exactly one attempt that never queues, ignoring a wait set on the builder; a held key answers not_acquired, never a value that is not a guard", func(ctx SpecContext) {
		key := sc.Key("sdk-try")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		p := sc.Proxy(sc.URL)
		c := via(ctx, p)
		const wait = 5 * time.Second
		start := time.Now()
		_, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitMs: wait.Milliseconds(), Try: true})
		took := time.Since(start)
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired), "try on a held key: the SDK's answer must say not acquired (Go: *NotAcquiredError; TS: undefined; Python: None)")
		Expect(p.Requests("Acquire")).To(HaveLen(1), "Acquire calls of a try")
		Expect(took).To(BeNumerically("<", wait/2), "a try with a wait of %s set on the builder took %s: it queued", wait, took)
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetState().GetFencingToken()).To(Equal(held.GetFencingToken()), "the holder changed")
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
		// And on a free key, the same try holds it.
		res, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), WaitMs: wait.Milliseconds(), Try: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetState().GetFencingToken()).To(Equal(uint64(res.FencingToken)))
		Expect(c.Unlock(ctx, res.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("skip if held: with the key held, the function is not called, ran is false and there is no error", func(ctx SpecContext) {
		key := sc.Key("sdk-skip-held")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		c := sc.SDK(ctx)
		run := "skip-" + key
		start := time.Now()
		var res sdkrunner.RunIfFreeResult
		err := c.A.Call(ctx, sdkrunner.CmdRunIfFree, sdkrunner.RunIfFreeArgs{Client: c.ID, Key: key, Run: run, TTLMs: sc.LongTTL().Milliseconds(), WaitMs: 5000}, &res)
		Expect(err).NotTo(HaveOccurred(), "skip if held is not an error")
		Expect(res.Ran).To(BeFalse())
		Expect(time.Since(start)).To(BeNumerically("<", 2500*time.Millisecond), "run_if_free waited (a wait on the builder must be ignored)")
		for _, e := range c.A.Events() {
			Expect(e.Event == sdkrunner.EventRunStarted && e.Run == run).To(BeFalse(), "the function ran although the key was held")
		}
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetState().GetFencingToken()).To(Equal(held.GetFencingToken()))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("skip if held: with the key free, the function runs under the guard (watchdog on) and the lock is released after it", func(ctx SpecContext) {
		key := sc.Key("sdk-skip-free")
		c := sc.SDK(ctx)
		run := "free-" + key
		ttl := sc.TTL()
		p, err := c.A.Send(sdkrunner.CmdRunIfFree, sdkrunner.RunIfFreeArgs{Client: c.ID, Key: key, Run: run, TTLMs: ttl.Milliseconds()})
		Expect(err).NotTo(HaveOccurred())
		started, err := awaitRun(ctx, c, run, p)
		Expect(err).NotTo(HaveOccurred(), "no run_started event")
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetState().GetFencingToken()).To(Equal(uint64(started.FencingToken)), "the function runs while its guard holds the key")
		// Running for longer than the TTL is the subject: the watchdog
		// keeps the lease while the function runs.
		time.Sleep(ttl + ttl/2)
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetHeld()).To(BeTrue(), "the lease ran out while the function ran: no watchdog?")
		Expect(ins.GetState().GetFencingToken()).To(Equal(uint64(started.FencingToken)))
		Expect(c.A.Call(ctx, sdkrunner.CmdRunFinish, sdkrunner.RunFinishArgs{Run: run}, nil)).To(Succeed())
		var res sdkrunner.RunIfFreeResult
		Expect(p.Wait(ctx, &res)).To(Succeed())
		Expect(res.Ran).To(BeTrue())
		Expect(res.Value).To(Equal(started.FencingToken.String()), "run_if_free answers the function's value")
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "the lock is released after the function")
	}, SpecTimeout(30*time.Second))

	It("skip if held: a lease lost while the function runs is reported as the lease-lost error", func(ctx SpecContext) {
		key := sc.Key("sdk-skip-lost")
		px := sc.Proxy(sc.URL)
		c := via(ctx, px)
		run := "lost-" + key
		ttl := sc.TTL()
		p, err := c.A.Send(sdkrunner.CmdRunIfFree, sdkrunner.RunIfFreeArgs{Client: c.ID, Key: key, Run: run, TTLMs: ttl.Milliseconds()})
		Expect(err).NotTo(HaveOccurred())
		_, err = awaitRun(ctx, c, run, p)
		Expect(err).NotTo(HaveOccurred(), "no run_started event")
		// Cut the guard off: no renewal gets through. Once the store has
		// let the lease go, the guard's local expiry (earlier) has passed.
		px.SetMode(faultproxy.Blackhole)
		next, err := sc.AwaitFreeOn(ctx, sc.RPC, key, sc.LongTTL(), sc.FreeWithin()+5*time.Second)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { sc.Release(ctx, key, next.GetOwnerToken()) })
		px.SetMode(faultproxy.Pass)
		Expect(c.A.Call(ctx, sdkrunner.CmdRunFinish, sdkrunner.RunFinishArgs{Run: run}, nil)).To(Succeed())
		err = p.Wait(ctx, nil)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "run_if_free whose lease was lost while the function ran")
		Expect(err).To(HaveCode("lease_lost"))
	}, SpecTimeout(30*time.Second))
})

// awaitRun waits for the run_started event of run_if_free's function, and
// fails at once when the run_if_free command p answers first.
func awaitRun(ctx context.Context, c SDKClient, run string, p *sdkrunner.Pending) (sdkrunner.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		ev, err := c.A.WaitEvent(wctx, func(e sdkrunner.Event) bool { return e.Event == sdkrunner.EventRunStarted && e.Run == run })
		wcancel()
		switch {
		case err == nil:
			return ev, nil
		case p.Answered():
			return ev, fmt.Errorf("run_if_free answered before its function started: %w", p.Wait(ctx, nil))
		case ctx.Err() != nil:
			return ev, err
		}
	}
}
