package conformance

import (
	"context"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Elections (Info.Kinds lists KindElection): a key of limit 1 whose one
// grant is its leadership, its fencing token the term, with a value that
// only the leader's token may replace (ElectionBackend.Proclaim), in one
// atomic step of the store.
var _ = describeBackend("election", Label("election"), func(sc *BackendContext) {
	var elect backend.ElectionBackend
	BeforeEach(func() {
		if !sc.Info.Keeps(backend.KindElection) {
			Skip("the backend does not list KindElection in Info.Kinds")
		}
		var ok bool
		elect, ok = sc.Backend.(backend.ElectionBackend)
		Expect(ok).To(BeTrue(), "the plugin host serves Proclaim")
	})
	campaign := func(key, value string, ttl time.Duration) backend.AcquireRequest {
		req := sc.Grant(key, backend.KindElection, 1, 1, ttl)
		req.Value = value
		return req
	}
	proclaim := func(ctx context.Context, key, token, value string) backend.ProclaimResult {
		GinkgoHelper()
		res, err := elect.Proclaim(ctx, backend.ProclaimRequest{Key: key, OwnerToken: token, Value: value, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred(), "Proclaim %q", key)
		return res
	}
	valueOf := func(ctx context.Context, key string) string {
		GinkgoHelper()
		rec, held, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue(), "the election %q has no leader", key)
		Expect(rec.Holders).To(HaveLen(1), "an election has one leader")
		Expect(rec.Holders[0].Value).To(Equal(rec.Value), "the record's value is not its one holder's")
		return rec.Value
	}

	It("lists KindElection in Info.Kinds only as a backend that serves Proclaim", func(ctx SpecContext) {
		info, err := sc.Backend.Info(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Kinds).To(ContainElement(backend.KindElection))
		res := proclaim(ctx, sc.Key("none"), sc.Token(), "v")
		Expect(res.Proclaimed).To(BeFalse(), "a proclaim on a key nobody leads answered true")
	})

	It("elects exactly one of N racing campaigners on a free key", func(ctx SpecContext) {
		for round := range 4 {
			key := sc.Key("race")
			reqs := make([]backend.AcquireRequest, sc.Config.Racers)
			for i := range reqs {
				reqs[i] = campaign(key, sc.Token(), sc.LongTTL())
			}
			results := raceGrants(ctx, sc.Backend, reqs)
			winner := -1
			for i, res := range results {
				Expect(res.err).NotTo(HaveOccurred(), "round %d: Acquire", round)
				if res.res.Acquired {
					Expect(winner).To(Equal(-1), "round %d: campaigners %d and %d both lead", round, winner, i)
					winner = i
				}
			}
			Expect(winner).NotTo(Equal(-1), "round %d: nobody leads a free key", round)
			Expect(valueOf(ctx, key)).To(Equal(reqs[winner].Value), "round %d: the key does not carry the leader's value", round)
			for i, res := range results {
				if i != winner {
					Expect(res.res.Record.FencingToken).To(Equal(results[winner].res.Record.FencingToken), "round %d: a loser is not shown the leader", round)
				}
			}
			sc.MustRelease(ctx, key, reqs[winner].OwnerToken)
		}
	}, SpecTimeout(time.Minute))

	It("gives every leadership a term above the last, after resignations and expiries", func(ctx SpecContext) {
		key := sc.Key("terms")
		var last uint64
		for i := range 4 {
			ttl := sc.LongTTL()
			if i%2 == 1 {
				ttl = sc.TTL()
			}
			req := campaign(key, "", ttl)
			var rec backend.Record
			Eventually(ctx, func() bool {
				res, err := sc.Backend.Acquire(ctx, req)
				Expect(err).NotTo(HaveOccurred())
				rec = res.Record
				return res.Acquired
			}).WithTimeout(sc.FreeWithin()+time.Second).WithPolling(10*time.Millisecond).Should(BeTrue(),
				"leadership %d: the key was not free within TTL + granularity + slack", i)
			Expect(rec.Kind).To(Equal(backend.KindElection))
			Expect(rec.FencingToken).To(BeNumerically(">", last), "leadership %d: term %d after %d", i, rec.FencingToken, last)
			last = rec.FencingToken
			if i%2 == 0 {
				sc.MustRelease(ctx, key, req.OwnerToken)
			} // else: it expires
		}
	}, SpecTimeout(time.Minute))

	It("keeps a value as it was given: empty, 4096 bytes, multi-byte UTF-8", func(ctx SpecContext) {
		for _, v := range []string{"", strings.Repeat("x", backend.MaxValueBytes), "leader é 世界 🗳", strings.Repeat("é", backend.MaxValueBytes/2)} {
			key := sc.Key("value")
			req := campaign(key, v, sc.LongTTL())
			rec := sc.MustGrant(ctx, req)
			Expect(rec.Value).To(Equal(v), "the Acquire's record")
			Expect(valueOf(ctx, key)).To(Equal(v), "Get")
			page, err := sc.Backend.List(ctx, backend.ListRequest{Prefix: key, PageSize: 10})
			Expect(err).NotTo(HaveOccurred())
			Expect(page.Records).To(HaveLen(1))
			Expect(page.Records[0].Value).To(Equal(v), "List")
			ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(ext.Extended).To(BeTrue())
			Expect(ext.Record.Value).To(Equal(v), "Extend's record")
			sc.MustRelease(ctx, key, req.OwnerToken)
		}
	}, SpecTimeout(30*time.Second))

	It("lets the leader's token alone replace the value, changing nothing else, and announces it in Watch", Label("watch"), func(ctx SpecContext) {
		prefix := sc.Key("proclaim/")
		key := prefix + "e"
		events := make(chan backend.Event, 64)
		watchCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		synced := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- sc.Backend.Watch(watchCtx, prefix, func(ev backend.Event) error {
				if ev.Type == backend.EventSynced {
					close(synced)
					return nil
				}
				events <- ev
				return nil
			})
		}()
		Eventually(ctx, synced).Should(BeClosed())

		leader := campaign(key, "a", sc.LongTTL())
		acquired := sc.MustGrant(ctx, leader)
		res := proclaim(ctx, key, leader.OwnerToken, "b")
		Expect(res.Proclaimed).To(BeTrue(), "the leader's proclaim answered false")
		Expect(res.Record.Key).To(Equal(key))
		Expect(res.Record.Value).To(Equal("b"))
		Expect(res.Record.FencingToken).To(Equal(acquired.FencingToken), "Proclaim changed the term")
		Expect(res.Record.Stamp).To(Equal(acquired.Stamp), "Proclaim changed the grant's stamp")
		Expect(res.Record.Kind).To(Equal(backend.KindElection))
		Expect(valueOf(ctx, key)).To(Equal("b"), "Get after Proclaim")
		rec, _, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.FencingToken).To(Equal(acquired.FencingToken))
		Expect(rec.ExpiresAt).To(BeTemporally("~", acquired.ExpiresAt, sc.Info.TTLGranularity+time.Second), "Proclaim changed the expiry")

		for _, c := range []struct {
			what, token string
		}{{"another token", sc.Token()}, {"an empty token", ""}} {
			res := proclaim(ctx, key, c.token, "stolen")
			Expect(res.Proclaimed).To(BeFalse(), "%s proclaimed", c.what)
			Expect(valueOf(ctx, key)).To(Equal("b"), "a refused proclaim (%s) changed the value", c.what)
		}

		want := []struct {
			t     backend.EventType
			value string
		}{{backend.EventAcquired, "a"}, {backend.EventProclaimed, "b"}}
		for i, w := range want {
			var ev backend.Event
			Eventually(ctx, events).WithTimeout(5*time.Second).Should(Receive(&ev), "event %d (%s)", i, w.t)
			Expect(ev.Type).To(Equal(w.t), "event %d", i)
			Expect(ev.Record.Key).To(Equal(key))
			Expect(ev.Record.FencingToken).To(Equal(acquired.FencingToken), "event %d is about another grant", i)
			Expect(ev.Record.Value).To(Equal(w.value), "event %d's value", i)
		}
		sc.MustRelease(ctx, key, leader.OwnerToken)
		var ev backend.Event
		Eventually(ctx, events).WithTimeout(5*time.Second).Should(Receive(&ev))
		Expect(ev.Type).To(Equal(backend.EventReleased), "a refused proclaim was announced, or the release was not")
		cancel()
		Eventually(ctx, done).Should(Receive())
	}, SpecTimeout(30*time.Second))

	It("refuses the proclaim of a leader that resigned or expired, also once another leads", func(ctx SpecContext) {
		key := sc.Key("stale")
		first := campaign(key, "first", sc.LongTTL())
		sc.MustGrant(ctx, first)
		sc.MustRelease(ctx, key, first.OwnerToken)
		Expect(proclaim(ctx, key, first.OwnerToken, "late").Proclaimed).To(BeFalse(), "a resigned leader proclaimed on a free key")

		short := campaign(key, "short", sc.TTL())
		sc.MustGrant(ctx, short)
		var next backend.AcquireRequest
		Eventually(ctx, func() bool {
			next = campaign(key, "next", sc.LongTTL())
			res, err := sc.Backend.Acquire(ctx, next)
			Expect(err).NotTo(HaveOccurred())
			return res.Acquired
		}).WithTimeout(sc.FreeWithin()+time.Second).WithPolling(10*time.Millisecond).Should(BeTrue(),
			"the short leadership did not expire within TTL + granularity + slack")
		for _, old := range []backend.AcquireRequest{first, short} {
			Expect(proclaim(ctx, key, old.OwnerToken, "stale").Proclaimed).To(BeFalse(), "the ended leadership of %q proclaimed", old.Value)
		}
		Expect(valueOf(ctx, key)).To(Equal("next"), "a stale leader's proclaim changed the new leader's value")
	}, SpecTimeout(30*time.Second))

	It("keeps an election's kind against other kinds, both ways", func(ctx SpecContext) {
		el, mu := sc.Key("el"), sc.Key("mutex")
		leader := campaign(el, "v", sc.LongTTL())
		sc.MustGrant(ctx, leader)
		muReq, _ := sc.MustAcquire(ctx, mu, sc.LongTTL())
		for _, c := range []struct {
			what string
			req  backend.AcquireRequest
			kind backend.Kind
		}{
			{"the election asked as a mutex", sc.Grant(el, backend.KindMutex, 1, 1, sc.LongTTL()), backend.KindElection},
			{"the mutex asked as an election", campaign(mu, "", sc.LongTTL()), backend.KindMutex},
		} {
			res, err := sc.Backend.Acquire(ctx, c.req)
			Expect(err).NotTo(HaveOccurred(), c.what)
			Expect(res.Acquired).To(BeFalse(), "%s was granted", c.what)
			Expect(res.Record.Kind).To(Equal(c.kind), "%s: the record's kind", c.what)
		}
		if sc.Info.Keeps(backend.KindSemaphore) {
			res, err := sc.Backend.Acquire(ctx, sc.Grant(el, backend.KindSemaphore, 1, 1, sc.LongTTL()))
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Acquired).To(BeFalse(), "the election was granted as a semaphore of limit 1")
			Expect(res.Record.Kind).To(Equal(backend.KindElection))
		}
		Expect(proclaim(ctx, mu, muReq.OwnerToken, "x").Proclaimed).To(BeFalse(), "a mutex's holder proclaimed")
		Expect(valueOf(ctx, el)).To(Equal("v"))
	}, SpecTimeout(30*time.Second))
})
