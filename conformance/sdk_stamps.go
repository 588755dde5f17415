package conformance

import (
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	"github.com/holdfast/holdfast/proto/hlc"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 6 through an SDK: the SDK's HLC is sent with every request and
// merges every answer, so stamps respect causality through it.
var _ = describeSDK("stamps", Label("stamps"), func(sc *SDKContext) {
	stampOf := func(t hlc.Timestamp) sdkrunner.Stamp {
		return sdkrunner.Stamp{WallTimeNs: sdkrunner.I64(t.WallTime), Logical: t.Logical}
	}
	after := func(a, b sdkrunner.Stamp) bool { return a.Compare(b) > 0 }

	It("stamps an SDK acquisition after the SDK clock's earlier reading, and the SDK clock moves past it", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		key := sc.Key("sdk-stamps")
		before := c.ClockNow(ctx)
		l := c.MustLock(ctx, key, sc.LongTTL())
		Expect(after(l.Stamp, before)).To(BeTrue(), "lease stamp %s not after the SDK clock's reading %s taken before the lock", l.Stamp, before)
		later := c.ClockNow(ctx)
		Expect(after(later, l.Stamp)).To(BeTrue(), "the SDK clock %s did not merge the lease stamp %s", later, l.Stamp)
		ins := sc.InspectRaw(ctx, sc.RPC, key)
		Expect(stampOf(hlc.FromProto(ins.GetState().GetStamp()))).To(Equal(l.Stamp), "the stamp the SDK reports is the lease's")
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("orders stamps along a chain of holders: two SDK clients and a raw client", func(ctx SpecContext) {
		key := sc.Key("sdk-stamps-chain")
		c1, c2 := sc.SDK(ctx), sc.SDK(ctx)
		l1 := c1.MustLock(ctx, key, sc.LongTTL())
		Expect(c1.Unlock(ctx, l1.Guard)).To(Succeed())
		l2 := c2.MustLock(ctx, key, sc.LongTTL())
		Expect(after(l2.Stamp, l1.Stamp)).To(BeTrue(), "second holder's stamp %s not after the first's %s", l2.Stamp, l1.Stamp)
		Expect(c2.Unlock(ctx, l2.Guard)).To(Succeed())
		raw := sc.MustAcquire(ctx, key, sc.LongTTL())
		s3 := stampOf(hlc.FromProto(raw.GetStamp()))
		Expect(after(s3, l2.Stamp)).To(BeTrue())
		Expect(sc.Release(ctx, key, raw.GetOwnerToken())).To(BeTrue())
		l4 := c1.MustLock(ctx, key, sc.LongTTL())
		Expect(after(l4.Stamp, s3)).To(BeTrue(), "SDK holder's stamp %s not after the raw holder's %s", l4.Stamp, s3)
		Expect(c1.Unlock(ctx, l4.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("carries what the SDK clock observed into the next acquisition, and refuses to merge a stamp beyond the max offset", func(ctx SpecContext) {
		if !sc.Adapter.Has(sdkrunner.CapClockUpdate) {
			Skip("the adapter does not claim " + sdkrunner.CapClockUpdate)
		}
		c := sc.SDK(ctx)
		key := sc.Key("sdk-causality")
		// A message from another node carried a stamp a little ahead of
		// this one's clock (within any max offset); the acquisition that
		// follows must be stamped after it, which only happens if the SDK
		// sends its clock as client_stamp.
		ahead := min(sc.MaxClockOffset(), hlc.DefaultMaxOffset) / 4
		seen := sdkrunner.Stamp{WallTimeNs: sdkrunner.I64(time.Now().Add(ahead).UnixNano()), Logical: 7}
		Expect(c.A.Call(ctx, sdkrunner.CmdClockUpdate, sdkrunner.ClockUpdateArgs{Client: c.ID, Stamp: seen}, nil)).To(Succeed())
		l := c.MustLock(ctx, key, sc.LongTTL())
		Expect(after(l.Stamp, seen)).To(BeTrue(), "lease stamp %s not after the stamp %s the SDK clock had observed", l.Stamp, seen)
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())

		far := sdkrunner.Stamp{WallTimeNs: sdkrunner.I64(time.Now().Add(time.Hour).UnixNano())}
		err := c.A.Call(ctx, sdkrunner.CmdClockUpdate, sdkrunner.ClockUpdateArgs{Client: c.ID, Stamp: far}, nil)
		Expect(err).To(BeKind(sdkrunner.KindInvalidArgument), "merging a stamp an hour ahead")
		now := c.ClockNow(ctx)
		Expect(now.Compare(far)).To(BeNumerically("<", 0), "the SDK clock jumped to a refused stamp")
		l2 := c.MustLock(ctx, key, sc.LongTTL())
		Expect(c.Unlock(ctx, l2.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))
})
