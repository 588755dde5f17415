package conformance

import (
	"time"

	"connectrpc.com/connect"
	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Retry-safe requests through the API: a repeat with the same request_id
// is answered as the first attempt was, on any server sharing the backend.
var _ = describeService("request ids", Label("request-ids"), func(sc *ServiceContext) {
	BeforeEach(func() {
		if !sc.hasCap(lockv1.Capability_CAPABILITY_REQUEST_ID) {
			Skip("the backend does not declare CAPABILITY_REQUEST_ID")
		}
	})

	It("answers an Acquire whose answer a proxy lost, when retried, with the same lease", func(ctx SpecContext) {
		p, err := faultproxy.New(sc.URL)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Close)
		rpc := sc.RPCFor(p.URL)
		key, other := sc.Key("lost"), sc.Key("lost-set")
		for _, req := range []*lockv1.AcquireRequest{
			{Key: key, Ttl: durationpb.New(sc.LongTTL()), Holder: "conformance", RequestId: randomHex(16)},
			{Claims: []*lockv1.Claim{{Key: other}, {Key: key + "-2"}}, Ttl: durationpb.New(sc.LongTTL()), Holder: "conformance", RequestId: randomHex(16)},
		} {
			if len(req.GetClaims()) > 0 && !sc.hasCap(lockv1.Capability_CAPABILITY_MULTI_KEY) {
				continue
			}
			p.LoseNextAnswer("Acquire")
			_, err := rpc.Acquire(ctx, req)
			Expect(codeOf(err)).To(Equal(connect.CodeUnavailable), "the proxy was to lose the answer")
			// The server acted on it: the key is held, by nobody who knows.
			k := req.GetKey()
			if k == "" {
				k = req.GetClaims()[0].GetKey()
			}
			ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: k})
			Expect(err).NotTo(HaveOccurred())
			Expect(ins.GetHeld()).To(BeTrue())
			// The retry, with a wait, is answered at once with that lease.
			req.Wait = durationpb.New(10 * time.Second)
			start := time.Now()
			res, err := rpc.Acquire(ctx, req)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.GetAcquired()).To(BeTrue(), "the retry was not answered with its lease")
			Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), "the retry waited for its own lease")
			fence := res.GetLease().GetFencingToken()
			if len(req.GetClaims()) > 0 {
				fence = res.GetLease().GetKeys()[0].GetFencingToken()
			}
			Expect(fence).To(Equal(ins.GetState().GetFencingToken()), "the retry got another lease than the lost one")
			// The owner token it got holds the lease.
			keys := []string(nil)
			for _, c := range req.GetClaims() {
				keys = append(keys, c.GetKey())
			}
			rel, err := sc.RPC.Release(ctx, &lockv1.ReleaseRequest{Key: req.GetKey(), Keys: keys, OwnerToken: res.GetLease().GetOwnerToken()})
			Expect(err).NotTo(HaveOccurred())
			Expect(rel.GetReleased()).To(BeTrue(), "the replayed owner token does not hold the lease")
		}
	}, SpecTimeout(time.Minute))

	It("answers a repeat through another server sharing the backend, and refuses one with other arguments", func(ctx SpecContext) {
		rpc2 := sc.RPC
		if sc.Backend().GetShared() {
			url, err := sc.SecondURL(ctx)
			Expect(err).NotTo(HaveOccurred())
			if url != "" {
				rpc2 = sc.RPCFor(url)
			}
		}
		key := sc.Key("repeat")
		req := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL()), Holder: "conformance", RequestId: randomHex(16)}
		first, err := sc.RPC.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.GetAcquired()).To(BeTrue())
		again, err := rpc2.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.GetAcquired()).To(BeTrue())
		Expect(again.GetLease().GetOwnerToken()).To(Equal(first.GetLease().GetOwnerToken()))
		Expect(again.GetLease().GetFencingToken()).To(Equal(first.GetLease().GetFencingToken()))
		changed := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL() / 2), Holder: "conformance", RequestId: req.GetRequestId()}
		_, err = rpc2.Acquire(ctx, changed)
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "a repeat with another ttl: %v", err)
		Expect(err.Error()).To(ContainSubstring("request_id"))

		rel := &lockv1.ReleaseRequest{Key: key, OwnerToken: first.GetLease().GetOwnerToken(), RequestId: randomHex(16)}
		r1, err := sc.RPC.Release(ctx, rel)
		Expect(err).NotTo(HaveOccurred())
		Expect(r1.GetReleased()).To(BeTrue())
		r2, err := rpc2.Release(ctx, rel)
		Expect(err).NotTo(HaveOccurred())
		Expect(r2.GetReleased()).To(BeTrue(), "a repeated Release was not answered as the first")
	}, SpecTimeout(time.Minute))

	It("refuses a request_id shorter than 16 bytes, naming the field", func(ctx SpecContext) {
		_, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: sc.Key("short"), Ttl: durationpb.New(sc.LongTTL()), RequestId: "abc"})
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument))
		Expect(err.Error()).To(ContainSubstring("request_id: 3 bytes"))
	}, SpecTimeout(30*time.Second))
})

