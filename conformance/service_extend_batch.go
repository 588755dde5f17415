package conformance

import (
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ExtendBatch at the API: many leases renewed in one call, each on its own
// as Extend would (promise 2 per item; promise 3: the renewal takes), and
// batching across callers keeps promise 1.
var _ = describeService("extend batch", Label("extend-batch"), func(sc *ServiceContext) {
	item := func(key, token string, ttl time.Duration) *lockv1.ExtendBatchItem {
		return &lockv1.ExtendBatchItem{Key: key, OwnerToken: token, Ttl: durationpb.New(ttl)}
	}

	It("renews each held lease, answers extended=false for a stale or unknown token, and changes nothing else", func(ctx SpecContext) {
		a, b := sc.Key("eb-a"), sc.Key("eb-b")
		la := sc.MustAcquire(ctx, a, sc.TTL())
		lb := sc.MustAcquire(ctx, b, sc.LongTTL())
		nobody := sc.Key("eb-nobody")
		resp, err := sc.RPC.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{
			item(a, la.GetOwnerToken(), sc.LongTTL()),
			item(b, "not-a-token", sc.LongTTL()),
			item(nobody, "not-a-token", sc.LongTTL()),
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.GetServerStamp()).NotTo(BeNil(), "server_stamp")
		res := resp.GetResults()
		Expect(res).To(HaveLen(3), "one result per item, in order")
		for i, r := range res {
			Expect(r.GetError()).To(BeNil(), "item %d: %v", i, r.GetError())
		}
		Expect(res[0].GetExtended()).To(BeTrue(), "the holder's lease")
		Expect(res[0].GetLease().GetFencingToken()).To(Equal(la.GetFencingToken()), "a renewal keeps the fencing token")
		Expect(res[0].GetLease().GetOwnerToken()).To(Equal(la.GetOwnerToken()))
		Expect(res[1].GetExtended()).To(BeFalse(), "a wrong token renewed someone else's lease")
		Expect(res[2].GetExtended()).To(BeFalse(), "a key nobody holds")

		// The renewal took: the short lease outlives its first TTL; the
		// other two are as they were.
		time.Sleep(sc.FreeWithin())
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: a})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue(), "a lease renewed by ExtendBatch for %s expired at its first TTL %s", sc.LongTTL(), sc.TTL())
		Expect(ins.GetState().GetFencingToken()).To(Equal(la.GetFencingToken()))
		ins, err = sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: b})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetState().GetFencingToken()).To(Equal(lb.GetFencingToken()))
		ins, err = sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: nobody})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeFalse(), "an ExtendBatch item created a lock")

		// An ended lease is never resurrected.
		Expect(sc.Release(ctx, a, la.GetOwnerToken())).To(BeTrue())
		resp, err = sc.RPC.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{item(a, la.GetOwnerToken(), sc.LongTTL())}})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.GetResults()[0].GetExtended()).To(BeFalse(), "a released lease was renewed")
		Expect(sc.Release(ctx, b, lb.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(time.Minute))

	It("answers a key given twice once per item", func(ctx SpecContext) {
		k := sc.Key("eb-twice")
		l := sc.MustAcquire(ctx, k, sc.LongTTL())
		resp, err := sc.RPC.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{
			item(k, "not-a-token", sc.LongTTL()),
			item(k, l.GetOwnerToken(), sc.LongTTL()),
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.GetResults()).To(HaveLen(2))
		Expect(resp.GetResults()[0].GetExtended()).To(BeFalse())
		Expect(resp.GetResults()[1].GetExtended()).To(BeTrue())
		Expect(sc.Release(ctx, k, l.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("refuses bad input with invalid_argument naming the item and field", func(ctx SpecContext) {
		ok := item(sc.Key("eb-bad"), "t", sc.LongTTL())
		many := make([]*lockv1.ExtendBatchItem, 1001)
		for i := range many {
			many[i] = ok
		}
		for _, tc := range []struct {
			items []*lockv1.ExtendBatchItem
			want  string
		}{
			{nil, "items"},
			{many, "1000"},
			{[]*lockv1.ExtendBatchItem{ok, item("", "t", sc.LongTTL())}, "items[1].key"},
			{[]*lockv1.ExtendBatchItem{item(sc.Key("eb-bad"), "", sc.LongTTL())}, "items[0].owner_token"},
			{[]*lockv1.ExtendBatchItem{ok, {Key: sc.Key("eb-bad"), OwnerToken: "t"}}, "items[1].ttl"},
		} {
			_, err := sc.RPC.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: tc.items})
			Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "%d items: %v", len(tc.items), err)
			Expect(err.Error()).To(ContainSubstring(tc.want))
		}
	}, SpecTimeout(30*time.Second))

	// The server batches concurrent calls to a backend that batches: racing
	// acquirers of one key, each beside acquirers of keys of their own,
	// still see exactly one winner, and every other key is taken.
	It("lets exactly one of many concurrent acquirers take a key while others take theirs", func(ctx SpecContext) {
		shared := sc.Key("batch-race")
		const n = 32
		var wg sync.WaitGroup
		won := make([]bool, n)
		own := make([]bool, n)
		errs := make([]error, 2*n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resp, err := sc.Acquire(ctx, sc.RPC, shared, sc.LongTTL(), 0)
				errs[2*i], won[i] = err, resp.GetAcquired()
			})
			wg.Go(func() {
				<-start
				resp, err := sc.Acquire(ctx, sc.RPC, sc.Key(fmt.Sprintf("batch-race-own-%d", i)), sc.LongTTL(), 0)
				errs[2*i+1], own[i] = err, resp.GetAcquired()
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range n {
			Expect(errs[2*i]).NotTo(HaveOccurred())
			Expect(errs[2*i+1]).NotTo(HaveOccurred())
			Expect(own[i]).To(BeTrue(), "acquirer %d of its own free key", i)
			if won[i] {
				winners++
			}
		}
		Expect(winners).To(Equal(1), "acquirers of %q that won", shared)
	}, SpecTimeout(time.Minute))
})
