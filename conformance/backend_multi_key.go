package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Multi-key leases (backend.SetBackend, Info.MaxKeys > 1): a set of keys is
// taken, released and extended in one atomic step of the store, all or
// nothing, and each key keeps its own fencing token and chain of stamps.
var _ = describeBackend("multi-key", Label("multi-key"), func(sc *BackendContext) {
	var sets backend.SetBackend
	BeforeEach(func() {
		if sc.Info.MaxKeys < 2 {
			Skip("the backend declares max_keys 1: it takes one key per call")
		}
		var ok bool
		sets, ok = sc.Backend.(backend.SetBackend)
		Expect(ok).To(BeTrue())
	})

	It("takes every key of a set or none, and reports what blocked it", func(ctx SpecContext) {
		a, b, c := sc.Key("a"), sc.Key("b"), sc.Key("c")
		_, holder := sc.MustAcquire(ctx, b, sc.LongTTL())
		req := sc.SetRequest(sc.LongTTL(), a, b, c)
		res, err := sets.AcquireSet(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeFalse(), "a set with a held key was acquired")
		Expect(res.Blocker.Key).To(Equal(b), "the blocker is not the held key")
		Expect(res.Blocker.FencingToken).To(Equal(holder.FencingToken))
		for _, k := range []string{a, c} {
			_, held, err := sc.Backend.Get(ctx, k)
			Expect(err).NotTo(HaveOccurred())
			Expect(held).To(BeFalse(), "%q was taken by a set that did not acquire", k)
		}
	}, SpecTimeout(30*time.Second))

	It("gives each key of a set its own increasing fencing token and one stamp later than every key's last", func(ctx SpecContext) {
		a, b := sc.Key("a"), sc.Key("b")
		reqA, recA := sc.MustAcquire(ctx, a, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: a, OwnerToken: reqA.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		req := sc.SetRequest(sc.LongTTL(), a, b)
		res, err := sets.AcquireSet(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		Expect(res.Records).To(HaveLen(2))
		Expect([]string{res.Records[0].Key, res.Records[1].Key}).To(Equal(claimKeys(req)), "the records are not in the claims' order")
		gotA := res.Records[slices.Index(claimKeys(req), a)]
		Expect(gotA.FencingToken).To(BeNumerically(">", recA.FencingToken), "a's fencing token went back")
		Expect(res.Records[0].Stamp).To(Equal(res.Records[1].Stamp), "the keys of one set have different stamps")
		Expect(recA.Stamp.Before(gotA.Stamp)).To(BeTrue(), "the set's stamp %v is not after a's last %v", gotA.Stamp, recA.Stamp)
		for _, r := range res.Records {
			got, held, err := sc.Backend.Get(ctx, r.Key)
			Expect(err).NotTo(HaveOccurred())
			Expect(held).To(BeTrue())
			Expect(got.FencingToken).To(Equal(r.FencingToken))
		}
	}, SpecTimeout(30*time.Second))

	It("releases and extends a set only if the owner token holds every key", func(ctx SpecContext) {
		a, b, c := sc.Key("a"), sc.Key("b"), sc.Key("c")
		req := sc.SetRequest(sc.LongTTL(), a, b)
		res, err := sets.AcquireSet(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		sc.MustAcquire(ctx, c, sc.LongTTL())
		ok, err := sets.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: []string{a, c}, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "released a set with a key the token does not hold")
		ext, err := sets.ExtendSet(ctx, backend.ExtendSetRequest{Keys: []string{a, c}, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse(), "extended a set with a key the token does not hold")
		_, held, err := sc.Backend.Get(ctx, a)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "a refused set release changed a")

		ext, err = sets.ExtendSet(ctx, backend.ExtendSetRequest{Keys: []string{a, b}, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue())
		Expect(ext.Records).To(HaveLen(2))
		// res.Records follow the claims, which SetRequest sorts (".../10/b"
		// sorts before ".../9/a"); ext.Records follow ExtendSet's keys.
		for i, k := range []string{a, b} {
			Expect(ext.Records[i].Key).To(Equal(k), "ExtendSet's records are not in its keys' order")
			Expect(ext.Records[i].FencingToken).To(Equal(res.Records[slices.Index(claimKeys(req), k)].FencingToken),
				"the extended set's fencing token of %q changed", k)
		}
		ok, err = sets.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: []string{a, b}, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		for _, k := range []string{a, b} {
			_, held, err := sc.Backend.Get(ctx, k)
			Expect(err).NotTo(HaveOccurred())
			Expect(held).To(BeFalse(), "%q still held after its set's release", k)
		}
	}, SpecTimeout(30*time.Second))

	It("frees every key of a set at its TTL", func(ctx SpecContext) {
		a, b := sc.Key("a"), sc.Key("b")
		res, err := sets.AcquireSet(ctx, sc.SetRequest(sc.TTL(), a, b))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeTrue())
		Eventually(ctx, func() bool {
			res, err := sets.AcquireSet(ctx, sc.SetRequest(sc.LongTTL(), a, b))
			Expect(err).NotTo(HaveOccurred())
			return res.Acquired
		}).WithTimeout(sc.FreeWithin()+time.Second).WithPolling(10*time.Millisecond).Should(BeTrue(),
			"the set was not free again within TTL + granularity + slack")
	}, SpecTimeout(30*time.Second))

	It("never lets racing overlapping sets both win a key", func(ctx SpecContext) {
		pool := []string{sc.Key("p0"), sc.Key("p1"), sc.Key("p2"), sc.Key("p3")}
		for round := range 5 {
			r := rand.New(rand.NewPCG(uint64(round), 3))
			n := min(sc.Config.Racers, 16)
			reqs := make([]backend.AcquireSetRequest, n)
			for i := range reqs {
				keys := slices.Clone(pool)
				r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
				reqs[i] = sc.SetRequest(sc.LongTTL(), keys[:2+r.IntN(min(3, sc.Info.MaxKeys-1))]...)
			}
			results := raceSets(ctx, sets, reqs)
			owner := map[string]int{}
			for i, res := range results {
				if !res.Acquired {
					continue
				}
				for _, c := range reqs[i].Claims {
					j, taken := owner[c.Key]
					Expect(taken).To(BeFalse(), "round %d: sets %d and %d both won %q", round, j, i, c.Key)
					owner[c.Key] = i
				}
			}
			Expect(owner).NotTo(BeEmpty(), "round %d: no racer won", round)
			for i, res := range results {
				if res.Acquired {
					ok, err := sets.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: claimKeys(reqs[i]), OwnerToken: reqs[i].OwnerToken, Stamp: sc.Stamp()})
					Expect(err).NotTo(HaveOccurred())
					Expect(ok).To(BeTrue())
				}
			}
		}
	}, SpecTimeout(time.Minute))

	It("queues a set waiter in every key's queue in one step, and serves it only at the head of all of them (fair backends)", Label("fair"), func(ctx SpecContext) {
		if !sc.Info.Fair {
			Skip("the backend declares fair=false: waiters are queued by the server")
		}
		fs, ok := sc.Backend.(backend.FairSetBackend)
		Expect(ok).To(BeTrue(), "the plugin host does not offer the set queue call")
		a, b := sc.Key("qa"), sc.Key("qb")
		first, set, third := sc.Token(), sc.Token(), sc.Token()
		// In arrival order: first waits for a, the set waiter for a and b,
		// third for b.
		Expect(fs.Enqueue(ctx, a, first)).To(Succeed())
		Expect(fs.EnqueueSet(ctx, []string{a, b}, set)).To(Succeed())
		Expect(fs.Enqueue(ctx, b, third)).To(Succeed())
		defer func() {
			for _, w := range [][2]string{{a, first}, {a, set}, {b, set}, {b, third}} {
				Expect(fs.Dequeue(ctx, w[0], w[1])).To(Succeed())
			}
		}()
		try := func(waiterID string, keys ...string) backend.AcquireSetResult {
			GinkgoHelper()
			req := sc.SetRequest(sc.LongTTL(), keys...)
			req.WaiterID = waiterID
			if len(keys) == 1 {
				r, err := fs.Acquire(ctx, backend.AcquireRequest{Key: keys[0], OwnerToken: req.OwnerToken, TTL: req.TTL, Stamp: req.Stamp, WaiterID: waiterID})
				Expect(err).NotTo(HaveOccurred())
				res := backend.AcquireSetResult{Acquired: r.Acquired}
				if r.Acquired {
					res.Records = []backend.Record{r.Record}
				}
				return res
			}
			res, err := fs.AcquireSet(ctx, req)
			Expect(err).NotTo(HaveOccurred())
			return res
		}
		release := func(owner string, keys ...string) {
			GinkgoHelper()
			ok, err := fs.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: keys, OwnerToken: owner, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(ok).To(BeTrue())
		}

		Expect(try(set, a, b).Acquired).To(BeFalse(), "the set waiter took its keys while first headed a's queue")
		Expect(try(third, b).Acquired).To(BeFalse(), "third took b while the set waiter, queued before it, waits for b")
		Expect(try("", b).Acquired).To(BeFalse(), "a caller with no entry took b while waiters were queued")

		reqA := sc.SetRequest(sc.LongTTL(), a)
		ra, err := fs.Acquire(ctx, backend.AcquireRequest{Key: a, OwnerToken: reqA.OwnerToken, TTL: reqA.TTL, Stamp: reqA.Stamp, WaiterID: first})
		Expect(err).NotTo(HaveOccurred())
		Expect(ra.Acquired).To(BeTrue(), "first, the head of a's queue, did not take a")
		ok, err = fs.Release(ctx, backend.ReleaseRequest{Key: a, OwnerToken: reqA.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		for _, k := range []string{a, b} {
			head, err := fs.WaitTurn(ctx, k, set)
			Expect(err).NotTo(HaveOccurred())
			Expect(head).To(BeTrue(), "the set waiter is not the head of %q's queue once first left", k)
		}

		reqSet := sc.SetRequest(sc.LongTTL(), a, b)
		reqSet.WaiterID = set
		rs, err := fs.AcquireSet(ctx, reqSet)
		Expect(err).NotTo(HaveOccurred())
		Expect(rs.Acquired).To(BeTrue(), "the set waiter, head of both queues, did not take its keys")
		Expect(try(third, b).Acquired).To(BeFalse(), "third took b from the set")
		release(reqSet.OwnerToken, a, b)
		reqB := sc.SetRequest(sc.LongTTL(), b)
		rb, err := fs.Acquire(ctx, backend.AcquireRequest{Key: b, OwnerToken: reqB.OwnerToken, TTL: reqB.TTL, Stamp: reqB.Stamp, WaiterID: third})
		Expect(err).NotTo(HaveOccurred())
		Expect(rb.Acquired).To(BeTrue(), "third, now the head of b's queue, did not take b once the set let it go")
		ok, err = fs.Release(ctx, backend.ReleaseRequest{Key: b, OwnerToken: reqB.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("refuses more keys than max_keys", func(ctx SpecContext) {
		keys := make([]string, sc.Info.MaxKeys+1)
		for i := range keys {
			keys[i] = sc.Key(fmt.Sprintf("k%03d", i))
		}
		slices.Sort(keys)
		_, err := sets.AcquireSet(ctx, sc.SetRequest(sc.LongTTL(), keys...))
		Expect(err).To(MatchError(backend.ErrInvalidArgument), "a set of %d keys (max_keys %d)", len(keys), sc.Info.MaxKeys)
	}, SpecTimeout(30*time.Second))
})

// SetRequest is an AcquireSet of keys (sorted here) with a fresh token and
// stamp.
func (sc *BackendContext) SetRequest(ttl time.Duration, keys ...string) backend.AcquireSetRequest {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	claims := make([]backend.Claim, len(sorted))
	for i, k := range sorted {
		claims[i] = backend.Claim{Key: k}
	}
	return backend.AcquireSetRequest{Claims: claims, OwnerToken: sc.Token(), TTL: ttl, Holder: "conformance", Stamp: sc.Stamp()}
}

func claimKeys(req backend.AcquireSetRequest) []string {
	keys := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		keys[i] = c.Key
	}
	return keys
}

// raceSets runs the AcquireSets at once and returns their results.
func raceSets(ctx context.Context, sets backend.SetBackend, reqs []backend.AcquireSetRequest) []backend.AcquireSetResult {
	GinkgoHelper()
	out := make([]backend.AcquireSetResult, len(reqs))
	errs := make([]error, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			<-start
			out[i], errs[i] = sets.AcquireSet(ctx, req)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		Expect(err).NotTo(HaveOccurred(), "AcquireSet %v", claimKeys(reqs[i]))
	}
	return out
}
