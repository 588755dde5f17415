package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Keys with more than one lease (Info.Kinds): a semaphore's grants and an
// rwlock's readers and writer share one capacity rule (the permits held
// plus the request's fit the limit), checked in one atomic step of the
// store; every grant is a lease of its own.
var _ = describeBackend("semaphore", Label("semaphore"), func(sc *BackendContext) {
	BeforeEach(func() {
		if !sc.Info.Keeps(backend.KindSemaphore) {
			Skip("the backend does not list KindSemaphore in Info.Kinds")
		}
	})

	It("never grants more permits than the limit to racing acquirers, checked at a fenced counter", func(ctx SpecContext) {
		const limit = 3
		for round := range 4 {
			key := sc.Key("race")
			n := sc.Config.Racers
			reqs := make([]backend.AcquireRequest, n)
			for i := range reqs {
				permits := 1
				if round%2 == 1 {
					permits = 1 + i%2 // 1 and 2 permits, mixed
				}
				reqs[i] = sc.Grant(key, backend.KindSemaphore, limit, permits, sc.LongTTL())
			}
			results := raceGrants(ctx, sc.Backend, reqs)
			counter := newFencedCounter(limit)
			minRefused := limit + 1
			for i, res := range results {
				Expect(res.err).NotTo(HaveOccurred(), "round %d: Acquire", round)
				if !res.res.Acquired {
					minRefused = min(minRefused, reqs[i].Permits)
					continue
				}
				Expect(counter.enter(res.res.Record.FencingToken, reqs[i].Permits)).To(Succeed(), "round %d", round)
			}
			// Nobody released during the round, so the permits held only
			// grew: a refused request did not fit at the end either.
			Expect(counter.inUse+minRefused).To(BeNumerically(">", limit),
				"round %d: %d of %d permits held and a request of %d was refused", round, counter.inUse, limit, minRefused)
			rec, held, err := sc.Backend.Get(ctx, key)
			Expect(err).NotTo(HaveOccurred())
			Expect(held).To(BeTrue())
			Expect(rec.InUse).To(Equal(counter.inUse), "round %d: Get reports %d permits in use, the winners hold %d", round, rec.InUse, counter.inUse)
			Expect(rec.Holders).To(HaveLen(counter.holders), "round %d: Get reports %d holders, %d won", round, len(rec.Holders), counter.holders)
			for i, res := range results {
				if res.res.Acquired {
					sc.MustRelease(ctx, key, reqs[i].OwnerToken)
				}
			}
		}
	}, SpecTimeout(time.Minute))

	It("gives every grant of a key a fresh fencing token and stamp, strictly increasing over every grant", func(ctx SpecContext) {
		key := sc.Key("chain")
		var last backend.Record
		var held []backend.AcquireRequest
		for i := range 6 {
			req := sc.Grant(key, backend.KindSemaphore, 3, 1+i%2, sc.LongTTL())
			if len(held) > 0 && i%2 == 0 {
				// Free room first: grants and releases interleave.
				old := held[0]
				held = held[1:]
				sc.MustRelease(ctx, key, old.OwnerToken)
			}
			rec := sc.MustGrant(ctx, req)
			held = append(held, req)
			Expect(rec.Kind).To(Equal(backend.KindSemaphore))
			Expect(rec.Limit).To(Equal(3))
			Expect(rec.Permits).To(Equal(req.Permits), "the record does not describe the new grant")
			if i > 0 {
				Expect(rec.FencingToken).To(BeNumerically(">", last.FencingToken), "grant %d: fencing token went back", i)
				Expect(last.Stamp.Before(rec.Stamp)).To(BeTrue(), "grant %d: stamp %v is not after the previous grant's %v", i, rec.Stamp, last.Stamp)
			}
			last = rec
			for len(held) > 1 && i%2 == 1 {
				old := held[0]
				held = held[1:]
				sc.MustRelease(ctx, key, old.OwnerToken)
			}
		}
	}, SpecTimeout(30*time.Second))

	It("refuses a request whose kind or limit is not the key's, and reports the key's", func(ctx SpecContext) {
		sem, mu := sc.Key("sem"), sc.Key("mutex")
		sc.MustGrant(ctx, sc.Grant(sem, backend.KindSemaphore, 3, 1, sc.LongTTL()))
		sc.MustAcquire(ctx, mu, sc.LongTTL())
		for _, c := range []struct {
			what string
			req  backend.AcquireRequest
			kind backend.Kind
			lim  int
		}{
			{"the semaphore asked with limit 4", sc.Grant(sem, backend.KindSemaphore, 4, 1, sc.LongTTL()), backend.KindSemaphore, 3},
			{"the semaphore asked as a mutex", sc.Grant(sem, backend.KindMutex, 1, 1, sc.LongTTL()), backend.KindSemaphore, 3},
			{"the mutex asked as a semaphore", sc.Grant(mu, backend.KindSemaphore, 3, 1, sc.LongTTL()), backend.KindMutex, 1},
		} {
			res, err := sc.Backend.Acquire(ctx, c.req)
			Expect(err).NotTo(HaveOccurred(), c.what)
			Expect(res.Acquired).To(BeFalse(), "%s was granted", c.what)
			Expect(res.Record.Kind).To(Equal(c.kind), "%s: the record's kind", c.what)
			Expect(max(res.Record.Limit, 1)).To(Equal(c.lim), "%s: the record's limit", c.what)
		}
		rec, _, err := sc.Backend.Get(ctx, sem)
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.InUse).To(Equal(1), "a refused request changed the semaphore")
		if sets, ok := sc.Backend.(backend.SetBackend); ok && sc.Info.MaxKeys >= 2 {
			res, err := sets.AcquireSet(ctx, sc.SetRequest(sc.LongTTL(), sem, sc.Key("other")))
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Acquired).To(BeFalse(), "a set of mutexes took the semaphore's key")
			Expect(res.Blocker.Key).To(Equal(sem))
			Expect(res.Blocker.Kind).To(Equal(backend.KindSemaphore), "the set's blocker does not say it is a semaphore")
		}
	}, SpecTimeout(30*time.Second))

	It("reports every holder with its permits, and the permits in use, in Get and List", func(ctx SpecContext) {
		prefix := sc.Key("list/")
		sem, mu := prefix+"a", prefix+"b"
		var recs []backend.Record
		for i, ttl := range []time.Duration{sc.LongTTL(), sc.LongTTL() / 2, sc.LongTTL()} {
			recs = append(recs, sc.MustGrant(ctx, sc.Grant(sem, backend.KindSemaphore, 5, 1+i%2, ttl)))
		}
		sc.MustAcquire(ctx, mu, sc.LongTTL())
		rec, held, err := sc.Backend.Get(ctx, sem)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeTrue())
		Expect(rec.Kind).To(Equal(backend.KindSemaphore))
		Expect(rec.Limit).To(Equal(5))
		Expect(rec.InUse).To(Equal(4))
		Expect(rec.Holders).To(HaveLen(3))
		for i, h := range rec.Holders {
			Expect(h.FencingToken).To(Equal(recs[i].FencingToken), "holder %d is not in fencing-token order", i)
			Expect(h.Permits).To(Equal(recs[i].Permits), "holder %d's permits", i)
			Expect(h.Holder).To(Equal("conformance"))
			Expect(h.Remaining).To(BeNumerically(">", 0))
		}
		Expect(rec.FencingToken).To(Equal(recs[1].FencingToken), "the record's own grant is not the one that ends first")

		// A page counts grants: the semaphore's three fill a page of 2,
		// whole, and the mutex comes next.
		page, err := sc.Backend.List(ctx, backend.ListRequest{Prefix: prefix, PageSize: 2})
		Expect(err).NotTo(HaveOccurred())
		Expect(page.Records).To(HaveLen(1), "a page of 2 grants held %d keys", len(page.Records))
		Expect(page.Records[0].Key).To(Equal(sem))
		Expect(page.Records[0].Holders).To(HaveLen(3), "the semaphore's holders were split")
		Expect(page.NextPageToken).NotTo(BeEmpty())
		page, err = sc.Backend.List(ctx, backend.ListRequest{Prefix: prefix, PageSize: 2, PageToken: page.NextPageToken})
		Expect(err).NotTo(HaveOccurred())
		Expect(page.Records).To(HaveLen(1))
		Expect(page.Records[0].Key).To(Equal(mu))
		Expect(page.Records[0].Kind).To(Equal(backend.KindMutex))
	}, SpecTimeout(30*time.Second))

	It("releases and extends one grant by its owner token, and frees only the permits of a grant that expires", func(ctx SpecContext) {
		key := sc.Key("expiry")
		long := sc.Grant(key, backend.KindSemaphore, 3, 1, sc.LongTTL())
		short := sc.Grant(key, backend.KindSemaphore, 3, 2, sc.TTL())
		sc.MustGrant(ctx, long)
		sent := time.Now()
		sc.MustGrant(ctx, short)
		big := sc.Grant(key, backend.KindSemaphore, 3, 2, sc.LongTTL())
		res, err := sc.Backend.Acquire(ctx, big)
		Expect(err).NotTo(HaveOccurred())
		if res.Acquired {
			// Only once the short grant's TTL has run out may its permits
			// go to another.
			Expect(time.Since(sent)).To(BeNumerically(">=", sc.TTL()), "2 permits granted beside 3 held of a limit of 3")
		}

		ext, err := sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: long.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue())
		Expect(ext.Record.Permits).To(Equal(1), "the renewed record is not the renewed grant")
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: sc.Token(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "a token that holds nothing released a grant")

		// The short grant runs out: its 2 permits, and only those, are free.
		Eventually(ctx, func() bool {
			if res.Acquired {
				return true
			}
			res, err = sc.Backend.Acquire(ctx, big)
			Expect(err).NotTo(HaveOccurred())
			return res.Acquired
		}).WithTimeout(sc.FreeWithin()+time.Second).WithPolling(10*time.Millisecond).Should(BeTrue(),
			"the expired grant's permits were not free within TTL + granularity + slack")
		ext, err = sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: long.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeTrue(), "the long grant went with the short one")
		ext, err = sc.Backend.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: short.OwnerToken, TTL: sc.LongTTL(), Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.Extended).To(BeFalse(), "an expired grant was renewed")
		rec, _, err := sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.InUse).To(Equal(3))
		sc.MustRelease(ctx, key, long.OwnerToken)
		rec, _, err = sc.Backend.Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(rec.InUse).To(Equal(2), "a release freed other grants' permits")
		Expect(rec.Holders).To(HaveLen(1))
		Expect(rec.Holders[0].FencingToken).To(Equal(rec.FencingToken))
	}, SpecTimeout(30*time.Second))

	It("announces each grant acquired, released and expired in Watch", Label("watch"), func(ctx SpecContext) {
		prefix := sc.Key("watch/")
		key := prefix + "s"
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
		// a and b held together; a released; then c, short, expires
		// beside b (granted after the release, so the order is fixed).
		a := sc.Grant(key, backend.KindSemaphore, 2, 1, sc.LongTTL())
		b := sc.Grant(key, backend.KindSemaphore, 2, 1, sc.LongTTL())
		ra, rb := sc.MustGrant(ctx, a), sc.MustGrant(ctx, b)
		sc.MustRelease(ctx, key, a.OwnerToken)
		rc := sc.MustGrant(ctx, sc.Grant(key, backend.KindSemaphore, 2, 1, sc.TTL()))
		want := []struct {
			t     backend.EventType
			fence uint64
		}{{backend.EventAcquired, ra.FencingToken}, {backend.EventAcquired, rb.FencingToken}, {backend.EventReleased, ra.FencingToken},
			{backend.EventAcquired, rc.FencingToken}, {backend.EventExpired, rc.FencingToken}}
		for i, w := range want {
			var ev backend.Event
			Eventually(ctx, events).WithTimeout(sc.FreeWithin()+2*time.Second).Should(Receive(&ev), "event %d (%s of %d)", i, w.t, w.fence)
			Expect(ev.Type).To(Equal(w.t), "event %d", i)
			Expect(ev.Record.FencingToken).To(Equal(w.fence), "event %d (%s) is about another grant", i, w.t)
			Expect(ev.Record.Kind).To(Equal(backend.KindSemaphore), "event %d", i)
			Expect(ev.Record.Permits).To(Equal(1), "event %d", i)
		}
		cancel()
		Eventually(ctx, done).Should(Receive())
	}, SpecTimeout(30*time.Second))
})

