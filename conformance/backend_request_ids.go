package conformance

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Request identities (Info.RequestIDs): the backend keeps a request's
// identity with the lock it changed and answers a repeat as the first
// attempt was answered; a repeat with other arguments is a conflict.
var _ = describeBackend("request ids", Label("request-ids"), func(sc *BackendContext) {
	BeforeEach(func() {
		if !sc.Info.RequestIDs {
			Skip("the backend declares request_ids=false: it keeps no request identities")
		}
	})

	It("answers a repeated Acquire with the lease it took, and refuses one with other arguments", func(ctx SpecContext) {
		key := sc.Key("repeat")
		ident := backend.Request{ID: sc.Token(), Fingerprint: "args"}
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Holder: "conformance", Stamp: sc.Stamp(),
			Request: ident, Replay: "sealed owner token"}
		first, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Acquired).To(BeTrue())
		Expect(first.Replayed).To(BeFalse(), "a first attempt answered as a replay")

		repeat := req
		repeat.OwnerToken, repeat.Stamp, repeat.Replay = sc.Token(), sc.Stamp(), "another"
		again, err := sc.Backend.Acquire(ctx, repeat)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Acquired).To(BeTrue(), "the repeat was not answered with the lease")
		Expect(again.Replayed).To(BeTrue(), "the repeat was not answered as a replay")
		Expect(again.Replay).To(Equal("sealed owner token"), "the replay is not what the first attempt stored")
		Expect(again.Record.FencingToken).To(Equal(first.Record.FencingToken))

		other := repeat
		other.Request.Fingerprint = "other args"
		_, err = sc.Backend.Acquire(ctx, other)
		Expect(err).To(MatchError(backend.ErrRequestConflict), "a repeat with another fingerprint")

		// The first attempt's token still holds: the repeat changed nothing.
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: repeat.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "the repeat's own token took the lease over")
		ok, err = sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("answers a repeat through another plugin instance of a shared backend", func(ctx SpecContext) {
		if !sc.Info.Shared {
			Skip("the backend declares shared=false")
		}
		other, err := sc.StartPlugin(ctx)
		Expect(err).NotTo(HaveOccurred())
		defer other.Close()
		key := sc.Key("repeat-shared")
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp(),
			Request: backend.Request{ID: sc.Token(), Fingerprint: "f"}, Replay: "r"}
		first, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Acquired).To(BeTrue())
		req.OwnerToken = sc.Token()
		again, err := other.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Replayed).To(BeTrue())
		Expect(again.Record.FencingToken).To(Equal(first.Record.FencingToken))
	}, SpecTimeout(time.Minute))

	It("keeps the Acquire's identity through an Extend without one, and takes no free key on ReplayOnly", func(ctx SpecContext) {
		key := sc.Key("replay-only")
		ident := backend.Request{ID: sc.Token(), Fingerprint: "f"}
		res, err := sc.Backend.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp(),
			Request: ident, ReplayOnly: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeFalse(), "ReplayOnly took a free key")
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse())

		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp(), Request: ident, Replay: "r"}
		first, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Acquired).To(BeTrue())
		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue())
		again, err := sc.Backend.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp(),
			Request: ident, ReplayOnly: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Replayed).To(BeTrue(), "a plain Extend lost the Acquire's identity")
	}, SpecTimeout(30*time.Second))

	It("answers a repeated Release true, also after the key changed hands, and refuses one with other arguments", func(ctx SpecContext) {
		key := sc.Key("release-repeat")
		req, _ := sc.MustAcquire(ctx, key, sc.LongTTL())
		rel := backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp(), Request: backend.Request{ID: sc.Token(), Fingerprint: "f"}}
		ok, err := sc.Backend.Release(ctx, rel)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		ok, err = sc.Backend.Release(ctx, rel)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "a repeated release was not answered true")
		sc.MustAcquire(ctx, key, sc.LongTTL()) // someone else's now
		ok, err = sc.Backend.Release(ctx, rel)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "a repeated release after the key changed hands")
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "the repeat released the successor's lock")
		other := rel
		other.Request.Fingerprint = "other"
		_, err = sc.Backend.Release(ctx, other)
		Expect(err).To(MatchError(backend.ErrRequestConflict))
		plain := rel
		plain.Request = backend.Request{}
		ok, err = sc.Backend.Release(ctx, plain)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "a release without the identity matched the kept one")
	}, SpecTimeout(30*time.Second))

	It("renews on a repeated Extend and refuses one with other arguments", func(ctx SpecContext) {
		key := sc.Key("extend-repeat")
		req, _ := sc.MustAcquire(ctx, key, sc.LongTTL())
		ext := backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp(), Request: backend.Request{ID: sc.Token(), Fingerprint: "f"}}
		for range 2 {
			res, err := sc.Backend.Extend(ctx, ext)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Extended).To(BeTrue())
		}
		other := ext
		other.Request.Fingerprint = "other"
		_, err := sc.Backend.Extend(ctx, other)
		Expect(err).To(MatchError(backend.ErrRequestConflict))
	}, SpecTimeout(30*time.Second))

	It("gives back an abandoned lock unless a replay of its Acquire was answered", func(ctx SpecContext) {
		key := sc.Key("abandon")
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp(),
			Request: backend.Request{ID: sc.Token(), Fingerprint: "f"}, Replay: "r"}
		res, err := sc.Backend.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		repeat := req
		repeat.OwnerToken = sc.Token()
		again, err := sc.Backend.Acquire(ctx, repeat)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Replayed).To(BeTrue())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp(), Abandon: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "an abandon released a lock whose replay was answered")
		_, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue())

		key2 := sc.Key("abandon-unclaimed")
		req2, _ := sc.MustAcquire(ctx, key2, sc.LongTTL())
		ok, err = sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key2, OwnerToken: req2.OwnerToken, Stamp: sc.Stamp(), Abandon: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "an abandon did not release an unclaimed lock")
	}, SpecTimeout(30*time.Second))

	It("answers repeats of a set", func(ctx SpecContext) {
		if sc.Info.MaxKeys < 2 {
			Skip("the backend declares max_keys 1")
		}
		sets := sc.Backend.(backend.SetBackend)
		req := sc.SetRequest(sc.LongTTL(), sc.Key("a"), sc.Key("b"))
		req.Request, req.Replay = backend.Request{ID: sc.Token(), Fingerprint: "f"}, "r"
		first, err := sets.AcquireSet(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Acquired).To(BeTrue())
		repeat := req
		repeat.OwnerToken = sc.Token()
		again, err := sets.AcquireSet(ctx, repeat)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Replayed).To(BeTrue())
		Expect(again.Replay).To(Equal("r"))
		Expect(again.Records).To(HaveLen(2))
		Expect(again.Records[1].FencingToken).To(Equal(first.Records[1].FencingToken))
		rel := backend.ReleaseSetRequest{Keys: claimKeys(req), OwnerToken: req.OwnerToken, Stamp: sc.Stamp(), Request: backend.Request{ID: sc.Token(), Fingerprint: "g"}}
		for range 2 {
			ok, err := sets.ReleaseSet(ctx, rel)
			Expect(err).NotTo(HaveOccurred())
			Expect(ok).To(BeTrue())
		}
	}, SpecTimeout(30*time.Second))
})
