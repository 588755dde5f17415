package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 6, the backend's part: it keeps each key's last stamp and stores
// NextStamp(last, proposed) on Acquire.
var _ = describeBackend("stamps", Label("stamps"), func(sc *BackendContext) {
	acquireWith := func(ctx SpecContext, key string, ttl time.Duration, stamp hlc.Timestamp) (backend.AcquireRequest, backend.Record) {
		GinkgoHelper()
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "stamps", Stamp: stamp}
		res, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue(), "Acquire of free key %q", key)
		return req, res.Record
	}
	release := func(ctx SpecContext, req backend.AcquireRequest, stamp hlc.Timestamp) {
		GinkgoHelper()
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: req.Key, OwnerToken: req.OwnerToken, Stamp: stamp})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
	}

	// A key's last stamp may be forgotten on release or expiry only by a
	// backend whose keys one engine stamps for as long as they exist
	// (shared=false and durable=false, as plugins/memory): that engine's
	// clock has already merged every stamp the backend stored, so its next
	// proposal is later anyway, and the stamps go with the plugin. A shared
	// backend's next proposal may come from a server whose clock is behind;
	// a durable backend's, from a server started after a restart, whose clock
	// has not seen the stamps stored before it.
	requireChain := func() {
		if !sc.Info.Shared && !sc.Info.Durable {
			Skip("the backend declares shared=false and durable=false: one engine stamps its keys for as long as they exist and its clock is already past every stamp the backend stored, so a released key's stamp may be forgotten")
		}
	}

	It("stores at least the proposed stamp", func(ctx SpecContext) {
		key := sc.Key("stamp-proposed")
		// Ahead of every clock on this machine: a backend that stores a
		// stamp of its own instead of the proposal is caught.
		p := sc.Stamp()
		p = hlc.Timestamp{WallTime: p.WallTime + int64(time.Second), Logical: 3}
		_, rec := acquireWith(ctx, key, sc.LongTTL(), p)
		Expect(rec.Stamp.Compare(p)).To(BeNumerically(">=", 0), "stored %s < proposed %s", rec.Stamp, p)
		got, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue())
		Expect(got.Stamp).To(Equal(rec.Stamp), "Get must report the stored stamp")
	}, SpecTimeout(30*time.Second))

	It("stores a stamp after the previous holder's even when the proposed stamp is older", func(ctx SpecContext) {
		requireChain()
		key := sc.Key("stamp-chain")
		old := sc.Stamp()
		newer := hlc.Timestamp{WallTime: old.WallTime + int64(time.Second)}
		req1, r1 := acquireWith(ctx, key, sc.LongTTL(), newer)
		release(ctx, req1, sc.Stamp())

		// A server whose clock is behind proposes an older stamp.
		_, r2 := acquireWith(ctx, key, sc.TTL(), old)
		Expect(r2.Stamp.After(r1.Stamp)).To(BeTrue(), "after release: stored %s, previous holder's %s", r2.Stamp, r1.Stamp)
		Expect(r2.Stamp.Compare(old)).To(BeNumerically(">=", 0), "stored %s < proposed %s", r2.Stamp, old)

		// The chain holds through expiry and takeover too.
		req := backend.AcquireRequest{Key: key, TTL: sc.LongTTL(), Holder: "stamps", Stamp: old}
		var r3 backend.Record
		Eventually(ctx, func() bool {
			req.OwnerToken = sc.Token()
			res, err := sc.Backend.Acquire(ctx, req)
			Expect(err).NotTo(HaveOccurred())
			r3 = res.Record
			return res.Acquired
		}).WithTimeout(sc.FreeWithin() + 2*time.Second).WithPolling(5 * time.Millisecond).Should(BeTrue())
		Expect(r3.Stamp.After(r2.Stamp)).To(BeTrue(), "after expiry: stored %s, previous holder's %s", r3.Stamp, r2.Stamp)
	}, SpecTimeout(30*time.Second))

	It("keeps a later release stamp as the key's last stamp", func(ctx SpecContext) {
		requireChain()
		key := sc.Key("stamp-release")
		p := sc.Stamp()
		req1, _ := acquireWith(ctx, key, sc.LongTTL(), p)
		rel := hlc.Timestamp{WallTime: p.WallTime + int64(time.Second)}
		release(ctx, req1, rel)
		_, r2 := acquireWith(ctx, key, sc.LongTTL(), sc.Stamp())
		Expect(r2.Stamp.After(rel)).To(BeTrue(), "stored %s, release stamp %s", r2.Stamp, rel)
	}, SpecTimeout(30*time.Second))
})
