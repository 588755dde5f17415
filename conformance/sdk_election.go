package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Leader election through an SDK (docs/sdk-behaviour.md, "Leader
// election"): a campaign is a lock's acquisition of an election key, the
// leadership a guard whose fencing token is the term: one leader at a
// time, terms increasing, the leadership renewed by the client's one
// watchdog and poisoned when lost, by the local clock before anyone else
// is elected.
var _ = describeSDK("election", Label("election"), func(sc *SDKContext) {
	BeforeEach(func() { sc.needElection() })

	It("elects one leader at a time among campaigners of two adapter processes, the others queued in arrival order, terms increasing as each resigns", func(ctx SpecContext) {
		key := sc.Key("sdk-elect-one")
		a2, err := sc.StartAdapter(ctx)
		Expect(err).NotTo(HaveOccurred())
		long := sc.LongTTL().Milliseconds()
		watcher := sc.SDK(ctx)
		const n = 4
		clients := make([]SDKClient, n)
		pending := make([]*sdkrunner.Pending, n)
		for i := range n {
			a := sc.Adapter
			if i%2 == 1 {
				a = a2
			}
			clients[i] = sc.Connect(ctx, a, sc.URL, "")
			pending[i] = clients[i].SendCampaign(campaignArgs(key, fmt.Sprintf("node-%d", i), long, 30*time.Second))
			// Queued one after the other, so that arrival order is known.
			sc.awaitLeaderOrQueued(ctx, key, i, pending[i])
		}
		var last uint64
		for i := range n {
			var won sdkrunner.CampaignResult
			Expect(pending[i].Wait(ctx, &won)).To(Succeed(), "campaigner %d (arrival order)", i)
			for j := i + 1; j < n; j++ {
				Expect(pending[j].Answered()).To(BeFalse(), "campaigner %d answered while campaigner %d leads", j, i)
			}
			Expect(won.Kind).To(Equal(sdkrunner.LockKindElection), "the leadership's kind")
			Expect(won.Value).To(Equal(fmt.Sprintf("node-%d", i)), "the leadership's value")
			Expect(uint64(won.Term)).To(Equal(uint64(won.FencingToken)), "the term is the fencing token")
			Expect(uint64(won.Term)).To(BeNumerically(">", last), "terms increase over successive leaders")
			last = uint64(won.Term)
			ld := watcher.Leader(ctx, key)
			Expect(ld).NotTo(BeNil(), "leader while campaigner %d leads", i)
			Expect(uint64(ld.Term)).To(Equal(last))
			Expect(ld.Value).To(Equal(won.Value))
			ins := sc.InspectRaw(ctx, sc.RPC, key)
			Expect(ins.GetState().GetWaiters()).To(BeNumerically("==", n-1-i), "campaigners still queued behind leader %d", i)
			Expect(clients[i].Resign(ctx, won.Guard)).To(Succeed())
			Expect(clients[i].GuardState(ctx, won.Guard).State).To(Equal(sdkrunner.StateReleased), "a resigned leadership")
		}
		Expect(watcher.Leader(ctx, key)).To(BeNil(), "no leader once every campaigner resigned")
	}, SpecTimeout(time.Minute))

	It("shows a proclaim by the leader to an observer in another adapter process, in order, no message repeated, no term going back", func(ctx SpecContext) {
		key := sc.Key("sdk-elect-observe")
		a2, err := sc.StartAdapter(ctx)
		Expect(err).NotTo(HaveOccurred())
		observer := sc.Connect(ctx, a2, sc.URL, "")
		obs := observer.Observe(ctx, key)
		Expect(obs.Next(ctx)).To(BeNil(), "the first message of an election nobody leads")

		long := sc.LongTTL().Milliseconds()
		c1, c2 := sc.SDK(ctx), sc.SDK(ctx)
		first, err := c1.Campaign(ctx, campaignArgs(key, "10.0.0.1:80", long, 0))
		Expect(err).NotTo(HaveOccurred())
		ld := obs.Next(ctx)
		Expect(ld).NotTo(BeNil(), "the leader observed")
		Expect([]any{uint64(ld.Term), ld.Value, ld.Holder}).To(Equal([]any{uint64(first.Term), "10.0.0.1:80", "conformance-sdk"}))

		Expect(c1.Proclaim(ctx, first.Guard, "10.0.0.1:81")).To(Succeed(), "the leader's proclaim")
		ld = obs.Next(ctx)
		Expect(ld).NotTo(BeNil(), "the proclaimed value observed")
		Expect([]any{uint64(ld.Term), ld.Value}).To(Equal([]any{uint64(first.Term), "10.0.0.1:81"}), "a proclaim keeps the term")
		Expect(observer.Leader(ctx, key).Value).To(Equal("10.0.0.1:81"), "leader after the proclaim")
		tok, err := c1.FencingToken(ctx, first.Guard)
		Expect(err).NotTo(HaveOccurred(), "a proclaim keeps the leadership")
		Expect(tok).To(Equal(uint64(first.Term)))

		next := c2.SendCampaign(campaignArgs(key, "10.0.0.2:80", long, 20*time.Second))
		sc.AwaitQueued(ctx, sc.RPC, key, 1, next)
		Expect(c1.Resign(ctx, first.Guard)).To(Succeed())
		var second sdkrunner.CampaignResult
		Expect(next.Wait(ctx, &second)).To(Succeed())
		ld = obs.Next(ctx)
		if ld == nil { // the resignation may be seen before the next leader
			ld = obs.Next(ctx)
		}
		Expect(ld).NotTo(BeNil(), "the next leader observed")
		Expect([]any{uint64(ld.Term), ld.Value}).To(Equal([]any{uint64(second.Term), "10.0.0.2:80"}))
		Expect(c2.Resign(ctx, second.Guard)).To(Succeed())
		Expect(obs.Next(ctx)).To(BeNil(), "no leader observed after the last resignation")

		seen := obs.Stop(ctx)
		Expect(seen.Messages).To(Equal(len(obs.All())), "observe's count of the SDK's messages against the observed events")
		obs.ExpectOrdered()
	}, SpecTimeout(time.Minute))

	It("observes every leader of a succession, terms strictly increasing, none skipped and none repeated", func(ctx SpecContext) {
		key := sc.Key("sdk-elect-succession")
		observer := sc.SDK(ctx)
		obs := observer.Observe(ctx, key)
		Expect(obs.Next(ctx)).To(BeNil())
		c1, c2 := sc.SDK(ctx), sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		var terms []uint64
		for i := range 5 {
			c := []SDKClient{c1, c2}[i%2]
			won, err := c.Campaign(ctx, campaignArgs(key, fmt.Sprintf("round-%d", i), long, 0))
			Expect(err).NotTo(HaveOccurred(), "round %d", i)
			ld := obs.Next(ctx)
			Expect(ld).NotTo(BeNil(), "round %d: the leader observed", i)
			Expect([]any{uint64(ld.Term), ld.Value}).To(Equal([]any{uint64(won.Term), fmt.Sprintf("round-%d", i)}), "round %d", i)
			terms = append(terms, uint64(ld.Term))
			Expect(c.Resign(ctx, won.Guard)).To(Succeed())
			Expect(obs.Next(ctx)).To(BeNil(), "round %d: no leader after the resignation", i)
		}
		Expect(slices.IsSorted(terms) && len(slices.Compact(slices.Clone(terms))) == len(terms)).To(BeTrue(), "terms %v must strictly increase", terms)
		obs.Stop(ctx)
		obs.ExpectOrdered()
	}, SpecTimeout(time.Minute))

	It("answers a deposed leader's proclaim with lease_lost (rejected) and poisons its leadership, leaving the new leader's value; a resigned leader's proclaim is released", func(ctx SpecContext) {
		key := sc.Key("sdk-elect-deposed")
		p := sc.Proxy(sc.URL)
		c1 := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
		c2 := sc.SDK(ctx)
		// A long TTL: no renewal falls due before the proclaim, so it is
		// the proclaim the server answers proclaimed=false.
		long := sc.LongTTL().Milliseconds()
		old, err := c1.Campaign(ctx, campaignArgs(key, "old", long, 0))
		Expect(err).NotTo(HaveOccurred())
		lease, ok := p.Lease(uint64(old.Term))
		Expect(ok).To(BeTrue(), "the proxy saw the leadership")
		Expect(sc.Release(ctx, lease.Key, lease.OwnerToken)).To(BeTrue(), "ending the leadership by its owner token")
		cur, err := c2.Campaign(ctx, campaignArgs(key, "new", long, 0))
		Expect(err).NotTo(HaveOccurred(), "a campaign for the free key")
		Expect(uint64(cur.Term)).To(BeNumerically(">", uint64(old.Term)))

		err = c1.Proclaim(ctx, old.Guard, "old-again")
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "the deposed leader's proclaim")
		Expect(ErrorOf(err).Reason).To(Equal(sdkrunner.ReasonRejected))
		Expect(p.Requests("Proclaim")).NotTo(BeEmpty(), "the proclaim was sent")
		_, err = c1.FencingToken(ctx, old.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "the term of a poisoned leadership")
		st := c1.GuardState(ctx, old.Guard)
		Expect([]string{st.State, st.Reason}).To(Equal([]string{sdkrunner.StateLost, sdkrunner.ReasonRejected}))
		Expect(c1.Resign(ctx, old.Guard)).To(BeKind(sdkrunner.KindLeaseLost), "resigning a lost leadership is never a silent success")
		ld := c2.Leader(ctx, key)
		Expect(ld).NotTo(BeNil())
		Expect([]any{uint64(ld.Term), ld.Value}).To(Equal([]any{uint64(cur.Term), "new"}), "the new leader is untouched")

		Expect(c2.Resign(ctx, cur.Guard)).To(Succeed())
		Expect(c2.Proclaim(ctx, cur.Guard, "after")).To(BeKind(sdkrunner.KindReleased), "a resigned leader's proclaim")
		Expect(c2.Leader(ctx, key)).To(BeNil(), "a proclaim after resigning changes nothing")
	}, SpecTimeout(time.Minute))

	It("poisons a stalled leader (its renewals blocked) by its local clock before another campaigner is elected", func(ctx SpecContext) {
		key := sc.Key("sdk-elect-stalled")
		p := sc.Proxy(sc.URL)
		// Both in one adapter process: the lines it writes, read in order,
		// order the leader's poisoning and the next leader's election as
		// the adapter saw them.
		stalled := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
		next := sc.SDK(ctx)
		ttl := sc.TTL()
		old, err := stalled.Campaign(ctx, campaignArgs(key, "stalled", ttl.Milliseconds(), 0))
		Expect(err).NotTo(HaveOccurred())
		w := next.SendCampaign(campaignArgs(key, "next", sc.LongTTL().Milliseconds(), 20*time.Second))
		sc.AwaitQueued(ctx, sc.RPC, key, 1, w)
		p.SetMode(faultproxy.Unavailable)
		var won sdkrunner.CampaignResult
		Expect(w.Wait(ctx, &won)).To(Succeed(), "the queued campaigner, once the stalled leadership ran out")
		Expect(uint64(won.Term)).To(BeNumerically(">", uint64(old.Term)))
		lost, found := lostEvent(sc.Adapter, old.Guard)
		Expect(found).To(BeTrue(), "no lease_lost event for the stalled leader before the next leader's campaign answered")
		Expect(lost.At.Before(w.AnsweredAt())).To(BeTrue(),
			"the stalled leader was poisoned (%s) after the next leader was elected (%s)", lost.At.Format(time.StampMicro), w.AnsweredAt().Format(time.StampMicro))
		AddReportEntry("stalled leader poisoned before the next election by", w.AnsweredAt().Sub(lost.At).String(), ReportEntryVisibilityFailureOrVerbose)
		Expect(lost.Reason).To(Equal(sdkrunner.ReasonExpired))
		_, err = stalled.FencingToken(ctx, old.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "the stalled leader's term")
		p.SetMode(faultproxy.Pass)
		Expect(stalled.Proclaim(ctx, old.Guard, "still me")).To(BeKind(sdkrunner.KindLeaseLost), "the stalled leader's proclaim once it runs again")
		Expect(next.Leader(ctx, key).Value).To(Equal("next"))
		Expect(next.Resign(ctx, won.Guard)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("refuses a value over 4096 bytes of UTF-8 with invalid_argument before anything is sent, in a campaign and in a proclaim", Label("bad-input"), func(ctx SpecContext) {
		const budget = 3 * time.Second
		closed := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.ClosedURL(), RetryBudgetMs: budget.Milliseconds()})
		long := sc.LongTTL().Milliseconds()
		for _, tc := range []struct{ what, value string }{
			{"4097 ASCII bytes", strings.Repeat("v", 4097)},
			// 2049 characters, 4098 bytes: the limit counts bytes.
			{"2049 two-byte characters", strings.Repeat("é", 2049)},
		} {
			start := time.Now()
			_, err := closed.Campaign(ctx, campaignArgs(sc.Key("sdk-elect-bad"), tc.value, long, 0))
			Expect(err).To(HaveCode("invalid_argument"), "campaign with %s", tc.what)
			Expect(time.Since(start)).To(BeNumerically("<", budget/3), "%s answered after %s: was it sent? (the address refuses connections)", tc.what, time.Since(start))
			Expect(ErrorOf(err).Message).To(And(ContainSubstring("value"), ContainSubstring("4096")), "%s: the message must name the field and the limit", tc.what)
		}
		c := sc.SDK(ctx)
		key := sc.Key("sdk-elect-bad-proclaim")
		full := strings.Repeat("é", 2048)
		lead, err := c.Campaign(ctx, campaignArgs(key, full, long, 0))
		Expect(err).NotTo(HaveOccurred(), "a value of exactly 4096 bytes")
		Expect(lead.Value).To(Equal(full))
		err = c.Proclaim(ctx, lead.Guard, full+"x")
		Expect(err).To(HaveCode("invalid_argument"), "proclaim of 4097 bytes")
		Expect(ErrorOf(err).Message).To(ContainSubstring("4096"))
		Expect(c.Leader(ctx, key).Value).To(Equal(full), "a refused proclaim changes nothing")
		Expect(c.GuardState(ctx, lead.Guard).State).To(Equal(sdkrunner.StateHeld), "a refused proclaim leaves the leadership held")
		Expect(c.Resign(ctx, lead.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("answers failed_precondition for a campaign on a lock's key and for a lock on an election's key", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		long := sc.LongTTL()
		lockKey := sc.Key("sdk-elect-mismatch-lock")
		held := sc.MustAcquire(ctx, lockKey, long)
		_, err := c.Campaign(ctx, campaignArgs(lockKey, "v", long.Milliseconds(), 0))
		Expect(err).To(HaveCode("failed_precondition"), "a campaign for a held lock's key")
		Expect(sc.Release(ctx, lockKey, held.GetOwnerToken())).To(BeTrue())

		key := sc.Key("sdk-elect-mismatch")
		lead, err := c.Campaign(ctx, campaignArgs(key, "v", long.Milliseconds(), 0))
		Expect(err).NotTo(HaveOccurred())
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: long.Milliseconds(), Try: true})
		Expect(err).To(HaveCode("failed_precondition"), "an election's key taken as a lock")
		Expect(c.Resign(ctx, lead.Guard)).To(Succeed())
	}, SpecTimeout(30*time.Second))
})

// campaignArgs is a campaign for key with value: one attempt when wait is
// 0, else queueing for wait.
func campaignArgs(key, value string, ttlMs int64, wait time.Duration) sdkrunner.CampaignArgs {
	return sdkrunner.CampaignArgs{Key: key, Value: value, TTLMs: ttlMs, WaitMs: wait.Milliseconds()}
}

// needElection skips a spec when the adapter does not claim elections or
// the backend does not keep them.
func (sc *SDKContext) needElection() {
	if !sc.Adapter.Has(sdkrunner.CapElection) {
		Skip("the adapter does not claim " + sdkrunner.CapElection)
	}
	if !slices.Contains(sc.Backend().GetKinds(), lockv1.Kind_KIND_ELECTION) {
		Skip(fmt.Sprintf("the backend does not keep election keys (BackendInfo.kinds %v)", sc.Backend().GetKinds()))
	}
}

// awaitLeaderOrQueued waits until campaigner i of key leads (i == 0: its
// campaign answers) or is queued as the i-th waiter.
func (sc *SDKContext) awaitLeaderOrQueued(ctx context.Context, key string, i int, p *sdkrunner.Pending) {
	GinkgoHelper()
	if i == 0 {
		Eventually(ctx, p.Answered).WithTimeout(10*time.Second).WithPolling(2*time.Millisecond).Should(BeTrue(), "the first campaign of a free election")
		return
	}
	sc.AwaitQueued(ctx, sc.RPC, key, i, p)
}

// lostEvent is the lease_lost event of guard received so far.
func lostEvent(a *sdkrunner.Adapter, guard string) (sdkrunner.Event, bool) {
	for _, e := range a.Events() {
		if e.Event == sdkrunner.EventLeaseLost && e.Guard == guard {
			return e, true
		}
	}
	return sdkrunner.Event{}, false
}

// SendCampaign starts a campaign without waiting for its answer.
func (c SDKClient) SendCampaign(args sdkrunner.CampaignArgs) *sdkrunner.Pending {
	GinkgoHelper()
	args.Client = c.ID
	if args.Holder == "" {
		args.Holder = "conformance-sdk"
	}
	p, err := c.A.Send(sdkrunner.CmdCampaign, args)
	Expect(err).NotTo(HaveOccurred())
	return p
}

// Campaign runs a campaign through the SDK.
func (c SDKClient) Campaign(ctx context.Context, args sdkrunner.CampaignArgs) (sdkrunner.CampaignResult, error) {
	var res sdkrunner.CampaignResult
	args.Client = c.ID
	if args.Holder == "" {
		args.Holder = "conformance-sdk"
	}
	err := c.A.Call(ctx, sdkrunner.CmdCampaign, args, &res)
	return res, err
}

// Proclaim replaces a leadership's value through the SDK.
func (c SDKClient) Proclaim(ctx context.Context, guard, value string) error {
	return c.A.Call(ctx, sdkrunner.CmdProclaim, sdkrunner.ProclaimArgs{Guard: guard, Value: value}, nil)
}

// Resign gives a leadership up through the SDK.
func (c SDKClient) Resign(ctx context.Context, guard string) error {
	return c.A.Call(ctx, sdkrunner.CmdResign, sdkrunner.GuardArgs{Guard: guard}, nil)
}

// Leader asks the SDK for the election's leader (nil: none).
func (c SDKClient) Leader(ctx context.Context, key string) *sdkrunner.Leader {
	GinkgoHelper()
	var res sdkrunner.LeaderResult
	Expect(c.A.Call(ctx, sdkrunner.CmdLeader, sdkrunner.LeaderArgs{Client: c.ID, Key: key}, &res)).To(Succeed(), "leader of %q", key)
	return res.Leader
}

// Observation is an observe command in flight and the observed events it
// has produced.
type Observation struct {
	c    SDKClient
	id   string
	p    *sdkrunner.Pending
	read int // observed events Next has returned
}

// Observe starts the SDK's observe of key in the client's adapter; it is
// stopped when the spec ends if the spec has not stopped it.
func (c SDKClient) Observe(ctx context.Context, key string) *Observation {
	GinkgoHelper()
	id := fmt.Sprintf("o-%s-%d", c.ID, time.Now().UnixNano())
	p, err := c.A.Send(sdkrunner.CmdObserve, sdkrunner.ObserveArgs{Client: c.ID, Key: key, Observe: id})
	Expect(err).NotTo(HaveOccurred())
	o := &Observation{c: c, id: id, p: p}
	DeferCleanup(func(ctx context.Context) {
		if !p.Answered() {
			_ = c.A.Call(ctx, sdkrunner.CmdObserveStop, sdkrunner.ObserveStopArgs{Observe: id}, nil)
		}
	}, NodeTimeout(10*time.Second))
	return o
}

// All is every observed event of this observe so far.
func (o *Observation) All() []sdkrunner.Event {
	var out []sdkrunner.Event
	for _, e := range o.c.A.Events() {
		if e.Event == sdkrunner.EventObserved && e.Observe == o.id {
			out = append(out, e)
		}
	}
	return out
}

// Next waits for the next observed message and returns its leader (nil:
// no leader). It fails the spec if none comes within 10s or the observe
// answered (ended) instead.
func (o *Observation) Next(ctx context.Context) *sdkrunner.Leader {
	GinkgoHelper()
	seen := 0
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev, err := o.c.A.WaitEvent(wctx, func(e sdkrunner.Event) bool {
		if e.Event != sdkrunner.EventObserved || e.Observe != o.id {
			return false
		}
		seen++
		return seen > o.read
	})
	if err != nil && o.p.Answered() {
		Fail(fmt.Sprintf("observe %s ended: %v", o.id, o.p.Wait(ctx, nil)))
	}
	Expect(err).NotTo(HaveOccurred(), "observe %s: message %d", o.id, o.read+1)
	o.read++
	return ev.Leader
}

// Stop ends the observe (observe_stop) and returns its answer.
func (o *Observation) Stop(ctx context.Context) sdkrunner.ObserveResult {
	GinkgoHelper()
	Expect(o.c.A.Call(ctx, sdkrunner.CmdObserveStop, sdkrunner.ObserveStopArgs{Observe: o.id}, nil)).To(Succeed())
	var res sdkrunner.ObserveResult
	Expect(o.p.Wait(ctx, &res)).To(Succeed(), "observe answers once stopped")
	return res
}

// ExpectOrdered checks the observed stream's promises: no message the same
// as the one before it, no term going back.
func (o *Observation) ExpectOrdered() {
	GinkgoHelper()
	var prev *sdkrunner.Leader
	var maxTerm sdkrunner.U64
	for i, e := range o.All() {
		cur := e.Leader
		if i > 0 {
			same := (prev == nil && cur == nil) || (prev != nil && cur != nil && *prev == *cur)
			Expect(same).To(BeFalse(), "observed message %d repeats the one before it: %+v", i, cur)
		}
		if cur != nil {
			Expect(cur.Term).To(BeNumerically(">=", maxTerm), "observed message %d: term %d after term %d", i, cur.Term, maxTerm)
			maxTerm = cur.Term
		}
		prev = cur
	}
}