var _ = describeBackend("rwlock", Label("rwlock"), func(sc *BackendContext) {
	BeforeEach(func() {
		if !sc.Info.Keeps(backend.KindRWLock) {
			Skip("the backend does not list KindRWLock in Info.Kinds")
		}
	})
	read := func(key string, ttl time.Duration) backend.AcquireRequest {
		return sc.Grant(key, backend.KindRWLock, backend.RWLockReaders, 1, ttl)
	}
	write := func(key string, ttl time.Duration) backend.AcquireRequest {
		return sc.Grant(key, backend.KindRWLock, backend.RWLockReaders, backend.RWLockReaders, ttl)
	}

	It("lets readers share the key and a writer hold it alone", func(ctx SpecContext) {
		key := sc.Key("rw")
		r1, r2 := read(key, sc.LongTTL()), read(key, sc.LongTTL())
		sc.MustGrant(ctx, r1)
		sc.MustGrant(ctx, r2)
		w := write(key, sc.LongTTL())
		res, err := sc.Backend.Acquire(ctx, w)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeFalse(), "a writer was granted beside two readers")
		for _, r := range []backend.AcquireRequest{r1, r2} {
			sc.MustRelease(ctx, key, r.OwnerToken)
		}
		rec := sc.MustGrant(ctx, w)
		Expect(rec.Permits).To(Equal(backend.RWLockReaders))
		res, err = sc.Backend.Acquire(ctx, read(key, sc.LongTTL()))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeFalse(), "a reader was granted beside the writer")
		Expect(res.Record.FencingToken).To(Equal(rec.FencingToken), "the refused reader is not shown the writer")
		res, err = sc.Backend.Acquire(ctx, write(key, sc.LongTTL()))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Acquired).To(BeFalse(), "a second writer was granted")
	}, SpecTimeout(30*time.Second))

	It("never lets racing readers and writers hold a writer beside anyone, checked at a fenced counter", func(ctx SpecContext) {
		for round := range 4 {
			key := sc.Key("race")
			n := sc.Config.Racers
			reqs := make([]backend.AcquireRequest, n)
			asked := 0 // readers
			for i := range reqs {
				if (i+round)%4 == 0 {
					reqs[i] = write(key, sc.LongTTL())
				} else {
					reqs[i] = read(key, sc.LongTTL())
					asked++
				}
			}
			results := raceGrants(ctx, sc.Backend, reqs)
			counter := newFencedCounter(backend.RWLockReaders)
			writers, readers := 0, 0
			for i, res := range results {
				Expect(res.err).NotTo(HaveOccurred(), "round %d", round)
				if !res.res.Acquired {
					continue
				}
				Expect(counter.enter(res.res.Record.FencingToken, reqs[i].Permits)).To(Succeed(), "round %d", round)
				if reqs[i].Permits == backend.RWLockReaders {
					writers++
				} else {
					readers++
				}
			}
			Expect(writers+readers).To(BeNumerically(">", 0), "round %d: nobody won a free key", round)
			Expect(writers == 0 || (writers == 1 && readers == 0)).To(BeTrue(), "round %d: %d writers and %d readers held the key at once", round, writers, readers)
			if writers == 0 {
				Expect(readers).To(Equal(asked), "round %d: a reader was refused beside readers only", round)
			}
			for i, res := range results {
				if res.res.Acquired {
					sc.MustRelease(ctx, key, reqs[i].OwnerToken)
				}
			}
		}
	}, SpecTimeout(time.Minute))
})

