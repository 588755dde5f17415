package conformance

import (
	"errors"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 3: the backend is the authority on expiry.
var _ = describeBackend("TTL", Label("ttl"), func(sc *BackendContext) {
	It("holds a lock for at least its TTL and frees it within TTL + granularity + slack", func(ctx SpecContext) {
		key := sc.Key("ttl")
		ttl := sc.TTL()
		sent := time.Now()
		_, first := sc.MustAcquire(ctx, key, ttl)
		answered := time.Now()

		_, rec, freeAt, lastRefusedSent, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("acquired with TTL "+ttl.String()+", taken over after", freeAt.Sub(sent).String(), ReportEntryVisibilityFailureOrVerbose)
		// The lease began after we sent the Acquire, so nobody may win before
		// sent+ttl.
		Expect(freeAt.Sub(sent)).To(BeNumerically(">=", ttl),
			"the lock was taken over %s after it was acquired with TTL %s", freeAt.Sub(sent), ttl)
		// The lease began before the answer came, so every attempt sent after
		// answered+TTL+granularity+slack must win.
		if !lastRefusedSent.IsZero() {
			Expect(lastRefusedSent.Sub(answered)).To(BeNumerically("<=", sc.FreeWithin()),
				"the lock was still held %s after acquisition (TTL %s, granularity %s, slack %s)",
				lastRefusedSent.Sub(answered), ttl, sc.Info.TTLGranularity, sc.Config.Slack)
		}
		Expect(rec.FencingToken).To(BeNumerically(">", first.FencingToken))
	}, SpecTimeout(30*time.Second))

	It("renews a lease for its TTL counted from the extend", func(ctx SpecContext) {
		key := sc.Key("extend-ttl")
		ttl := sc.TTL()
		req, _ := sc.MustAcquire(ctx, key, ttl)
		// Extend late in the first lease, so that the renewed lease must
		// outlast the first one.
		select {
		case <-ctx.Done():
			return
		case <-time.After(ttl / 2):
		}
		extSent := time.Now()
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: ttl, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue())
		Expect(ext.Record.Remaining).To(And(BeNumerically(">", 0), BeNumerically("<=", ttl)),
			"Remaining after an extend by %s", ttl)
		_, _, freeAt, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(freeAt.Sub(extSent)).To(BeNumerically(">=", ttl),
			"the renewed lease ended %s after the extend, before its TTL %s", freeAt.Sub(extSent), ttl)
	}, SpecTimeout(30*time.Second))

	It("refuses a TTL below the backend's minimum with ErrInvalidArgument and changes nothing", func(ctx SpecContext) {
		if sc.Info.MinTTL <= 0 {
			Skip("the backend declares no minimum TTL (Info.MinTTL = 0)")
		}
		key := sc.Key("min-ttl")
		_, _, err := sc.Acquire(ctx, key, sc.Info.MinTTL/2)
		Expect(errors.Is(err, backend.ErrInvalidArgument)).To(BeTrue(),
			"Acquire with TTL %s below min %s: got %v, want ErrInvalidArgument", sc.Info.MinTTL/2, sc.Info.MinTTL, err)
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a refused Acquire stored a lock")
	}, SpecTimeout(30*time.Second))

	It("refuses a TTL above the backend's maximum with ErrInvalidArgument and changes nothing", func(ctx SpecContext) {
		if sc.Info.MaxTTL <= 0 {
			Skip("the backend declares no maximum TTL (Info.MaxTTL = 0)")
		}
		key := sc.Key("max-ttl")
		_, _, err := sc.Acquire(ctx, key, sc.Info.MaxTTL+time.Second)
		Expect(errors.Is(err, backend.ErrInvalidArgument)).To(BeTrue(),
			"Acquire with TTL %s above max %s: got %v, want ErrInvalidArgument", sc.Info.MaxTTL+time.Second, sc.Info.MaxTTL, err)
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a refused Acquire stored a lock")
	}, SpecTimeout(30*time.Second))

	It("accepts a TTL of exactly the backend's minimum or maximum: the bounds are inclusive", func(ctx SpecContext) {
		if sc.Info.MinTTL <= 0 && sc.Info.MaxTTL <= 0 {
			Skip("the backend declares no TTL bounds (Info.MinTTL = Info.MaxTTL = 0)")
		}
		for _, ttl := range []time.Duration{sc.Info.MinTTL, sc.Info.MaxTTL} {
			if ttl <= 0 {
				continue
			}
			key := sc.Key("ttl-bound")
			req, res, err := sc.Acquire(ctx, key, ttl)
			Expect(err).NotTo(HaveOccurred(), "Acquire with TTL %s, a bound the backend declares", ttl)
			Expect(res.Acquired).To(BeTrue(), "Acquire of a free key with TTL %s", ttl)
			ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: ttl, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred(), "Extend with TTL %s, a bound the backend declares", ttl)
			if ttl == sc.Info.MaxTTL {
				// (a lease of the minimum may be over already: then
				// extended=false is the right answer)
				Expect(ext.Extended).To(BeTrue(), "Extend by the holder with TTL %s", ttl)
			}
			_, err = sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
		}
	}, SpecTimeout(30*time.Second))
})
