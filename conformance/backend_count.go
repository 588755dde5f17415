package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Counting (backend.CountBackend, optional): Count is every lease held, a
// semaphore's grants each once, as a List page counts them, and on a
// shared backend every plugin instance's leases. The server's
// holdfast_locks_held gauge reads it; a backend whose Count answers
// errors.ErrUnsupported (the plugin host's answer when the plugin does not
// serve the call) is listed instead, and the spec does not apply to it.
var _ = describeBackend("count", Label("count"), func(sc *BackendContext) {
	It("counts a held lease and each grant of a semaphore once, and a released lease no more", func(ctx SpecContext) {
		// The leases are taken through acquirer and counted through
		// counter. A backend whose store is its process's gets an instance
		// of the spec's own for both, holding no other spec's leases, so
		// its counts are exact. A shared store is counted through a second
		// instance (as another server's gauge counts it), and leases of
		// earlier specs may run out between two counts: the spec compares
		// differences, and tries again when one is off.
		acquirer, counter, attempts := sc.Backend, sc.Backend, 5
		switch {
		case sc.Info.Shared:
			counter = sc.ownStore(ctx)
		case !sc.Config.SingleInstance:
			acquirer = sc.ownStore(ctx)
			counter, attempts = acquirer, 1
		}
		cb, ok := counter.(backend.CountBackend)
		if !ok {
			Skip("the plugin host does not offer Count")
		}
		count := func() int64 {
			GinkgoHelper()
			n, err := cb.Count(ctx)
			if errors.Is(err, errors.ErrUnsupported) {
				Skip("the backend does not count its leases (Count answers unsupported): the server lists it for holdfast_locks_held")
			}
			Expect(err).NotTo(HaveOccurred(), "Count")
			return n
		}
		semaphores := sc.Info.Keeps(backend.KindSemaphore)
		type lease struct{ key, token string }
		take := func(req backend.AcquireRequest) lease {
			GinkgoHelper()
			res, err := acquirer.Acquire(ctx, req)
			Expect(err).NotTo(HaveOccurred(), "Acquire %q (%s)", req.Key, req.Kind)
			Expect(res.Acquired).To(BeTrue(), "Acquire of %d permits of free %q (%s) refused: %+v", req.Permits, req.Key, req.Kind, res.Record)
			return lease{req.Key, req.OwnerToken}
		}
		release := func(ls ...lease) {
			GinkgoHelper()
			for _, l := range ls {
				ok, err := acquirer.Release(ctx, backend.ReleaseRequest{Key: l.key, OwnerToken: l.token, Stamp: sc.Stamp()})
				Expect(err).NotTo(HaveOccurred(), "Release %q", l.key)
				Expect(ok).To(BeTrue(), "the release of a lease held on %q answered false", l.key)
			}
		}
		// step counts before and after do (after which the spec holds
		// holding leases) and says how the count moved when not by want.
		step := func(what string, want int64, holding int, do func()) error {
			GinkgoHelper()
			before := count()
			do()
			after := count()
			Expect(after).To(BeNumerically(">=", holding), "Count after %s: below the %d leases the spec holds", what, holding)
			if after-before != want {
				return fmt.Errorf("%s: Count went from %d to %d, want %+d", what, before, after, want)
			}
			return nil
		}
		attempt := func() error {
			var m, g1, g2 lease
			err := step("a lock taken", 1, 1, func() {
				m = take(backend.AcquireRequest{Key: sc.Key("count-mutex"), OwnerToken: sc.Token(), TTL: sc.LongTTL(),
					Holder: "conformance", Stamp: sc.Stamp()})
			})
			if err != nil || !semaphores {
				if err == nil {
					err = step("the lock released", -1, 0, func() { release(m) })
				} else {
					release(m)
				}
				return err
			}
			sem := sc.Key("count-semaphore")
			if err := step("two grants of a semaphore (1 and 2 permits of 3)", 2, 3, func() {
				g1 = take(sc.Grant(sem, backend.KindSemaphore, 3, 1, sc.LongTTL()))
				g2 = take(sc.Grant(sem, backend.KindSemaphore, 3, 2, sc.LongTTL()))
			}); err != nil {
				release(m, g1, g2)
				return err
			}
			if err := step("a grant released", -1, 2, func() { release(g1) }); err != nil {
				release(m, g2)
				return err
			}
			return step("the other grant and the lock released", -2, 0, func() { release(g2, m) })
		}
		var errs []error
		for range attempts {
			err := attempt()
			if err == nil {
				if len(errs) > 0 {
					AddReportEntry("counts changed by other leases meanwhile", errors.Join(errs...).Error(), ReportEntryVisibilityFailureOrVerbose)
				}
				return
			}
			errs = append(errs, err)
		}
		Fail(fmt.Sprintf("Count did not follow the spec's leases in %d attempts: %v", attempts, errors.Join(errs...)))
	}, SpecTimeout(time.Minute))
})
