package conformance

import (
	"context"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 1: store-only-if-absent-or-expired is one atomic step.
var _ = describeBackend("atomic acquire", Label("atomic-acquire"), func(sc *BackendContext) {
	It("lets exactly one of N racing acquirers win a free key", func(ctx SpecContext) {
		for round := range 3 {
			key := sc.Key("race")
			wins := race(ctx, sc.Backend, sc, key, sc.Config.Racers, sc.LongTTL())
			Expect(wins).To(HaveLen(1), "round %d: %d racers on free key %q, winners %v", round, sc.Config.Racers, key, wins)
		}
	}, SpecTimeout(time.Minute))

	It("lets exactly one of N racing acquirers take over an expired key", func(ctx SpecContext) {
		key := sc.Key("race-expired")
		sc.MustAcquire(ctx, key, sc.TTL())
		// Wait until the lease is over by the backend's own account.
		Eventually(ctx, func() bool {
			_, held, err := sc.Backend.Get(ctx, key)
			Expect(err).NotTo(HaveOccurred())
			return held
		}).WithTimeout(sc.FreeWithin()).WithPolling(5 * time.Millisecond).Should(BeFalse())
		wins := race(ctx, sc.Backend, sc, key, sc.Config.Racers, sc.LongTTL())
		Expect(wins).To(HaveLen(1), "%d racers on expired key %q", sc.Config.Racers, key)
	}, SpecTimeout(time.Minute))
})

// race runs n concurrent Acquires of key, released together, and returns the
// tokens that won. Losers must be shown the winner.
func race(ctx context.Context, b backend.Backend, sc *BackendContext, key string, n int, ttl time.Duration) []string {
	GinkgoHelper()
	type outcome struct {
		req backend.AcquireRequest
		res backend.AcquireResult
		err error
	}
	start := make(chan struct{})
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "racer", Stamp: sc.Stamp()}
		wg.Go(func() {
			<-start
			res, err := b.Acquire(ctx, req)
			out[i] = outcome{req, res, err}
		})
	}
	close(start)
	wg.Wait()
	var winners []string
	var winner backend.Record
	for _, o := range out {
		Expect(o.err).NotTo(HaveOccurred(), "Acquire %q", key)
		if o.res.Acquired {
			winners = append(winners, o.req.OwnerToken)
			winner = o.res.Record
		}
	}
	if len(winners) == 1 {
		for _, o := range out {
			if !o.res.Acquired {
				Expect(o.res.Record.FencingToken).To(Equal(winner.FencingToken),
					"a loser must be shown the winning lock (fencing token)")
			}
		}
	}
	return winners
}
