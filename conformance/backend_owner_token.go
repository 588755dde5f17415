package conformance

import (
	"context"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 2: release and extend compare the owner token. A token whose lease
// ended (released by its owner, expired with nobody taking the key, taken
// over) or that never held (empty, another key's) answers false and changes
// nothing: it never deletes a lock, never renews one, never brings one back.
var _ = describeBackend("owner token", Label("owner-token"), func(sc *BackendContext) {
	// endedTokenChangesNothing tries Extend, then Release, with token on a
	// key that nobody holds any more, and checks both answer false and the
	// key stays free. Extend goes first: a backend that renews an ended
	// lease brings the lock back, and the Get after it sees that.
	endedTokenChangesNothing := func(ctx context.Context, key, token, how string) {
		GinkgoHelper()
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: token, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred(), "an extend with an ended lease's token is not an error")
		Expect(ext.Extended).To(BeFalse(), "Extend with the token of a lease that %s answered extended=true", how)
		got, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "Extend with the token of a lease that %s brought the lock back: %+v", how, got)
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: token, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred(), "a release with an ended lease's token is not an error")
		Expect(ok).To(BeFalse(), "Release with the token of a lease that %s answered released=true", how)
		_, held, err = sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "Release with the token of a lease that %s left the key held", how)
	}

	// holdsUnchanged checks that key is still held as rec (acquired with
	// LongTTL), unrenewed: the refused calls of the specs ask for TTL(), so a
	// backend that applied one shows a Remaining of at most TTL().
	holdsUnchanged := func(ctx context.Context, key string, rec backend.Record, what string) {
		GinkgoHelper()
		got, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "%s deleted the lock", what)
		Expect(got.FencingToken).To(Equal(rec.FencingToken), "%s: the lock changed hands", what)
		Expect(got.Remaining).To(BeNumerically(">", sc.TTL()), "%s renewed the lock (remaining %s, the call asked for %s)", what, got.Remaining, sc.TTL())
	}

	It("ignores a release with a token that never held the key", func(ctx SpecContext) {
		key := sc.Key("wrong-token")
		_, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: sc.Token(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "release with a wrong token reported success")
		holdsUnchanged(ctx, key, rec, "a release with a wrong token")
	}, SpecTimeout(30*time.Second))

	It("makes a stale holder's release after expiry and takeover a no-op, and the successor still holds", func(ctx SpecContext) {
		key := sc.Key("stale-release")
		stale, _ := sc.MustAcquire(ctx, key, sc.TTL())
		succ, rec, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+time.Second)
		Expect(err).NotTo(HaveOccurred(), "the first lease never expired")

		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: stale.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "the stale holder's release reported success")
		holdsUnchanged(ctx, key, rec, "the stale holder's release")

		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: stale.OwnerToken, TTL: sc.TTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse(), "the stale holder extended the successor's lock")
		holdsUnchanged(ctx, key, rec, "the stale holder's extend")

		ok, err = sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: succ.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the successor could not release its own lock")
	}, SpecTimeout(30*time.Second))

	It("answers false and changes nothing for the token of a lease its owner released", func(ctx SpecContext) {
		key := sc.Key("released-token")
		req, _ := sc.MustAcquire(ctx, key, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the holder could not release its lock")
		endedTokenChangesNothing(ctx, key, req.OwnerToken, "its owner released")
	}, SpecTimeout(30*time.Second))

	It("answers false and changes nothing for the token of a lease that expired with nobody taking the key", func(ctx SpecContext) {
		key := sc.Key("expired-token")
		req, _ := sc.MustAcquire(ctx, key, sc.TTL())
		answered := time.Now()
		// Promise 3 says the lease has ended by answered + FreeWithin. The
		// spec waits for that instant on the clock rather than asking the
		// backend: a Get would let a backend that expires lazily tidy the
		// lock away before the Extend that must not bring it back.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(answered.Add(sc.FreeWithin()))):
		}
		endedTokenChangesNothing(ctx, key, req.OwnerToken, "expired with nobody taking the key")
	}, SpecTimeout(30*time.Second))

	It("never matches an empty owner token", func(ctx SpecContext) {
		key := sc.Key("empty-token")
		_, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: "", Stamp: sc.Stamp()})
		if err == nil {
			Expect(ok).To(BeFalse(), "Release with an empty owner token answered released=true")
		} else {
			Expect(isInvalidArgument(err)).To(BeTrue(), "Release with an empty owner token: %v, want false or ErrInvalidArgument", err)
		}
		holdsUnchanged(ctx, key, rec, "a release with an empty owner token")
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: "", TTL: sc.TTL(), Stamp: sc.Stamp()})
		if err == nil {
			Expect(ext.Extended).To(BeFalse(), "Extend with an empty owner token answered extended=true")
		} else {
			Expect(isInvalidArgument(err)).To(BeTrue(), "Extend with an empty owner token: %v, want false or ErrInvalidArgument", err)
		}
		holdsUnchanged(ctx, key, rec, "an extend with an empty owner token")
	}, SpecTimeout(30*time.Second))

	It("refuses an Acquire with an empty owner token or an empty key with ErrInvalidArgument, and stores nothing", Label("bad-input"), func(ctx SpecContext) {
		// A lock stored under the empty token would be one the empty token
		// then releases; a lock under the empty key, one no key names.
		key := sc.Key("acquire-empty-token")
		_, err := sc.Backend.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "", TTL: sc.LongTTL(), Holder: "conformance", Stamp: sc.Stamp()})
		Expect(isInvalidArgument(err)).To(BeTrue(), "Acquire with an empty owner token: %v, want ErrInvalidArgument", err)
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a refused Acquire stored a lock")
		_, err = sc.Backend.Acquire(ctx, backend.AcquireRequest{Key: "", OwnerToken: sc.Token(), TTL: sc.LongTTL(), Holder: "conformance", Stamp: sc.Stamp()})
		Expect(isInvalidArgument(err)).To(BeTrue(), "Acquire with an empty key: %v, want ErrInvalidArgument", err)
	}, SpecTimeout(30*time.Second))

	It("never matches the owner token of another key", func(ctx SpecContext) {
		k1, k2 := sc.Key("token-of-a"), sc.Key("token-of-b")
		req1, r1 := sc.MustAcquire(ctx, k1, sc.LongTTL())
		req2, r2 := sc.MustAcquire(ctx, k2, sc.LongTTL())
		for _, c := range []struct {
			key, token string
			rec        backend.Record
		}{{k2, req1.OwnerToken, r2}, {k1, req2.OwnerToken, r1}} {
			ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: c.key, OwnerToken: c.token, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(ok).To(BeFalse(), "Release of %q with the owner token of another key answered released=true", c.key)
			ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: c.key, OwnerToken: c.token, TTL: sc.TTL(), Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(ext.Extended).To(BeFalse(), "Extend of %q with the owner token of another key answered extended=true", c.key)
			holdsUnchanged(ctx, c.key, c.rec, "a release and an extend with another key's owner token")
		}
	}, SpecTimeout(30*time.Second))

	It("extends only with the holding token", func(ctx SpecContext) {
		key := sc.Key("extend")
		req, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.TTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse(), "extend with a wrong token succeeded")
		holdsUnchanged(ctx, key, rec, "an extend with a wrong token")

		ext, err = sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue(), "extend with the holding token failed")
		Expect(ext.Record.FencingToken).To(Equal(rec.FencingToken), "extend must keep the fencing token")
		Expect(ext.Record.Stamp).To(Equal(rec.Stamp), "extend must keep the acquisition's stamp")
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