// Lock-delay through the API: after an expiry, not after a release.
var _ = describeService("lock-delay", Label("lock-delay"), func(sc *ServiceContext) {
	BeforeEach(func() {
		if !sc.hasCap(lockv1.Capability_CAPABILITY_LOCK_DELAY) {
			Skip("the backend does not declare CAPABILITY_LOCK_DELAY")
		}
	})
	delay := func() time.Duration {
		return min(sc.Backend().GetMaxLockDelay().AsDuration(), max(time.Second, 2*sc.Backend().GetTtlGranularity().AsDuration()))
	}

	It("holds a key through its lock-delay after an expiry, shows it in Inspect, and serves a waiter after it", func(ctx SpecContext) {
		key := sc.Key("delay")
		d := delay()
		sent := time.Now()
		res, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.TTL()), LockDelay: durationpb.New(d)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		Expect(res.GetLease().GetLockDelay().AsDuration()).To(Equal(d))
		var ins *lockv1.InspectResponse
		Eventually(ctx, func() bool {
			ins, err = sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			Expect(err).NotTo(HaveOccurred())
			return ins.GetHeld()
		}).WithTimeout(sc.FreeWithin()).WithPolling(5 * time.Millisecond).Should(BeFalse())
		Expect(ins.GetDelayed().GetKey()).To(Equal(key), "Inspect does not show the lock-delay")
		Expect(ins.GetDelayed().GetRemaining().AsDuration()).To(BeNumerically(">", 0))
		try, err := sc.Acquire(ctx, sc.RPC, key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(try.GetAcquired()).To(BeFalse(), "taken during the lock-delay")
		Expect(try.GetDelayed().GetKey()).To(Equal(key), "the refusal does not say why")
		waited, err := sc.Acquire(ctx, sc.RPC, key, sc.LongTTL(), 20*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(waited.GetAcquired()).To(BeTrue(), "a waiter was not served after the lock-delay")
		Expect(time.Since(sent)).To(BeNumerically(">=", sc.TTL()+d), "served before TTL + lock-delay")
		Expect(sc.Release(ctx, key, waited.GetLease().GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(time.Minute))

	It("leaves no lock-delay after a release", func(ctx SpecContext) {
		key := sc.Key("released")
		res, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(sc.LongTTL()), LockDelay: durationpb.New(delay())})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		Expect(sc.Release(ctx, key, res.GetLease().GetOwnerToken())).To(BeTrue())
		again, err := sc.Acquire(ctx, sc.RPC, key, sc.LongTTL(), 0)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.GetAcquired()).To(BeTrue(), "a released key kept a lock-delay")
	}, SpecTimeout(30*time.Second))

	It("refuses a lock_delay above max_lock_delay, naming the limit", func(ctx SpecContext) {
		over := sc.Backend().GetMaxLockDelay().AsDuration() + time.Second
		_, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: sc.Key("over"), Ttl: durationpb.New(sc.LongTTL()), LockDelay: durationpb.New(over)})
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument))
		Expect(err.Error()).To(ContainSubstring("lock_delay"))
		Expect(err.Error()).To(ContainSubstring("exceeds the maximum"))
	}, SpecTimeout(30*time.Second))
})
