package conformance

import (
	"context"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// observeOn opens Observe on key through rpc; its messages come on the
// channel, then its end. Cancel ctx to close it.
func observeOn(ctx context.Context, rpc lockv1connect.LockServiceClient, key string) <-chan observed {
	out := make(chan observed, 64)
	go func() {
		defer GinkgoRecover()
		s, err := rpc.Observe(ctx, &lockv1.ObserveRequest{Key: key})
		if err != nil {
			out <- observed{err: err}
			return
		}
		defer s.Close()
		for s.Receive() {
			out <- observed{msg: s.Msg()}
		}
		out <- observed{err: s.Err()}
	}()
	return out
}

// An election across two servers sharing a backend: waking a campaigner and
// telling observers both come from the store's change feed, not from the
// server where the change was made.
var _ = describeService("election sharing", Label("election", "sharing"), func(sc *ServiceContext) {
	var second lockv1connect.LockServiceClient
	BeforeEach(func(ctx SpecContext) {
		if !sc.hasKind(lockv1.Kind_KIND_ELECTION) {
			Skip("the backend does not list KIND_ELECTION in BackendInfo.kinds")
		}
		if !sc.Backend().GetShared() {
			Skip("the backend declares shared=false: there is no second server on the same elections")
		}
		url, err := sc.SecondURL(ctx)
		Expect(err).NotTo(HaveOccurred())
		if url == "" {
			Skip("no second server (Config.SecondAddr / --second-addr, or Config.Serve)")
		}
		second = sc.RPCFor(url)
	})

	It("elects a campaigner waiting on another server once the leader resigns", Label("waiting"), func(ctx SpecContext) {
		key := sc.Key("shared-campaign")
		first := sc.MustGrant(ctx, sc.CampaignRequest(key, "first", sc.LongTTL(), 0))
		// The leadership is held for a long TTL: only the resignation's
		// event, through the store, can elect the campaigner in its wait.
		campaign := acquireAsync(ctx, second, sc.CampaignRequest(key, "second", sc.LongTTL(), 30*time.Second))
		Eventually(ctx, func() uint32 {
			ins, err := second.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			Expect(err).NotTo(HaveOccurred())
			return ins.GetState().GetWaiters()
		}).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).Should(Equal(uint32(1)), "the campaigner never queued on the second server")
		resigned := time.Now()
		Expect(sc.Release(ctx, key, first.GetOwnerToken())).To(BeTrue(), "the leader's resignation")
		var won *lockv1.AcquireResponse
		Eventually(campaign).WithTimeout(20*time.Second).Should(Receive(&won), "the campaigner on the second server was not elected")
		GinkgoWriter.Printf("campaigner on server 2 elected %s after the leader on server 1 resigned\n", time.Since(resigned))
		Expect(won).NotTo(BeNil(), "the campaign failed")
		Expect(won.GetAcquired()).To(BeTrue(), "the campaign ended without leadership: %v", won.GetCurrent())
		Expect(won.GetLease().GetFencingToken()).To(BeNumerically(">", first.GetFencingToken()), "the new leader's term is not above the last")
		Expect(won.GetLease().GetValue()).To(Equal("second"))
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetFencingToken()).To(Equal(won.GetLease().GetFencingToken()), "the first server does not see the new leader")
		Expect(ins.GetState().GetHolders()).To(HaveLen(1))
		Expect(ins.GetState().GetHolders()[0].GetValue()).To(Equal("second"), "the first server does not see the new leader's value")
		rel, err := second.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: won.GetLease().GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue())
	}, SpecTimeout(time.Minute))

	It("shows an Observe on another server every leader and every proclaim", func(ctx SpecContext) {
		key := sc.Key("shared-observe")
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		// next reads the next Observe message from the second server: the
		// leader of term and value, or (term 0) none.
		observer := observeOn(octx, second, key)
		next := func(term uint64, value string) {
			GinkgoHelper()
			var o observed
			Eventually(observer).WithTimeout(10*time.Second).Should(Receive(&o), "no Observe message on the second server (want term %d %q)", term, value)
			Expect(o.err).NotTo(HaveOccurred(), "Observe on the second server ended")
			if term == 0 {
				Expect(o.msg.GetLeader()).To(BeNil(), "a leader where there is none")
				return
			}
			Expect(o.msg.GetLeader().GetTerm()).To(Equal(term), "the leader's term seen on the second server")
			Expect(o.msg.GetLeader().GetValue()).To(Equal(value), "the leader's value seen on the second server")
		}
		next(0, "")
		first := sc.MustGrant(ctx, sc.CampaignRequest(key, "first", sc.LongTTL(), 0))
		next(first.GetFencingToken(), "first")
		for _, v := range []string{"first, moved", "first, again"} {
			sent := time.Now()
			res, err := sc.RPC.Proclaim(ctx, &lockv1.ProclaimRequest{Key: key, OwnerToken: first.GetOwnerToken(), Value: v})
			answered := time.Since(sent)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.GetProclaimed()).To(BeTrue(), "the leader's proclaim on the first server")
			next(first.GetFencingToken(), v)
			GinkgoWriter.Printf("proclaim on server 1 answered in %s, seen by Observe on server 2 after %s\n", answered, time.Since(sent))
		}
		Expect(sc.Release(ctx, key, first.GetOwnerToken())).To(BeTrue())
		next(0, "")
		again := sc.MustGrant(ctx, sc.CampaignRequest(key, "again", sc.LongTTL(), 0))
		next(again.GetFencingToken(), "again")
		Expect(sc.Release(ctx, key, again.GetOwnerToken())).To(BeTrue())
		next(0, "")
	}, SpecTimeout(time.Minute))
})
