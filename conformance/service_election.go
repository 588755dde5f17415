package conformance

import (
	"context"
	"strings"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// CampaignRequest is an Acquire of the election key with value, waiting for
// at most wait.
func (sc *ServiceContext) CampaignRequest(key, value string, ttl, wait time.Duration) *lockv1.AcquireRequest {
	req := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl), Holder: "conformance", Kind: lockv1.Kind_KIND_ELECTION, Value: value}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return req
}

// observed is one Observe message, or the stream's end.
type observed struct {
	msg *lockv1.ObserveResponse
	err error
}

// observeKey opens Observe on key; its messages come on the channel, then
// its end. Cancel ctx to close it.
func (sc *ServiceContext) observeKey(ctx context.Context, key string) <-chan observed {
	out := make(chan observed, 64)
	go func() {
		defer GinkgoRecover()
		s, err := sc.RPC.Observe(ctx, &lockv1.ObserveRequest{Key: key})
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

// Elections through the API: a campaign is an Acquire of KIND_ELECTION,
// the term its fencing token, Proclaim the leader's compare-and-set of its
// value, Observe the stream of leaders.
var _ = describeService("election", Label("election"), func(sc *ServiceContext) {
	BeforeEach(func() {
		if !sc.hasKind(lockv1.Kind_KIND_ELECTION) {
			Skip("the backend does not list KIND_ELECTION in BackendInfo.kinds")
		}
	})
	proclaim := func(ctx context.Context, key, token, value string) *lockv1.ProclaimResponse {
		GinkgoHelper()
		res, err := sc.RPC.Proclaim(ctx, &lockv1.ProclaimRequest{Key: key, OwnerToken: token, Value: value})
		Expect(err).NotTo(HaveOccurred(), "Proclaim %q", key)
		return res
	}
	// expectLeader reads the next message: a leader of term and value, or
	// (term 0) no leader.
	expectLeader := func(ch <-chan observed, term uint64, value string) {
		GinkgoHelper()
		var o observed
		Eventually(ch).WithTimeout(10*time.Second).Should(Receive(&o), "no Observe message (want term %d %q)", term, value)
		Expect(o.err).NotTo(HaveOccurred(), "Observe ended")
		l := o.msg.GetLeader()
		Expect(o.msg.GetServerStamp()).NotTo(BeNil(), "a message without a server stamp")
		if term == 0 {
			Expect(l).To(BeNil(), "a leader where there is none: %v", l)
			return
		}
		Expect(l).NotTo(BeNil(), "no leader, want term %d %q", term, value)
		Expect(l.GetTerm()).To(Equal(term), "the leader's term")
		Expect(l.GetValue()).To(Equal(value), "the leader's value")
		Expect(l.GetHolder()).To(Equal("conformance"))
		Expect(l.GetExpiresAt()).NotTo(BeNil())
	}

	It("streams the current leader first, then each change in order, never the same twice in a row", func(ctx SpecContext) {
		key := sc.Key("observe")
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := sc.observeKey(octx, key)
		expectLeader(ch, 0, "")

		a := sc.MustGrant(ctx, sc.CampaignRequest(key, "a1", sc.LongTTL(), 0))
		expectLeader(ch, a.GetFencingToken(), "a1")
		// A renewal and a proclaim of the value it has are no news.
		ext, err := sc.RPC.Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: a.GetOwnerToken(), Ttl: durationpb.New(sc.LongTTL())})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.GetExtended()).To(BeTrue())
		Expect(proclaim(ctx, key, a.GetOwnerToken(), "a1").GetProclaimed()).To(BeTrue())
		Expect(proclaim(ctx, key, a.GetOwnerToken(), "a2").GetProclaimed()).To(BeTrue())
		expectLeader(ch, a.GetFencingToken(), "a2")
		Expect(sc.Release(ctx, key, a.GetOwnerToken())).To(BeTrue())
		expectLeader(ch, 0, "")
		b := sc.MustGrant(ctx, sc.CampaignRequest(key, "b1", sc.LongTTL(), 0))
		Expect(b.GetFencingToken()).To(BeNumerically(">", a.GetFencingToken()), "terms go back")
		expectLeader(ch, b.GetFencingToken(), "b1")

		// A second observer starts with the leader of now.
		ch2 := sc.observeKey(octx, key)
		expectLeader(ch2, b.GetFencingToken(), "b1")
		Expect(sc.Release(ctx, key, b.GetOwnerToken())).To(BeTrue())
		expectLeader(ch, 0, "")
		expectLeader(ch2, 0, "")
	}, SpecTimeout(time.Minute))

	It("streams no leader once the leader's TTL runs out, then the next leader's higher term", func(ctx SpecContext) {
		key := sc.Key("observe-expiry")
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := sc.observeKey(octx, key)
		expectLeader(ch, 0, "")
		a := sc.MustGrant(ctx, sc.CampaignRequest(key, "short", sc.TTL(), 0))
		expectLeader(ch, a.GetFencingToken(), "short")
		waiting := acquireAsync(ctx, sc.RPC, sc.CampaignRequest(key, "next", sc.LongTTL(), sc.FreeWithin()+5*time.Second))
		// The expiry may be seen as no leader, or straight away as the
		// waiting campaigner's leadership: never the stalled leader again.
		var o observed
		Eventually(ch).WithTimeout(sc.FreeWithin() + 5*time.Second).Should(Receive(&o))
		Expect(o.err).NotTo(HaveOccurred())
		if o.msg.GetLeader() == nil {
			Eventually(ch).WithTimeout(10 * time.Second).Should(Receive(&o))
			Expect(o.err).NotTo(HaveOccurred())
		}
		var res *lockv1.AcquireResponse
		Eventually(waiting).WithTimeout(10 * time.Second).Should(Receive(&res))
		Expect(res.GetAcquired()).To(BeTrue(), "the waiting campaigner was not elected")
		Expect(o.msg.GetLeader().GetTerm()).To(Equal(res.GetLease().GetFencingToken()), "Observe after the expiry")
		Expect(o.msg.GetLeader().GetTerm()).To(BeNumerically(">", a.GetFencingToken()))
		Expect(o.msg.GetLeader().GetValue()).To(Equal("next"))
	}, SpecTimeout(time.Minute))

	It("lets the leader alone proclaim, changing the value seen by Inspect and List and nothing else", func(ctx SpecContext) {
		key := sc.Key("proclaim")
		l := sc.MustGrant(ctx, sc.CampaignRequest(key, "v1", sc.LongTTL(), 0))
		Expect(l.GetKind()).To(Equal(lockv1.Kind_KIND_ELECTION))
		Expect(l.GetValue()).To(Equal("v1"))
		res := proclaim(ctx, key, l.GetOwnerToken(), "v2")
		Expect(res.GetProclaimed()).To(BeTrue())
		Expect(res.GetLease().GetValue()).To(Equal("v2"))
		Expect(res.GetLease().GetFencingToken()).To(Equal(l.GetFencingToken()), "Proclaim changed the term")
		Expect(res.GetServerStamp()).NotTo(BeNil())
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetKind()).To(Equal(lockv1.Kind_KIND_ELECTION))
		Expect(ins.GetState().GetHolders()).To(HaveLen(1))
		Expect(ins.GetState().GetHolders()[0].GetValue()).To(Equal("v2"))
		list, err := sc.RPC.List(ctx, &lockv1.ListRequest{Prefix: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.GetLocks()).To(HaveLen(1))
		Expect(list.GetLocks()[0].GetHolders()[0].GetValue()).To(Equal("v2"))

		other := sc.MustGrant(ctx, sc.CampaignRequest(sc.Key("proclaim-other"), "", sc.LongTTL(), 0))
		for what, tok := range map[string]string{"a made-up token": "not-a-token-of-anyone", "another election's leader": other.GetOwnerToken()} {
			res := proclaim(ctx, key, tok, "stolen")
			Expect(res.GetProclaimed()).To(BeFalse(), "%s proclaimed", what)
			Expect(res.GetLease()).To(BeNil())
		}
		Expect(sc.Release(ctx, key, l.GetOwnerToken())).To(BeTrue())
		Expect(proclaim(ctx, key, l.GetOwnerToken(), "late").GetProclaimed()).To(BeFalse(), "a resigned leader proclaimed")
		next := sc.MustGrant(ctx, sc.CampaignRequest(key, "n", sc.LongTTL(), 0))
		Expect(proclaim(ctx, key, l.GetOwnerToken(), "late").GetProclaimed()).To(BeFalse(), "a deposed leader proclaimed")
		ins, err = sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetFencingToken()).To(Equal(next.GetFencingToken()))
		Expect(ins.GetState().GetHolders()[0].GetValue()).To(Equal("n"), "a deposed leader's proclaim changed the value")
	}, SpecTimeout(30*time.Second))

	It("refuses bad values with invalid_argument naming value and its limit, and other kinds with failed_precondition", Label("bad-input"), func(ctx SpecContext) {
		key := sc.Key("bad")
		l := sc.MustGrant(ctx, sc.CampaignRequest(key, "", sc.LongTTL(), 0))
		long := strings.Repeat("v", 4097)
		for _, c := range []struct {
			what string
			call func() error
			want string
		}{
			{"a campaign with 4097 bytes", func() error {
				_, err := sc.RPC.Acquire(ctx, sc.CampaignRequest(sc.Key("bad-long"), long, sc.LongTTL(), 0))
				return err
			}, "value: 4097 bytes exceeds the maximum 4096 bytes"},
			{"a proclaim of 4097 bytes", func() error {
				_, err := sc.RPC.Proclaim(ctx, &lockv1.ProclaimRequest{Key: key, OwnerToken: l.GetOwnerToken(), Value: long})
				return err
			}, "value: 4097 bytes exceeds the maximum 4096 bytes"},
			{"a value on a mutex", func() error {
				_, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: sc.Key("bad-mutex"), Ttl: durationpb.New(sc.LongTTL()), Value: "v"})
				return err
			}, "value: applies to elections only"},
			{"an election of limit 2", func() error {
				req := sc.CampaignRequest(sc.Key("bad-limit"), "", sc.LongTTL(), 0)
				req.Limit = 2
				_, err := sc.RPC.Acquire(ctx, req)
				return err
			}, "limit: an election has limit 1"},
		} {
			err := c.call()
			Expect(connect.CodeOf(err)).To(Equal(connect.CodeInvalidArgument), "%s: %v", c.what, err)
			Expect(err.Error()).To(ContainSubstring(c.want), c.what)
		}
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetHolders()[0].GetValue()).To(BeEmpty(), "a refused proclaim changed the value")

		mu := sc.Key("bad-kind")
		sc.MustAcquire(ctx, mu, sc.LongTTL())
		_, err = sc.RPC.Acquire(ctx, sc.CampaignRequest(mu, "", sc.LongTTL(), 0))
		Expect(connect.CodeOf(err)).To(Equal(connect.CodeFailedPrecondition), "a campaign on a mutex: %v", err)
		Expect(err.Error()).To(And(ContainSubstring("is a mutex"), ContainSubstring("an election")))
		_, err = sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL())})
		Expect(connect.CodeOf(err)).To(Equal(connect.CodeFailedPrecondition), "a mutex on an election: %v", err)
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		var o observed
		Eventually(sc.observeKey(octx, mu)).WithTimeout(10 * time.Second).Should(Receive(&o))
		Expect(connect.CodeOf(o.err)).To(Equal(connect.CodeFailedPrecondition), "Observe of a mutex: %v %v", o.msg, o.err)
		Expect(o.err.Error()).To(ContainSubstring("Observe follows elections only"))
	}, SpecTimeout(30*time.Second))
})
