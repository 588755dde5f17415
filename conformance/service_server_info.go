package conformance

import (
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 8: GetServerInfo is honest about sharing.
var _ = describeService("server info", Label("server-info", "sharing"), func(sc *ServiceContext) {
	It("reports the backend's facts, as the server's start-up line does", func(ctx SpecContext) {
		info, err := sc.RPC.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(info.GetVersion()).NotTo(BeEmpty())
		b := info.GetBackend()
		Expect(b.GetName()).NotTo(BeEmpty())
		Expect(info.GetServerStamp()).NotTo(BeNil())
		if hi := b.GetMaxTtl().AsDuration(); hi > 0 {
			Expect(hi).To(BeNumerically(">=", b.GetMinTtl().AsDuration()))
		}
		if s := sc.Server(); s != nil {
			Expect(b.GetShared()).To(Equal(s.Shared), "GetServerInfo and the start-up line disagree on shared")
			Expect(b.GetDurable()).To(Equal(s.Durable), "GetServerInfo and the start-up line disagree on durable")
		}
	}, SpecTimeout(30*time.Second))

	It("behaves as shared or not shared, as it says, with a second server on the same backend", func(ctx SpecContext) {
		if sc.Config.SingleInstance {
			Skip("Config.SingleInstance: the store allows one server at a time (the spec 'refuses a second server' checks that)")
		}
		second, err := sc.SecondURL(ctx)
		Expect(err).NotTo(HaveOccurred())
		if second == "" {
			Skip("no second server (Config.SecondAddr / --second-addr, or Config.Serve)")
		}
		rpc2 := sc.RPCFor(second)
		info2, err := rpc2.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(info2.GetBackend().GetShared()).To(Equal(sc.Backend().GetShared()), "two servers on one backend configuration disagree on shared")

		key := sc.Key("honesty")
		l := sc.MustAcquire(ctx, key, sc.LongTTL())
		res, err := sc.Acquire(ctx, rpc2, key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		if sc.Backend().GetShared() {
			Expect(res.GetAcquired()).To(BeFalse(), "the backend says shared=true, yet a second server granted a held lock")
			Expect(res.GetCurrent().GetFencingToken()).To(Equal(l.GetFencingToken()))
		} else {
			Expect(res.GetAcquired()).To(BeTrue(), "the backend says shared=false, yet a second server sees the first one's lock")
		}
	}, SpecTimeout(30*time.Second))

	It("refuses a second server on a single-instance store while the first runs, and the first keeps its locks", func(ctx SpecContext) {
		if !sc.Config.SingleInstance {
			Skip("no Config.SingleInstance (--single-instance): the store allows several owners")
		}
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot start a second one (use Config.Serve)")
		}
		key := sc.Key("single-instance")
		l := sc.MustAcquire(ctx, key, sc.LongTTL())
		s, err := sc.startServer(ctx)
		if err == nil {
			Expect(s.Stop(0)).To(Succeed())
		}
		Expect(err).To(HaveOccurred(), "a second server started on a store that allows one owner")
		AddReportEntry("why the second server did not start", err.Error(), ReportEntryVisibilityFailureOrVerbose)
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred(), "the first server after a second one was refused")
		Expect(ins.GetHeld()).To(BeTrue(), "the lock is gone after a second server was refused")
		Expect(ins.GetState().GetFencingToken()).To(Equal(l.GetFencingToken()))
		Expect(sc.Release(ctx, key, l.GetOwnerToken())).To(BeTrue(), "the owner token no longer holds after a second server was refused")
	}, SpecTimeout(time.Minute))
})
