package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Watch is how the engine wakes waiters without polling.
var _ = describeBackend("watch", Label("watch"), func(sc *BackendContext) {
	It("sends synced first, then acquired, released and expired events for keys under the prefix only", func(ctx SpecContext) {
		prefix := sc.Key("watch/")
		outside := strings.TrimSuffix(prefix, "/") + "-outside"
		events := make(chan backend.Event, 256)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			done <- sc.Backend.Watch(wctx, prefix, func(e backend.Event) error {
				select {
				case events <- e:
					return nil
				default:
					return fmt.Errorf("conformance: watch buffer full")
				}
			})
		}()
		stopped := false
		defer func() {
			if !stopped {
				cancel()
			}
		}()

		next := func(within time.Duration) backend.Event {
			GinkgoHelper()
			for {
				select {
				case e := <-events:
					Expect(e.Record.Key).NotTo(Equal(outside), "event for a key outside the prefix: %v", e)
					return e
				case err := <-done:
					Fail(fmt.Sprintf("Watch returned early: %v", err))
				case <-time.After(within):
					Fail(fmt.Sprintf("no watch event within %s", within))
				}
			}
		}

		Expect(next(10*time.Second).Type).To(Equal(backend.EventSynced), "the first event must be synced")

		_, outRec := sc.MustAcquire(ctx, outside, sc.LongTTL())
		_ = outRec
		k1 := prefix + "a"
		req1, r1 := sc.MustAcquire(ctx, k1, sc.LongTTL())
		e := next(5 * time.Second)
		Expect(e.Type).To(Equal(backend.EventAcquired))
		Expect(e.Record.Key).To(Equal(k1))
		Expect(e.Record.FencingToken).To(Equal(r1.FencingToken))

		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: k1, OwnerToken: req1.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		e = next(5 * time.Second)
		Expect(e.Type).To(Equal(backend.EventReleased))
		Expect(e.Record.Key).To(Equal(k1))
		Expect(e.Record.FencingToken).To(Equal(r1.FencingToken))

		k2 := prefix + "b"
		_, r2 := sc.MustAcquire(ctx, k2, sc.TTL())
		e = next(5 * time.Second)
		Expect(e.Type).To(Equal(backend.EventAcquired))
		Expect(e.Record.Key).To(Equal(k2))
		e = next(sc.FreeWithin() + 2*time.Second)
		Expect(e.Type).To(Equal(backend.EventExpired), "a lease that ran out must be reported as expired")
		Expect(e.Record.Key).To(Equal(k2))
		Expect(e.Record.FencingToken).To(Equal(r2.FencingToken))

		cancel()
		stopped = true
		Eventually(done).WithTimeout(5*time.Second).Should(Receive(), "Watch must return once its context is done")
	}, SpecTimeout(time.Minute))

	It("reports the expiry of a lease extended to end earlier or later at its new end, and of the leases around it on time", func(ctx SpecContext) {
		b := sc.ownStore(ctx)
		prefix := sc.Key("watch-extended/")
		ends := watchEnds(ctx, b, prefix)
		T, S := sc.TTL(), sc.Config.Slack
		acquire := func(key string, ttl time.Duration) (backend.AcquireRequest, time.Time) {
			GinkgoHelper()
			req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "conformance", Stamp: sc.Stamp()}
			res, err := b.Acquire(ctx, req)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Acquired).To(BeTrue(), "Acquire of free key %q", key)
			return req, time.Now()
		}
		extend := func(req backend.AcquireRequest, ttl time.Duration) (sent, answered time.Time) {
			GinkgoHelper()
			sent = time.Now()
			ext, err := b.Extend(ctx, backend.ExtendRequest{Key: req.Key, OwnerToken: req.OwnerToken, TTL: ttl, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(ext.Extended).To(BeTrue(), "Extend of %q by its holder", req.Key)
			return sent, time.Now()
		}
		type end struct {
			key            string
			ttl            time.Duration
			sent, answered time.Time // of the call that set ttl
			what           string
		}
		check := func(at map[string]endEvent, ends ...end) {
			GinkgoHelper()
			for _, c := range ends {
				Expect(at[c.key].Type).To(Equal(backend.EventExpired), "the end of %s", c.what)
				Expect(at[c.key].at.Sub(c.sent)).To(BeNumerically(">=", c.ttl),
					"the expiry of %s was announced %s after the call that set its TTL of %s", c.what, at[c.key].at.Sub(c.sent), c.ttl)
				Expect(at[c.key].at.Sub(c.answered)).To(BeNumerically("<=", c.ttl+sc.Info.TTLGranularity+S+noticeLag),
					"the expiry of %s was announced %s after the call that set its TTL of %s", c.what, at[c.key].at.Sub(c.answered), c.ttl)
			}
		}

		// A lease of a minute extended to end in T, before a lease then
		// T+3S+L from its end: a backend that announces expiries from a
		// queue must move it forward and wake for it. The marker's end is
		// awaited first so that the extension comes after the store has
		// settled on the other lease as its next end: without that, a
		// store that wakes for each acquisition could pick the extended
		// lease up by chance, and a missing wake-up on Extend would pass.
		earlier, other, marker := prefix+"earlier", prefix+"other", prefix+"marker"
		reqEarlier, _ := acquire(earlier, sc.LongTTL())
		otherSent := time.Now()
		otherTTL := 2*T + 3*S + noticeLag
		_, otherAnswered := acquire(other, otherTTL)
		markerSent := time.Now()
		_, markerAnswered := acquire(marker, T)
		check(ends.await(T+sc.Info.TTLGranularity+S+noticeLag+2*time.Second, marker),
			end{marker, T, markerSent, markerAnswered, "a lease that ends first"})
		earlierSent, earlierAnswered := extend(reqEarlier, T)
		check(ends.await(otherTTL+sc.Info.TTLGranularity+S+noticeLag+2*time.Second, earlier, other),
			end{earlier, T, earlierSent, earlierAnswered, "a lease extended to end earlier"},
			end{other, otherTTL, otherSent, otherAnswered, "a lease that ends after it"})

		// A lease of T extended late in its term to end after a lease of
		// T+3S, by more than L: the queue must move it back, and the lease
		// now first in it must be announced on time.
		later, plain := prefix+"later", prefix+"plain"
		laterSent := time.Now()
		reqLater, _ := acquire(later, T)
		plainSent := time.Now()
		_, plainAnswered := acquire(plain, T+3*S)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(laterSent.Add(T / 2))):
		}
		laterTTL := T + 5*S + noticeLag
		laterExtSent, laterExtAnswered := extend(reqLater, laterTTL)
		check(ends.await(laterTTL+sc.Info.TTLGranularity+S+noticeLag+2*time.Second, later, plain),
			end{later, laterTTL, laterExtSent, laterExtAnswered, "a lease extended to end later"},
			end{plain, T + 3*S, plainSent, plainAnswered, "a lease that the extended one ended before"})
	}, SpecTimeout(time.Minute))

	It("ends the watch of a watcher that stops reading with ErrUnavailable, never blocking writers or skipping events", func(ctx SpecContext) {
		key := sc.Key("watch-slow")
		// The watcher takes no event after synced until gate opens.
		gate := make(chan struct{})
		synced := make(chan struct{})
		var mu sync.Mutex
		var seen []backend.Event
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- sc.Backend.Watch(wctx, key, func(e backend.Event) error {
				if e.Type == backend.EventSynced {
					close(synced)
					return nil
				}
				select {
				case <-gate:
				case <-wctx.Done():
					return wctx.Err()
				}
				mu.Lock()
				seen = append(seen, e)
				mu.Unlock()
				return nil
			})
		}()
		Eventually(synced).WithTimeout(10 * time.Second).Should(BeClosed())

		// Writes go on, each answered promptly, while the watcher reads
		// nothing: enough of them to overflow what a plugin buffers for one
		// watcher (and the transport, on the way), or as many as two
		// seconds allow on a slow store.
		const maxPairs = 5000
		var fences []uint64
		for start := time.Now(); len(fences) < maxPairs && time.Since(start) < 2*time.Second; {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			req, rec := sc.MustAcquire(cctx, key, sc.LongTTL())
			ok, err := sc.Backend.Release(cctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
			ccancel()
			Expect(err).NotTo(HaveOccurred(), "a Release while a watcher does not read")
			Expect(ok).To(BeTrue())
			fences = append(fences, rec.FencingToken)
		}
		close(gate)

		// Then the watcher has either every event, in order, or a watch
		// that ended with ErrUnavailable after an in-order prefix of them.
		var ended error
		Eventually(ctx, func() bool {
			select {
			case ended = <-done:
				return true
			default:
			}
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == 2*len(fences)
		}).WithTimeout(30*time.Second).WithPolling(10*time.Millisecond).Should(BeTrue(),
			"after %d acquire+release pairs, the watcher that did not read neither got every event nor had its watch ended", len(fences))
		mu.Lock()
		got := slices.Clone(seen)
		mu.Unlock()
		if ended != nil {
			Expect(isUnavailable(ended)).To(BeTrue(), "the watch of a watcher that fell behind ended with %v, want ErrUnavailable (the engine then watches again)", ended)
		}
		AddReportEntry("slow watcher", fmt.Sprintf("%d events written, %d delivered, watch ended: %v", 2*len(fences), len(got), ended), ReportEntryVisibilityFailureOrVerbose)
		Expect(len(got)).To(BeNumerically("<=", 2*len(fences)), "more events than changes")
		for i, e := range got {
			want := backend.EventAcquired
			if i%2 == 1 {
				want = backend.EventReleased
			}
			Expect(e.Type).To(Equal(want), "event %d of the watcher that fell behind", i)
			Expect(e.Record.FencingToken).To(Equal(fences[i/2]), "event %d of the watcher that fell behind is not the change made %d-th: an event was skipped", i, i)
		}
	}, SpecTimeout(time.Minute))

	It("announces the end of each of many leases once and on time, whatever order they end in", func(ctx SpecContext) {
		b := sc.ownStore(ctx)
		prefix := sc.Key("watch-many/")
		ends := watchEnds(ctx, b, prefix)
		// Leases whose ends are not in the order of their acquisition, half
		// of them released while the others are being acquired, in yet
		// another order. The rest must each be announced as expired, once,
		// on time; the released ones as released, never as expired too. (A
		// backend that keeps its expiries in a heap, as plugins/memory does,
		// must keep every entry's place in it right through all of that.)
		// Their TTLs are 10ms apart, each rounded up to a multiple of the
		// backend's granularity (a coarser backend rounds them anyway, and
		// announces several at once: each one still once).
		const n = 32
		const step = 10 * time.Millisecond
		endsAs := func(i int) int { return (i * 13) % n } // the i-th acquired ends endsAs(i)-th
		// After each odd-numbered acquisition i, releaseAfter[i] (acquired
		// before it, not the latest) is released. Those leases are long, in
		// the same scrambled order, so that a slow machine's release never
		// comes after the lease ran out: the spec is about ends announced
		// once, not about how fast the loop runs.
		releaseAfter := map[int]int{}
		released := map[int]bool{}
		for i := 1; i < n; i += 2 {
			j := (i * 7) % (i + 1)
			for released[j] {
				j = (j + 1) % (i + 1)
			}
			released[j] = true
			releaseAfter[i] = j
		}
		ttlOf := func(i int) time.Duration {
			base := sc.TTL()
			if released[i] {
				base = sc.LongTTL()
			}
			ttl := base + time.Duration(endsAs(i))*step
			if g := sc.Info.TTLGranularity; g > 0 {
				ttl = (ttl + g - 1).Truncate(g)
			}
			return clampTTL(ttl, sc.Info.MinTTL, sc.Info.MaxTTL)
		}
		type lease struct {
			req      backend.AcquireRequest
			fence    uint64
			answered time.Time
		}
		leases := make([]lease, n)
		var keys []string
		for i := range n {
			req := backend.AcquireRequest{Key: fmt.Sprintf("%s%d", prefix, i), OwnerToken: sc.Token(),
				TTL: ttlOf(i), Holder: "conformance", Stamp: sc.Stamp()}
			res, err := b.Acquire(ctx, req)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Acquired).To(BeTrue(), "Acquire of free key %q", req.Key)
			leases[i] = lease{req, res.Record.FencingToken, time.Now()}
			keys = append(keys, req.Key)
			if j, due := releaseAfter[i]; due {
				ok, err := b.Release(ctx, backend.ReleaseRequest{Key: leases[j].req.Key, OwnerToken: leases[j].req.OwnerToken, Stamp: sc.Stamp()})
				Expect(err).NotTo(HaveOccurred())
				Expect(ok).To(BeTrue())
			}
		}
		var longest time.Duration // of the leases that must expire
		for i := range n {
			if !released[i] {
				longest = max(longest, ttlOf(i))
			}
		}
		at := ends.await(longest+sc.Info.TTLGranularity+sc.Config.Slack+noticeLag+2*time.Second, keys...)
		// A second end of any of them would come by now.
		ends.quiet(sc.Config.Slack)
		for i, l := range leases {
			want := backend.EventExpired
			if released[i] {
				want = backend.EventReleased
			}
			e := at[l.req.Key]
			Expect(e.Type).To(Equal(want), "lease %d (%s)", i, l.req.Key)
			Expect(e.Record.FencingToken).To(Equal(l.fence), "lease %d (%s)", i, l.req.Key)
			if want == backend.EventExpired {
				Expect(e.at.Sub(l.answered)).To(BeNumerically("<=", l.req.TTL+sc.Info.TTLGranularity+sc.Config.Slack+noticeLag),
					"lease %d (TTL %s) was announced expired %s after its acquisition", i, l.req.TTL, e.at.Sub(l.answered))
			}
		}
	}, SpecTimeout(time.Minute))
})