// Grant is an Acquire of key as kind with limit and permits (a fresh
// token and stamp).
func (sc *BackendContext) Grant(key string, kind backend.Kind, limit, permits int, ttl time.Duration) backend.AcquireRequest {
	return backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "conformance", Stamp: sc.Stamp(),
		Kind: kind, Limit: limit, Permits: permits}
}

// MustGrant sends req and fails the spec unless it was granted.
func (sc *BackendContext) MustGrant(ctx context.Context, req backend.AcquireRequest) backend.Record {
	GinkgoHelper()
	res, err := sc.Backend.Acquire(ctx, req)
	Expect(err).NotTo(HaveOccurred(), "Acquire %q as a %s", req.Key, req.Kind)
	Expect(res.Acquired).To(BeTrue(), "Acquire of %d permits of %q (%s, limit %d) refused: %+v", req.Permits, req.Key, req.Kind, req.Limit, res.Record)
	return res.Record
}

type grantOutcome struct {
	res backend.AcquireResult
	err error
}

// raceGrants sends every request at once and waits for every answer.
func raceGrants(ctx context.Context, b backend.Backend, reqs []backend.AcquireRequest) []grantOutcome {
	out := make([]grantOutcome, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() {
			<-start
			res, err := b.Acquire(ctx, req)
			out[i] = grantOutcome{res, err}
		})
	}
	close(start)
	wg.Wait()
	return out
}

