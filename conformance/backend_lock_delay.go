package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Lock-delay (Info.MaxLockDelay > 0): after a lock taken with a lock-delay
// expires (not when it is released), its key refuses holders until the
// delay has passed, by the store's clock, and says for how long.
var _ = describeBackend("lock-delay", Label("lock-delay"), func(sc *BackendContext) {
	BeforeEach(func() {
		if sc.Info.MaxLockDelay <= 0 {
			Skip("the backend declares max_lock_delay 0: it keeps no lock-delays")
		}
	})
	delay := func() time.Duration {
		return min(sc.Info.MaxLockDelay, max(time.Second, 2*sc.Info.TTLGranularity))
	}

	It("refuses the key for the delay after an expiry, and reports it", func(ctx SpecContext) {
		key := sc.Key("delay")
		d := delay()
		sent := time.Now()
		res, err := sc.Backend.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.TTL(), Stamp: sc.Stamp(), LockDelay: d})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		Expect(res.Record.LockDelay).To(Equal(d), "the record does not carry its lock-delay")
		// Wait for the expiry by the backend's own account.
		var rec backend.Record
		Eventually(ctx, func() bool {
			var held bool
			rec, held, err = sc.Backend.Get(ctx, key)
			Expect(err).NotTo(HaveOccurred())
			return held
		}).WithTimeout(sc.FreeWithin()).WithPolling(5 * time.Millisecond).Should(BeFalse())
		Expect(rec.DelayRemaining).To(BeNumerically(">", 0), "Get does not report the lock-delay after the expiry")
		Expect(rec.Key).To(Equal(key))
		try, err := sc.Backend.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(try.Acquired).To(BeFalse(), "the key was taken during its lock-delay")
		Expect(try.Record.DelayRemaining).To(BeNumerically(">", 0), "the refusal does not say the key is in its lock-delay")
		_, _, freeAt, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+d+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		// The lease lasted at least its TTL from sent, the delay follows.
		Expect(freeAt.Sub(sent)).To(BeNumerically(">=", sc.TTL()+d), "taken %s after the acquire: before TTL %s + delay %s",
			freeAt.Sub(sent), sc.TTL(), d)
		Expect(freeAt.Sub(sent)).To(BeNumerically("<=", sc.FreeWithin()+d+sc.Info.TTLGranularity+time.Second),
			"still refused %s after the acquire", freeAt.Sub(sent))
	}, SpecTimeout(time.Minute))

	It("leaves no delay after a release, and keeps it through an extend", func(ctx SpecContext) {
		key := sc.Key("no-delay")
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp(), LockDelay: delay()}
		res, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Record.LockDelay).To(Equal(delay()), "an extend dropped the lock-delay")
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		rec, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse())
		Expect(rec.DelayRemaining).To(BeZero(), "a released key reports a lock-delay")
		sc.MustAcquire(ctx, key, sc.LongTTL())
	}, SpecTimeout(30*time.Second))

	It("refuses a set while one of its keys is in its lock-delay", func(ctx SpecContext) {
		if sc.Info.MaxKeys < 2 {
			Skip("the backend declares max_keys 1")
		}
		sets := sc.Backend.(backend.SetBackend)
		a, b := sc.Key("a"), sc.Key("b")
		req := sc.SetRequest(sc.TTL(), a, b)
		req.LockDelay = delay()
		res, err := sets.AcquireSet(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		Eventually(ctx, func() bool {
			_, held, err := sc.Backend.Get(ctx, a)
			Expect(err).NotTo(HaveOccurred())
			return held
		}).WithTimeout(sc.FreeWithin()).WithPolling(5 * time.Millisecond).Should(BeFalse())
		c := sc.Key("c")
		try, err := sets.AcquireSet(ctx, sc.SetRequest(sc.LongTTL(), b, c))
		Expect(err).NotTo(HaveOccurred())
		Expect(try.Acquired).To(BeFalse(), "a set was taken while one of its keys was in its lock-delay")
		Expect(try.Blocker.DelayRemaining).To(BeNumerically(">", 0))
		_, held, err := sc.Backend.Get(ctx, c)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse())
	}, SpecTimeout(time.Minute))
})
