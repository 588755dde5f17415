package conformance

import (
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The SDK speaks every wire protocol it claims; the server serves all three
// on one port.
var _ = describeSDK("protocols", Label("protocols"), func(sc *SDKContext) {
	for _, p := range []struct{ name, capability string }{
		{"connect", sdkrunner.CapProtocolConnect},
		{"grpc", sdkrunner.CapProtocolGRPC},
		{"grpc-web", sdkrunner.CapProtocolGRPCWeb},
	} {
		It("locks, inspects and unlocks over "+p.name, func(ctx SpecContext) {
			if !sc.Adapter.Has(p.capability) {
				Skip("the adapter does not claim " + p.capability)
			}
			c := sc.Connect(ctx, sc.Adapter, sc.URL, p.name)
			key := sc.Key("sdk-" + p.name)
			l := c.MustLock(ctx, key, sc.LongTTL())
			got := c.Inspect(ctx, key)
			Expect(got.Held).To(BeTrue())
			Expect(got.State).NotTo(BeNil())
			Expect(got.State.FencingToken).To(Equal(l.FencingToken))
			Expect(got.State.Holder).To(Equal("conformance-sdk"), "the holder label given to lock")
			Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
			Expect(c.Inspect(ctx, key).Held).To(BeFalse())
		}, SpecTimeout(30*time.Second))
	}
})
