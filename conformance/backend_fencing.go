package conformance

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 4: fencing tokens strictly increase per key over every acquisition.
var _ = describeBackend("fencing", Label("fencing"), func(sc *BackendContext) {
	It("increases strictly through release, expiry and takeover", func(ctx SpecContext) {
		key := sc.Key("fencing")
		req1, r1 := sc.MustAcquire(ctx, key, sc.LongTTL())
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req1.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())

		_, r2 := sc.MustAcquire(ctx, key, sc.TTL())
		Expect(r2.FencingToken).To(BeNumerically(">", r1.FencingToken), "after release")

		_, r3, _, _, err := sc.AwaitFree(ctx, key, sc.TTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(r3.FencingToken).To(BeNumerically(">", r2.FencingToken), "after expiry and takeover")

		_, r4, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(r4.FencingToken).To(BeNumerically(">", r3.FencingToken), "after a second expiry and takeover")
	}, SpecTimeout(30*time.Second))

	It("keeps increasing after kill -9 of the plugin and its restart by the host", Label("disruptive"), func(ctx SpecContext) {
		key := sc.Key("fencing-kill")
		req, before := sc.MustAcquire(ctx, key, sc.TTL())
		_, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		_, last := sc.MustAcquire(ctx, key, sc.TTL())
		Expect(last.FencingToken).To(BeNumerically(">", before.FencingToken))

		pid := killPlugin(ctx, sc)
		rec := awaitAcquireAfterRestart(ctx, sc, key)
		Expect(rec.FencingToken).To(BeNumerically(">", last.FencingToken),
			"fencing token went from %d before kill -9 to %d after the restart", last.FencingToken, rec.FencingToken)
		Expect(sc.PluginPID()).NotTo(Equal(pid), "the host did not restart the plugin")
	}, SpecTimeout(time.Minute))
})

// Durability: a durable backend keeps locks through a plugin restart.
var _ = describeBackend("durability", Label("durable"), func(sc *BackendContext) {
	It("keeps a held lock, its owner token and fencing token through kill -9 of the plugin", Label("disruptive"), func(ctx SpecContext) {
		if !sc.Info.Durable {
			Skip("the backend declares durable=false: locks are not expected to survive a restart")
		}
		key := sc.Key("durable")
		req, rec := sc.MustAcquire(ctx, key, sc.LongTTL())
		killPlugin(ctx, sc)
		var got backend.Record
		Eventually(ctx, func(g Gomega) {
			r, held, err := sc.Backend.Get(ctx, key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(held).To(BeTrue(), "the lock is gone after the restart")
			got = r
		}).WithTimeout(sc.Config.RestartTimeout).WithPolling(20 * time.Millisecond).Should(Succeed())
		Expect(got.FencingToken).To(Equal(rec.FencingToken))
		ok, err := sc.Backend.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the owner token no longer holds after the restart")
	}, SpecTimeout(time.Minute))
})

// killPlugin sends SIGKILL to the running plugin process and returns its PID.
func killPlugin(ctx context.Context, sc *BackendContext) int {
	GinkgoHelper()
	pid := sc.PluginPID()
	Expect(pid).To(BeNumerically(">", 0), "the plugin host reports no PID")
	Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
	// Wait until the process is really gone, so calls after this point
	// cannot reach the old instance.
	Eventually(ctx, func() error { return syscall.Kill(pid, 0) }).
		WithTimeout(10 * time.Second).WithPolling(5 * time.Millisecond).Should(MatchError(syscall.ESRCH))
	return pid
}

// awaitAcquireAfterRestart acquires key once the host has restarted the
// plugin. Until then, every error must be ErrUnavailable.
func awaitAcquireAfterRestart(ctx context.Context, sc *BackendContext, key string) backend.Record {
	GinkgoHelper()
	var rec backend.Record
	Eventually(ctx, func(g Gomega) {
		_, res, err := sc.Acquire(ctx, key, sc.LongTTL())
		if err != nil && !isUnavailable(err) {
			StopTrying(fmt.Sprintf("while the plugin restarts, calls must fail with ErrUnavailable, got %v", err)).Now()
		}
		g.Expect(err).NotTo(HaveOccurred())
		if !res.Acquired {
			// A durable backend still has the TTL lease from before the kill.
			g.Expect(res.Acquired).To(BeTrue(), "still held: %+v", res.Record)
		}
		rec = res.Record
	}).WithTimeout(sc.Config.RestartTimeout + sc.FreeWithin()).WithPolling(20 * time.Millisecond).Should(Succeed())
	return rec
}
