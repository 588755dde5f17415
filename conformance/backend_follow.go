package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Follow (backend.FollowBackend) is how the engine hears of only the keys
// its waiters and watchers need. backendserver serves it for every backend,
// so a plugin built with this version always passes through it; an older
// plugin answers errors.ErrUnsupported and the engine watches instead.
var _ = describeBackend("follow", Label("follow"), func(sc *BackendContext) {
	It("sends the changes of followed keys and prefixes, and only those, and every key's expiry", func(ctx SpecContext) {
		f, ok := sc.Backend.(backend.FollowBackend)
		if !ok {
			Skip("the plugin host does not offer Follow")
		}
		key := sc.Key("follow-key")
		prefix := sc.Key("follow-prefix/")
		other := sc.Key("follow-other")
		expiring := sc.Key("follow-expiring")
		// Every key's expiry may be sent, so a lease another spec left
		// to run out can be heard here; only this spec's keys are judged.
		mine := func(k string) bool {
			return k == key || k == other || k == expiring || strings.HasPrefix(k, prefix)
		}

		events := make(chan backend.Event, 256)
		changes := make(chan backend.FollowChange)
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			done <- f.Follow(fctx, changes, func(e backend.Event) error {
				select {
				case events <- e:
					return nil
				default:
					return errors.New("conformance: follow buffer full")
				}
			})
		}()
		nextWithin := func(d time.Duration) backend.Event {
			GinkgoHelper()
			timeout := time.After(d)
			for {
				select {
				case e := <-events:
					if e.Type == backend.EventExpired && !mine(e.Record.Key) {
						continue
					}
					return e
				case err := <-done:
					if errors.Is(err, errors.ErrUnsupported) {
						Skip("the plugin does not serve Follow (built before it): the engine watches every key instead")
					}
					Fail(fmt.Sprintf("Follow returned early: %v", err))
				case <-timeout:
					Fail(fmt.Sprintf("no Follow event within %v", d))
				}
				return backend.Event{}
			}
		}
		next := func() backend.Event {
			GinkgoHelper()
			return nextWithin(10 * time.Second)
		}
		change := func(c backend.FollowChange) {
			GinkgoHelper()
			applied := make(chan struct{})
			c.Applied = func() { close(applied) }
			select {
			case changes <- c:
			case err := <-done:
				Fail(fmt.Sprintf("Follow returned before taking a change: %v", err))
			}
			select {
			case <-applied:
			case err := <-done:
				Fail(fmt.Sprintf("Follow returned before applying a change: %v", err))
			case <-time.After(10 * time.Second):
				Fail("a change was not applied within 10s")
			}
		}
		// cycle takes and gives back key; when followed, its two events
		// must come next, in that order.
		cycle := func(k string, followed bool) {
			GinkgoHelper()
			req, rec := sc.MustAcquire(ctx, k, sc.LongTTL())
			released, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: k, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
			Expect(err).NotTo(HaveOccurred())
			Expect(released).To(BeTrue())
			if !followed {
				return
			}
			for _, want := range []backend.EventType{backend.EventAcquired, backend.EventReleased} {
				e := next()
				Expect(e.Record.Key).To(Equal(k), "an event (%v) of %q came before those of the followed %q: only followed keys' changes may be sent", e.Type, e.Record.Key, k)
				Expect(e.Type).To(Equal(want))
				Expect(e.Record.FencingToken).To(Equal(rec.FencingToken))
			}
		}

		Expect(next().Type).To(Equal(backend.EventSynced), "the first event must be synced")
		change(backend.FollowChange{Keys: []string{key}, Prefixes: []string{prefix}})
		// Each unfollowed change is ordered before a followed one: sent, it
		// would arrive first.
		cycle(other, false)
		cycle(key, true)
		cycle(prefix+"a", true)

		change(backend.FollowChange{DropKeys: []string{key}, DropPrefixes: []string{prefix}, Keys: []string{other}})
		cycle(key, false)
		cycle(prefix+"c", false)
		cycle(other, true)

		// Expiries are the exception: every key's is sent, followed or
		// not (the server counts the leases that ran out).
		_, rec := sc.MustAcquire(ctx, expiring, sc.TTL())
		e := nextWithin(sc.FreeWithin() + noticeLag + 2*time.Second)
		Expect(e.Record.Key).To(Equal(expiring), "an event (%v) of %q came before the expiry of the unfollowed %q", e.Type, e.Record.Key, expiring)
		Expect(e.Type).To(Equal(backend.EventExpired), "the acquisition of an unfollowed key must not be sent, its expiry must")
		Expect(e.Record.FencingToken).To(Equal(rec.FencingToken))

		cancel()
		Eventually(done).WithTimeout(5*time.Second).Should(Receive(BeNil()), "Follow must return nil once its context is done")
	}, SpecTimeout(time.Minute))
})
