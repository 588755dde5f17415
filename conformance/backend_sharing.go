package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 8, the backend's part: a backend that says shared=true is one lock
// space for every plugin instance started with the same options.
var _ = describeBackend("sharing", Label("sharing"), func(sc *BackendContext) {
	It("shows a lock taken through one plugin instance to another, and lets one of N racers across both win", func(ctx SpecContext) {
		if sc.Config.SingleInstance {
			Skip("Config.SingleInstance: the store allows one plugin instance at a time (the spec 'refuses a second plugin instance' checks that)")
		}
		if !sc.Info.Shared {
			Skip("the backend declares shared=false: each plugin instance is its own lock space")
		}
		other, err := sc.StartPlugin(ctx)
		Expect(err).NotTo(HaveOccurred(), "starting a second plugin instance")
		defer other.Close()

		key := sc.Key("shared")
		_, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		got, held, err := other.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "the second instance does not see the lock")
		Expect(got.FencingToken).To(Equal(rec.FencingToken))

		key = sc.Key("shared-race")
		results := make(chan int, 2)
		for _, b := range []backend.Backend{sc.Backend, other} {
			go func() {
				defer GinkgoRecover()
				results <- len(race(ctx, b, sc, key, sc.Config.Racers/2, sc.LongTTL()))
			}()
		}
		total := 0
		for range 2 {
			var n int
			Eventually(results).WithTimeout(30 * time.Second).Should(Receive(&n))
			total += n
		}
		Expect(total).To(Equal(1), "%d racers over two plugin instances of a shared backend: %d winners", sc.Config.Racers, total)
	}, SpecTimeout(time.Minute))

	It("refuses a second plugin instance on a single-instance store while the first runs, and the first keeps its locks", func(ctx SpecContext) {
		if !sc.Config.SingleInstance {
			Skip("no Config.SingleInstance (--single-instance): the store allows several owners")
		}
		key := sc.Key("single-instance")
		req, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		other, err := sc.StartPlugin(ctx)
		if err == nil {
			defer other.Close()
		}
		Expect(err).To(HaveOccurred(), "a second plugin instance started on a store that allows one owner")
		AddReportEntry("why the second instance did not start", err.Error(), ReportEntryVisibilityFailureOrVerbose)
		got, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred(), "the first instance after a second one was refused")
		Expect(held).To(BeTrue(), "the lock is gone after a second instance was refused")
		Expect(got.FencingToken).To(Equal(rec.FencingToken))
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the owner token no longer holds after a second instance was refused")
	}, SpecTimeout(time.Minute))
})
