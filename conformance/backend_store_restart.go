package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 4 and durability across a restart of the store itself (not only of
// the plugin): the test restarts it through Config.RestartStore.
var _ = describeBackend("store restart", Label("fencing", "store-restart"), func(sc *BackendContext) {
	It("keeps fencing increasing, and a durable backend's held lock, through a restart of the store", Label("disruptive"), func(ctx SpecContext) {
		if sc.Config.RestartStore == nil {
			Skip("no Config.RestartStore (--restart-store): the suite cannot restart this backend's store")
		}
		held := sc.Key("store-restart-held")
		heldReq, heldRec := sc.MustAcquire(ctx, held, sc.LongTTL())
		key := sc.Key("store-restart-fencing")
		req, last := sc.MustAcquire(ctx, key, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())

		Expect(sc.Config.RestartStore(withPluginPID(ctx, sc.PluginPID()))).To(Succeed(), "Config.RestartStore")

		rec := awaitAcquireAfterRestart(ctx, sc, key)
		Expect(rec.FencingToken).To(BeNumerically(">", last.FencingToken),
			"fencing token went from %d before the store restart to %d after it", last.FencingToken, rec.FencingToken)
		if !sc.Info.Durable {
			return // the held lock may be gone: the backend says so
		}
		got, isHeld, err := sc.Backend.Get(ctx, held)
		Expect(err).NotTo(HaveOccurred())
		Expect(isHeld).To(BeTrue(), "the backend declares durable=true, yet a held lock is gone after the store restart")
		Expect(got.FencingToken).To(Equal(heldRec.FencingToken))
		ok, err = sc.Backend.Release(ctx, backend.ReleaseRequest{Key: held, OwnerToken: heldReq.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the owner token no longer holds after the store restart")
	}, SpecTimeout(2*time.Minute))
})