// noticeLag is how much later than a lease's end (TTL + granularity +
// slack) its EventExpired may come: the lock is free on time, but a store
// that expires keys in a background cycle announces it late (Redis samples
// keys with a TTL ten times a second), and the engine wakes its waiters by
// its own timer meanwhile. The watch specs that time announcements allow
// it, and are built so that an expiry announced late by a misplaced queue
// entry comes later still.
const noticeLag = time.Second

// ownStore is a plugin instance of the spec's own, started for it and closed
// when it ends, so that no other spec's locks are in its store (for a
// backend whose store is its process; a shared one is the same store), or
// the plugin under test on a single-instance store.
func (sc *BackendContext) ownStore(ctx context.Context) backend.Backend {
	GinkgoHelper()
	if sc.Config.SingleInstance {
		return sc.Backend
	}
	p, err := sc.StartPlugin(ctx)
	Expect(err).NotTo(HaveOccurred(), "starting a plugin instance for the spec")
	DeferCleanup(p.Close)
	return p
}

// endEvent is the end of a lease as a watch reported it, and when.
type endEvent struct {
	backend.Event
	at time.Time
}

// leaseEnds collects the end events (released, expired) of a watch, each
// with the time it arrived.
type leaseEnds struct {
	events chan endEvent
	done   chan error
	got    map[string]endEvent
}

