package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = describeBackend("get", Label("get"), func(sc *BackendContext) {
	It("reports a held lock without its owner token, and nothing once released", func(ctx SpecContext) {
		key := sc.Key("get")
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a key nobody acquired is held")

		ttl := sc.LongTTL()
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "host-1/pid-42", Stamp: sc.Stamp()}
		res, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())

		rec, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue())
		Expect(rec.Key).To(Equal(key))
		Expect(rec.Holder).To(Equal("host-1/pid-42"))
		Expect(rec.FencingToken).To(Equal(res.Record.FencingToken))
		Expect(rec.Stamp).To(Equal(res.Record.Stamp))
		Expect(rec.Remaining).To(And(BeNumerically(">", 0), BeNumerically("<=", ttl)))
		Expect(rec.ExpiresAt).To(BeTemporally("~", time.Now().Add(rec.Remaining), 5*time.Second))

		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		_, held, err = sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a released key is still held")
	}, SpecTimeout(30*time.Second))
})
