package conformance

import (
	"fmt"
	"syscall"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 4 at the API.
var _ = describeService("fencing", Label("fencing"), func(sc *ServiceContext) {
	It("increases strictly through release, expiry and takeover", func(ctx SpecContext) {
		key := sc.Key("fencing")
		l1 := sc.MustAcquire(ctx, key, sc.LongTTL())
		Expect(sc.Release(ctx, key, l1.GetOwnerToken())).To(BeTrue())
		l2 := sc.MustAcquire(ctx, key, sc.TTL())
		Expect(l2.GetFencingToken()).To(BeNumerically(">", l1.GetFencingToken()), "after release")
		l3, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(l3.GetFencingToken()).To(BeNumerically(">", l2.GetFencingToken()), "after expiry and takeover")
	}, SpecTimeout(30*time.Second))

	It("keeps increasing across a restart of the server", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot restart it (use Config.Serve)")
		}
		s1, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		key := sc.Key("fencing-restart")
		res, err := sc.Acquire(ctx, sc.RPCFor(s1.URL), key, sc.TTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		before := res.GetLease().GetFencingToken()
		Expect(s1.Stop(0)).To(Succeed(), "graceful stop")

		s2, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		var after uint64
		Eventually(ctx, func(g Gomega) {
			res, err := sc.Acquire(ctx, sc.RPCFor(s2.URL), key, sc.LongTTL(), 0)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.GetAcquired()).To(BeTrue())
			after = res.GetLease().GetFencingToken()
		}).WithTimeout(sc.FreeWithin() + 5*time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
		Expect(after).To(BeNumerically(">", before), "fencing token went from %d to %d across a server restart", before, after)
	}, SpecTimeout(time.Minute))

	It("keeps increasing after kill -9 of the server's plugin, which answers unavailable until it is back", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot kill its plugin (use Config.Serve)")
		}
		s, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		pid, err := childPID(s.PID())
		if err != nil {
			Skip("cannot find the server's plugin process: " + err.Error())
		}
		rpc := sc.RPCFor(s.URL)
		key := sc.Key("fencing-plugin-kill")
		res, err := sc.Acquire(ctx, rpc, key, sc.TTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		before := res.GetLease().GetFencingToken()

		Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		var after uint64
		Eventually(ctx, func(g Gomega) {
			res, err := sc.Acquire(ctx, rpc, key, sc.LongTTL(), 0)
			if err != nil && codeOf(err) != connect.CodeUnavailable {
				StopTrying(fmt.Sprintf("while the plugin restarts the server must answer unavailable, got %v", err)).Now()
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.GetAcquired()).To(BeTrue())
			after = res.GetLease().GetFencingToken()
		}).WithTimeout(sc.Config.RestartTimeout + sc.FreeWithin()).WithPolling(10 * time.Millisecond).Should(Succeed())
		Expect(after).To(BeNumerically(">", before), "fencing token went from %d to %d across a plugin restart", before, after)
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("keeps a held lock through a graceful restart of the server when the store outlives it", Label("disruptive", "durable"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot restart it (use Config.Serve)")
		}
		b := sc.Backend()
		if !b.GetDurable() && !b.GetShared() {
			Skip("the backend declares shared=false and durable=false: its locks live and die with the server")
		}
		s1, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		key := sc.Key("server-restart")
		res, err := sc.Acquire(ctx, sc.RPCFor(s1.URL), key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		lease := res.GetLease()
		// A graceful stop must not release what its clients hold.
		Expect(s1.Stop(0)).To(Succeed())

		s2, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		rpc := sc.RPCFor(s2.URL)
		ins, err := rpc.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue(), "the lock did not survive a graceful server restart")
		Expect(ins.GetState().GetFencingToken()).To(Equal(lease.GetFencingToken()))
		rel, err := rpc.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: lease.GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue(), "the owner token no longer holds after the restart")
		Expect(s2.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))
})