// fencedCounter is a resource guarded by a key of several leases: each
// holder enters with its fencing token and permits, and it refuses a token
// it saw before (fencing tokens are unique over every grant of a key) and
// more permits in use than the limit. It is safe for concurrent use.
type fencedCounter struct {
	mu      sync.Mutex
	limit   int
	inUse   int
	holders int
	seen    map[uint64]bool
	peak    int
}

func newFencedCounter(limit int) *fencedCounter {
	return &fencedCounter{limit: limit, seen: map[uint64]bool{}}
}

func (c *fencedCounter) enter(fence uint64, permits int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[fence] {
		return fmt.Errorf("fencing token %d used by two grants", fence)
	}
	c.seen[fence] = true
	if c.inUse+permits > c.limit {
		return fmt.Errorf("%d permits entered beside %d held: over the limit %d", permits, c.inUse, c.limit)
	}
	c.inUse += permits
	c.holders++
	c.peak = max(c.peak, c.inUse)
	return nil
}

func (c *fencedCounter) leave(permits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inUse -= permits
	c.holders--
}

// MustRelease releases key's lease held by token and fails the spec
// unless it was released.
func (sc *BackendContext) MustRelease(ctx context.Context, key, token string) {
	GinkgoHelper()
	ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: token, Stamp: sc.Stamp()})
	Expect(err).NotTo(HaveOccurred(), "Release %q", key)
	Expect(ok).To(BeTrue(), "the release of a lease held on %q answered false", key)
}