// watchEnds watches prefix on b for the rest of the spec, once synced.
func watchEnds(ctx context.Context, b backend.Backend, prefix string) *leaseEnds {
	GinkgoHelper()
	l := &leaseEnds{events: make(chan endEvent, 1024), done: make(chan error, 1), got: map[string]endEvent{}}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		l.done <- b.Watch(wctx, prefix, func(e backend.Event) error {
			select {
			case l.events <- endEvent{e, time.Now()}:
				return nil
			default:
				return fmt.Errorf("conformance: watch buffer full")
			}
		})
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(l.done).WithTimeout(5 * time.Second).Should(Receive())
	})
	select {
	case e := <-l.events:
		Expect(e.Type).To(Equal(backend.EventSynced), "the first event must be synced")
	case err := <-l.done:
		Fail(fmt.Sprintf("Watch returned: %v", err))
	case <-time.After(10 * time.Second):
		Fail("no synced event within 10s")
	}
	return l
}

// take records one event; a second end of a key's lease fails the spec.
func (l *leaseEnds) take(e endEvent) {
	GinkgoHelper()
	if e.Type != backend.EventReleased && e.Type != backend.EventExpired {
		return
	}
	if first, ok := l.got[e.Record.Key]; ok && first.Record.FencingToken == e.Record.FencingToken {
		Fail(fmt.Sprintf("the lease on %q (fencing token %d) ended twice: %s, then %s", e.Record.Key, e.Record.FencingToken, first.Type, e.Type))
	}
	l.got[e.Record.Key] = e
}

// await returns once every key's lease has ended, within the time given.
func (l *leaseEnds) await(within time.Duration, keys ...string) map[string]endEvent {
	GinkgoHelper()
	deadline := time.After(within)
	for {
		var missing []string
		for _, k := range keys {
			if _, ok := l.got[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return l.got
		}
		select {
		case e := <-l.events:
			l.take(e)
		case err := <-l.done:
			Fail(fmt.Sprintf("Watch returned early: %v", err))
		case <-deadline:
			Fail(fmt.Sprintf("no end announced within %s for %d leases: %v", within, len(missing), missing))
		}
	}
}

// quiet takes the events of the next d, failing on a second end of a lease.
func (l *leaseEnds) quiet(d time.Duration) {
	GinkgoHelper()
	deadline := time.After(d)
	for {
		select {
		case e := <-l.events:
			l.take(e)
		case <-deadline:
			return
		}
	}
}
