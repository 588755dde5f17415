package conformance

import (
	"errors"
	"net/http"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Promise 2 at the API.
var _ = describeService("owner token", Label("owner-token"), func(sc *ServiceContext) {
	It("makes a stale holder's release after expiry and takeover a no-op, and the successor still holds", func(ctx SpecContext) {
		key := sc.Key("stale-release")
		stale := sc.MustAcquire(ctx, key, sc.TTL())
		succ, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())

		Expect(sc.Release(ctx, key, stale.GetOwnerToken())).To(BeFalse(), "the stale holder's release answered released=true")
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue(), "the stale holder's release deleted the successor's lock")
		Expect(ins.GetState().GetFencingToken()).To(Equal(succ.GetFencingToken()))

		ext, err := sc.RPC.Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: stale.GetOwnerToken(), Ttl: durationpb.New(sc.LongTTL())})
		Expect(err).NotTo(HaveOccurred(), "an extend with a stale token is not an error")
		Expect(ext.GetExtended()).To(BeFalse(), "the stale holder extended the successor's lock")

		Expect(sc.Release(ctx, key, succ.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))

	It("answers released=false and extended=false for an unknown owner token", func(ctx SpecContext) {
		key := sc.Key("unknown-token")
		l := sc.MustAcquire(ctx, key, sc.LongTTL())
		Expect(sc.Release(ctx, key, "not-a-token")).To(BeFalse())
		ext, err := sc.RPC.Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: "not-a-token", Ttl: durationpb.New(sc.LongTTL())})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.GetExtended()).To(BeFalse())
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue())
		Expect(ins.GetState().GetFencingToken()).To(Equal(l.GetFencingToken()))
	}, SpecTimeout(30*time.Second))

	It("lets a lapsed SDK guard's Unlock report the loss without touching the successor", func(ctx SpecContext) {
		key := sc.Key("sdk-stale")
		ttl := sc.TTL()
		cut := &cuttable{base: http.DefaultTransport.(*http.Transport).Clone()}
		DeferCleanup(cut.base.CloseIdleConnections)
		g, err := sc.Client(holdfast.WithHTTPClient(&http.Client{Transport: cut})).Lock(key).TTL(ttl).TryLock(ctx)
		Expect(err).NotTo(HaveOccurred())
		cut.cut.Store(true) // renewals stop getting through; Release still does
		succ, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())

		err = g.Unlock(ctx)
		Expect(errors.Is(err, holdfast.ErrLeaseLost)).To(BeTrue(), "Unlock of a lapsed guard: %v, want ErrLeaseLost", err)
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue(), "the lapsed guard's Unlock deleted the successor's lock")
		Expect(ins.GetState().GetFencingToken()).To(Equal(succ.GetFencingToken()))
	}, SpecTimeout(30*time.Second))
})
