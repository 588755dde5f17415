package conformance

import (
	"math"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 4 through an SDK.
var _ = describeSDK("fencing", Label("fencing"), func(sc *SDKContext) {
	It("hands out strictly increasing fencing tokens along a chain of holders: two SDK clients and a raw client", func(ctx SpecContext) {
		key := sc.Key("sdk-fencing")
		c1, c2 := sc.SDK(ctx), sc.SDK(ctx)
		l1 := c1.MustLock(ctx, key, sc.LongTTL())
		tok, err := c1.FencingToken(ctx, l1.Guard)
		Expect(err).NotTo(HaveOccurred())
		Expect(tok).To(Equal(uint64(l1.FencingToken)), "fencing_token must repeat the token lock returned")
		Expect(c1.Unlock(ctx, l1.Guard)).To(Succeed())

		l2 := c2.MustLock(ctx, key, sc.LongTTL())
		Expect(l2.FencingToken).To(BeNumerically(">", l1.FencingToken), "second SDK holder")
		Expect(c2.Unlock(ctx, l2.Guard)).To(Succeed())

		raw := sc.MustAcquire(ctx, key, sc.LongTTL())
		Expect(raw.GetFencingToken()).To(BeNumerically(">", uint64(l2.FencingToken)), "raw holder after the SDK's")
		Expect(sc.Release(ctx, key, raw.GetOwnerToken())).To(BeTrue())

		l4 := c1.MustLock(ctx, key, sc.LongTTL())
		Expect(uint64(l4.FencingToken)).To(BeNumerically(">", raw.GetFencingToken()), "SDK holder after a raw one")
		Expect(c1.Unlock(ctx, l4.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("validates writes: a token below the watermark is stale_token, equal or above passes, all 64 bits exact", func(ctx SpecContext) {
		check := func(token, watermark uint64) error {
			return sc.Adapter.Call(ctx, sdkrunner.CmdValidateWrite, sdkrunner.ValidateWriteArgs{Token: sdkrunner.U64(token), Watermark: sdkrunner.U64(watermark)}, nil)
		}
		Expect(check(5, 5)).To(Succeed(), "the holder's own repeated write")
		Expect(check(6, 5)).To(Succeed(), "a newer holder")
		Expect(check(1, 0)).To(Succeed(), "a fresh resource")
		Expect(check(4, 5)).To(BeKind(sdkrunner.KindStaleToken))
		Expect(check(math.MaxUint64, math.MaxUint64-1)).To(Succeed(), "tokens beyond 2^53 must not be rounded")
		Expect(check(math.MaxUint64-1, math.MaxUint64)).To(BeKind(sdkrunner.KindStaleToken), "tokens beyond 2^53 must not be rounded")
		Expect(check(1<<53+1, 1<<53+2)).To(BeKind(sdkrunner.KindStaleToken), "tokens beyond 2^53 must not be rounded")
	}, SpecTimeout(30*time.Second))
})
