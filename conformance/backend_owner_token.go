package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 2: release and extend compare the owner token.
var _ = describeBackend("owner token", Label("owner-token"), func(sc *BackendContext) {
	It("ignores a release with a token that never held the key", func(ctx SpecContext) {
		key := sc.Key("wrong-token")
		_, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: sc.Token(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "release with a wrong token reported success")
		got, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "release with a wrong token deleted the lock")
		Expect(got.FencingToken).To(Equal(rec.FencingToken))
	}, SpecTimeout(30*time.Second))

	It("makes a stale holder's release after expiry and takeover a no-op, and the successor still holds", func(ctx SpecContext) {
		key := sc.Key("stale-release")
		stale, _ := sc.MustAcquire(ctx, key, sc.TTL())
		succ, rec, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+time.Second)
		Expect(err).NotTo(HaveOccurred(), "the first lease never expired")

		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: stale.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "the stale holder's release reported success")
		got, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "the stale holder's release deleted the successor's lock")
		Expect(got.FencingToken).To(Equal(rec.FencingToken), "the lock changed hands")

		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: stale.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse(), "the stale holder extended the successor's lock")

		ok, err = sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: succ.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the successor could not release its own lock")
	}, SpecTimeout(30*time.Second))

	It("extends only with the holding token", func(ctx SpecContext) {
		key := sc.Key("extend")
		req, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse(), "extend with a wrong token succeeded")

		ext, err = sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue(), "extend with the holding token failed")
		Expect(ext.Record.FencingToken).To(Equal(rec.FencingToken), "extend must keep the fencing token")
	}, SpecTimeout(30*time.Second))

	It("answers false for a release or extend of a key nobody holds", func(ctx SpecContext) {
		key := sc.Key("never-held")
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: sc.Token(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse())
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse())
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a failed extend created a lock")
	}, SpecTimeout(30*time.Second))
})
