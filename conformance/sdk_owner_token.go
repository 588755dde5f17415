package conformance

import (
	"syscall"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 2 through an SDK: compare-on-release.
var _ = describeSDK("owner token", Label("owner-token"), func(sc *SDKContext) {
	It("answers a stale holder's unlock and extend with lease_lost and leaves the successor's lock alone", Label("disruptive"), func(ctx SpecContext) {
		a, err := sc.StartAdapter(ctx)
		Expect(err).NotTo(HaveOccurred())
		c := sc.Connect(ctx, a, sc.URL, "")
		key := sc.Key("sdk-stale-unlock")
		ttl := sc.TTL()
		l := c.MustLock(ctx, key, ttl)
		DeferCleanup(func() { _ = a.Signal(syscall.SIGCONT) })
		Expect(a.Signal(syscall.SIGSTOP)).To(Succeed())
		successor, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Signal(syscall.SIGCONT)).To(Succeed())

		Expect(c.Unlock(ctx, l.Guard)).To(BeKind(sdkrunner.KindLeaseLost), "unlock by the stale holder must report the loss, never a silent success")
		Expect(c.Extend(ctx, l.Guard, ttl)).To(BeKind(sdkrunner.KindLeaseLost), "extend by the stale holder")
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetHeld()).To(BeTrue(), "the stale unlock freed the successor's lock")
		Expect(ins.GetState().GetFencingToken()).To(Equal(successor.GetFencingToken()))
		// The SDK's own view agrees.
		got := c.Inspect(ctx, key)
		Expect(got.Held).To(BeTrue())
		Expect(uint64(got.State.FencingToken)).To(Equal(successor.GetFencingToken()))
		Expect(sc.Release(ctx, key, successor.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("releases a held guard on unlock, after which the key is free and the guard reports released", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		key := sc.Key("sdk-unlock")
		l := c.MustLock(ctx, key, sc.LongTTL())
		Expect(c.GuardState(ctx, l.Guard).State).To(Equal(sdkrunner.StateHeld))
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "unlock did not free the key")
		Expect(c.GuardState(ctx, l.Guard).State).To(Equal(sdkrunner.StateReleased))
		_, err := c.FencingToken(ctx, l.Guard)
		Expect(err).To(BeKind(sdkrunner.KindReleased), "fencing_token after unlock")
		Expect(c.Inspect(ctx, key).Held).To(BeFalse())
	}, SpecTimeout(30*time.Second))

	It("answers not_acquired while someone else holds the key, without disturbing the holder", func(ctx SpecContext) {
		key := sc.Key("sdk-contended")
		held := sc.MustAcquire(ctx, key, sc.LongTTL())
		c := sc.SDK(ctx)
		_, err := c.TryLock(ctx, key, sc.LongTTL())
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired))
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(ins.GetState().GetFencingToken()).To(Equal(held.GetFencingToken()))
		Expect(sc.Release(ctx, key, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))
})
