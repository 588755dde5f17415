package conformance

import (
	"context"
	"fmt"
	"strings"
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
})
