package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Batches (backend.BatchBackend, optional): every item of a batch is decided
// on its own, as its single call would be, and keeps promises 1 to 4 and
// the watch's events. A backend that does not batch skips these specs.
var _ = describeBackend("batch", Label("batch"), func(sc *BackendContext) {
	batcher := func() backend.BatchBackend {
		GinkgoHelper()
		bb, ok := sc.Backend.(backend.BatchBackend)
		if !ok {
			Skip("the plugin host does not offer the batch calls")
		}
		return bb
	}
	// skipUnsupported ends the spec as not applicable when the backend
	// does not serve batches.
	skipUnsupported := func(err error) {
		GinkgoHelper()
		if errors.Is(err, errors.ErrUnsupported) {
			Skip("the backend does not batch (Info.batch is false): it gets single calls")
		}
	}
	acquireReq := func(key string, ttl time.Duration) backend.AcquireRequest {
		return backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "conformance-batch", Stamp: sc.Stamp()}
	}
	get := func(ctx context.Context, key string) (backend.Record, bool) {
		GinkgoHelper()
		rec, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred(), "Get %q", key)
		return rec, held
	}

	It("decides each item of an AcquireBatch on its own: a free key is taken, a held key reports its holder, a TTL out of range is that item's error", func(ctx SpecContext) {
		bb := batcher()
		free, busy, bad := sc.Key("batch-acq-free"), sc.Key("batch-acq-busy"), sc.Key("batch-acq-bad")
		_, holder := sc.MustAcquire(ctx, busy, sc.LongTTL())
		reqs := []backend.AcquireRequest{acquireReq(free, sc.LongTTL()), acquireReq(busy, sc.LongTTL()), acquireReq(bad, sc.Info.MinTTL/2)}
		if sc.Info.MinTTL <= 0 {
			reqs[2].TTL = -time.Second
		}
		outs, err := bb.AcquireBatch(ctx, reqs)
		skipUnsupported(err)
		Expect(err).NotTo(HaveOccurred())
		Expect(outs).To(HaveLen(3), "one outcome per request")

		Expect(outs[0].Err).NotTo(HaveOccurred(), "the free key")
		Expect(outs[0].Value.Acquired).To(BeTrue(), "the free key was not acquired")
		Expect(outs[0].Value.Record.Key).To(Equal(free))
		Expect(outs[0].Value.Record.Holder).To(Equal("conformance-batch"))
		rec, held := get(ctx, free)
		Expect(held).To(BeTrue())
		Expect(rec.FencingToken).To(Equal(outs[0].Value.Record.FencingToken))

		Expect(outs[1].Err).NotTo(HaveOccurred(), "the held key")
		Expect(outs[1].Value.Acquired).To(BeFalse(), "a held key was acquired again")
		Expect(outs[1].Value.Record.FencingToken).To(Equal(holder.FencingToken), "the held key's answer must name its holder")
		rec, _ = get(ctx, busy)
		Expect(rec.FencingToken).To(Equal(holder.FencingToken), "the holder of the held key changed")

		Expect(outs[2].Err).To(MatchError(backend.ErrInvalidArgument), "an item with a TTL of %s (below the minimum %s)", reqs[2].TTL, sc.Info.MinTTL)
		_, held = get(ctx, bad)
		Expect(held).To(BeFalse(), "an item refused as invalid was stored")
	}, SpecTimeout(30*time.Second))

	It("decides each item of a ReleaseBatch and an ExtendBatch on its own, comparing each one's owner token", func(ctx SpecContext) {
		bb := batcher()
		mine, theirs, nobody := sc.Key("batch-rel-mine"), sc.Key("batch-rel-theirs"), sc.Key("batch-rel-nobody")
		m, mrec := sc.MustAcquire(ctx, mine, sc.TTL())
		_, trec := sc.MustAcquire(ctx, theirs, sc.LongTTL())

		// Extend: the holding token renews (for longer than the lease had
		// left), a wrong token and a key nobody holds answer false.
		exts, err := bb.ExtendBatch(ctx, []backend.ExtendRequest{
			{Key: mine, OwnerToken: m.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()},
			{Key: theirs, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp()},
			{Key: nobody, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Stamp: sc.Stamp()},
		})
		skipUnsupported(err)
		Expect(err).NotTo(HaveOccurred())
		Expect(exts).To(HaveLen(3))
		for i, o := range exts {
			Expect(o.Err).NotTo(HaveOccurred(), "ExtendBatch item %d", i)
		}
		Expect(exts[0].Value.Extended).To(BeTrue(), "the holding token's extend")
		Expect(exts[0].Value.Record.FencingToken).To(Equal(mrec.FencingToken), "an extend keeps the fencing token")
		Expect(exts[1].Value.Extended).To(BeFalse(), "a wrong token extended someone else's lock")
		Expect(exts[2].Value.Extended).To(BeFalse(), "an extend of a key nobody holds")
		_, held := get(ctx, nobody)
		Expect(held).To(BeFalse(), "an extend created a lock")
		// The renewal took: the short lease outlives its first TTL.
		time.Sleep(sc.FreeWithin())
		rec, held := get(ctx, mine)
		Expect(held).To(BeTrue(), "a lease renewed in a batch for %s expired at its first TTL %s", sc.LongTTL(), sc.TTL())
		Expect(rec.FencingToken).To(Equal(mrec.FencingToken))

		rels, err := bb.ReleaseBatch(ctx, []backend.ReleaseRequest{
			{Key: mine, OwnerToken: m.OwnerToken, Stamp: sc.Stamp()},
			{Key: theirs, OwnerToken: sc.Token(), Stamp: sc.Stamp()},
			{Key: nobody, OwnerToken: sc.Token(), Stamp: sc.Stamp()},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(rels).To(HaveLen(3))
		for i, o := range rels {
			Expect(o.Err).NotTo(HaveOccurred(), "ReleaseBatch item %d", i)
		}
		Expect(rels[0].Value).To(BeTrue(), "the holding token's release")
		Expect(rels[1].Value).To(BeFalse(), "a wrong token released someone else's lock")
		Expect(rels[2].Value).To(BeFalse(), "a release of a key nobody holds")
		_, held = get(ctx, mine)
		Expect(held).To(BeFalse(), "released in a batch, still held")
		rec, held = get(ctx, theirs)
		Expect(held).To(BeTrue(), "a wrong token's release deleted the lock")
		Expect(rec.FencingToken).To(Equal(trec.FencingToken))

		// An ended lease is never resurrected, in a batch either.
		exts, err = bb.ExtendBatch(ctx, []backend.ExtendRequest{{Key: mine, OwnerToken: m.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()}})
		Expect(err).NotTo(HaveOccurred())
		Expect(exts[0].Value.Extended).To(BeFalse(), "a released lease was extended")
		_, held = get(ctx, mine)
		Expect(held).To(BeFalse())
	}, SpecTimeout(time.Minute))

	It("lets exactly one of racing batches take a key they all ask for", func(ctx SpecContext) {
		bb := batcher()
		shared := sc.Key("batch-race")
		const racers = 8
		var wg sync.WaitGroup
		outs := make([][]backend.Outcome[backend.AcquireResult], racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				defer GinkgoRecover()
				<-start
				outs[i], errs[i] = bb.AcquireBatch(ctx, []backend.AcquireRequest{
					acquireReq(sc.Key(fmt.Sprintf("batch-race-own-%d", i)), sc.LongTTL()),
					acquireReq(shared, sc.LongTTL()),
				})
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range racers {
			skipUnsupported(errs[i])
			Expect(errs[i]).NotTo(HaveOccurred(), "racer %d", i)
			Expect(outs[i]).To(HaveLen(2))
			Expect(outs[i][0].Err).NotTo(HaveOccurred())
			Expect(outs[i][0].Value.Acquired).To(BeTrue(), "racer %d's own key", i)
			Expect(outs[i][1].Err).NotTo(HaveOccurred())
			if outs[i][1].Value.Acquired {
				winners++
			}
		}
		Expect(winners).To(Equal(1), "racing batches that took the shared key")
	}, SpecTimeout(time.Minute))

	It("gives every acquisition in batches a larger fencing token and a later stamp than the key's holder before", func(ctx SpecContext) {
		bb := batcher()
		keys := []string{sc.Key("batch-fence-a"), sc.Key("batch-fence-b")}
		var lastFence [2]uint64
		var lastStamp [2]backend.Record
		for round := range 3 {
			reqs := []backend.AcquireRequest{acquireReq(keys[0], sc.LongTTL()), acquireReq(keys[1], sc.LongTTL())}
			outs, err := bb.AcquireBatch(ctx, reqs)
			skipUnsupported(err)
			Expect(err).NotTo(HaveOccurred())
			rels := make([]backend.ReleaseRequest, 2)
			for i, o := range outs {
				Expect(o.Err).NotTo(HaveOccurred())
				Expect(o.Value.Acquired).To(BeTrue(), "round %d, key %d", round, i)
				rec := o.Value.Record
				Expect(rec.FencingToken).To(BeNumerically(">", lastFence[i]), "round %d: fencing token of key %d", round, i)
				Expect(rec.Stamp.Compare(reqs[i].Stamp)).To(BeNumerically(">=", 0), "round %d: the stored stamp is before the proposed one", round)
				if round > 0 {
					Expect(rec.Stamp.Compare(lastStamp[i].Stamp)).To(BeNumerically(">", 0), "round %d: stamp of key %d not after its previous holder's", round, i)
				}
				lastFence[i], lastStamp[i] = rec.FencingToken, rec
				rels[i] = backend.ReleaseRequest{Key: keys[i], OwnerToken: reqs[i].OwnerToken, Stamp: sc.Stamp()}
			}
			released, err := bb.ReleaseBatch(ctx, rels)
			Expect(err).NotTo(HaveOccurred())
			for _, r := range released {
				Expect(r.Err).NotTo(HaveOccurred())
				Expect(r.Value).To(BeTrue())
			}
		}
	}, SpecTimeout(time.Minute))

	It("sends a watch event for each item a batch acquired or released", func(ctx SpecContext) {
		bb := batcher()
		prefix := sc.Key("batch-watch/")
		events := make(chan backend.Event, 64)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer GinkgoRecover()
			_ = sc.Backend.Watch(wctx, prefix, func(e backend.Event) error {
				select {
				case events <- e:
				case <-wctx.Done():
				}
				return nil
			})
		}()
		next := func() backend.Event {
			GinkgoHelper()
			select {
			case e := <-events:
				return e
			case <-time.After(10 * time.Second):
				Fail("no watch event within 10s")
			}
			return backend.Event{}
		}
		Expect(next().Type).To(Equal(backend.EventSynced))
		reqs := []backend.AcquireRequest{acquireReq(prefix+"a", sc.LongTTL()), acquireReq(prefix+"b", sc.LongTTL())}
		outs, err := bb.AcquireBatch(ctx, reqs)
		skipUnsupported(err)
		Expect(err).NotTo(HaveOccurred())
		seen := map[string]uint64{}
		for range 2 {
			e := next()
			Expect(e.Type).To(Equal(backend.EventAcquired), "%+v", e)
			seen[e.Record.Key] = e.Record.FencingToken
		}
		for i, r := range reqs {
			Expect(seen).To(HaveKeyWithValue(r.Key, outs[i].Value.Record.FencingToken), "the acquired event of %s", r.Key)
		}
		_, err = bb.ReleaseBatch(ctx, []backend.ReleaseRequest{
			{Key: reqs[0].Key, OwnerToken: reqs[0].OwnerToken, Stamp: sc.Stamp()},
			{Key: reqs[1].Key, OwnerToken: reqs[1].OwnerToken, Stamp: sc.Stamp()},
		})
		Expect(err).NotTo(HaveOccurred())
		released := map[string]bool{}
		for range 2 {
			e := next()
			Expect(e.Type).To(Equal(backend.EventReleased), "%+v", e)
			released[e.Record.Key] = true
		}
		Expect(released).To(HaveLen(2), "one released event per item")
	}, SpecTimeout(time.Minute))
})
