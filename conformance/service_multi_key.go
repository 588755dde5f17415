package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// hasCap reports whether the server's backend declares c.
func (sc *ServiceContext) hasCap(c lockv1.Capability) bool {
	return slices.Contains(sc.Backend().GetCapabilities(), c)
}

// AcquireSet sends one raw Acquire of keys (claims) with wait.
func (sc *ServiceContext) AcquireSet(ctx context.Context, rpc lockv1connect.LockServiceClient, ttl, wait time.Duration, keys ...string) (*lockv1.AcquireResponse, error) {
	req := &lockv1.AcquireRequest{Ttl: durationpb.New(ttl), Holder: "conformance"}
	for _, k := range keys {
		req.Claims = append(req.Claims, &lockv1.Claim{Key: k})
	}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return rpc.Acquire(ctx, req)
}

// Multi-key leases through the API: all or nothing, in arrival order, never
// deadlocked by overlapping sets.
var _ = describeService("multi-key", Label("multi-key"), func(sc *ServiceContext) {
	BeforeEach(func() {
		if !sc.hasCap(lockv1.Capability_CAPABILITY_MULTI_KEY) {
			Skip("the backend does not declare CAPABILITY_MULTI_KEY")
		}
	})

	It("answers a set with a fencing token per key, in the order asked, and releases and extends it as one", func(ctx SpecContext) {
		a, b := sc.Key("a"), sc.Key("b")
		res, err := sc.AcquireSet(ctx, sc.RPC, sc.LongTTL(), 0, b, a)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.GetAcquired()).To(BeTrue())
		l := res.GetLease()
		Expect(l.GetKeys()).To(HaveLen(2))
		Expect(l.GetKeys()[0].GetKey()).To(Equal(b))
		Expect(l.GetKeys()[1].GetKey()).To(Equal(a))
		for _, k := range l.GetKeys() {
			ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: k.GetKey()})
			Expect(err).NotTo(HaveOccurred())
			Expect(ins.GetState().GetFencingToken()).To(Equal(k.GetFencingToken()))
		}
		ext, err := sc.RPC.Extend(ctx, &lockv1.ExtendRequest{Keys: []string{a, b}, OwnerToken: l.GetOwnerToken(), Ttl: durationpb.New(sc.LongTTL())})
		Expect(err).NotTo(HaveOccurred())
		Expect(ext.GetExtended()).To(BeTrue())
		rel, err := sc.RPC.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{a, b}, OwnerToken: l.GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue())
		for _, k := range []string{a, b} {
			ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: k})
			Expect(err).NotTo(HaveOccurred())
			Expect(ins.GetHeld()).To(BeFalse())
		}
	}, SpecTimeout(30*time.Second))

	It("refuses more keys than max_keys, a key named twice, and key beside claims, naming the field", func(ctx SpecContext) {
		limit := int(sc.Backend().GetMaxKeys())
		keys := make([]string, limit+1)
		for i := range keys {
			keys[i] = sc.Key(fmt.Sprintf("k%d", i))
		}
		_, err := sc.AcquireSet(ctx, sc.RPC, sc.LongTTL(), 0, keys...)
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "%d keys: %v", len(keys), err)
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("claims: %d keys exceeds the maximum %d", len(keys), limit)))
		_, err = sc.AcquireSet(ctx, sc.RPC, sc.LongTTL(), 0, keys[0], keys[1], keys[0])
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument))
		Expect(err.Error()).To(ContainSubstring("named twice"))
		_, err = sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: keys[0], Claims: []*lockv1.Claim{{Key: keys[1]}}, Ttl: durationpb.New(sc.LongTTL())})
		Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument))
		Expect(err.Error()).To(ContainSubstring("key and claims"))
	}, SpecTimeout(30*time.Second))

	It("never lets racing overlapping sets both win a key, across servers sharing the backend", func(ctx SpecContext) {
		rpcs := []lockv1connect.LockServiceClient{sc.RPC}
		if sc.Backend().GetShared() {
			if url, err := sc.SecondURL(ctx); err == nil && url != "" {
				rpcs = append(rpcs, sc.RPCFor(url))
			}
		}
		pool := []string{sc.Key("p0"), sc.Key("p1"), sc.Key("p2"), sc.Key("p3")}
		for round := range 3 {
			r := rand.New(rand.NewPCG(uint64(round), 11))
			n := min(sc.Config.Racers, 16)
			sets := make([][]string, n)
			for i := range sets {
				keys := slices.Clone(pool)
				r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
				sets[i] = keys[:2+r.IntN(min(3, int(sc.Backend().GetMaxKeys())-1))]
			}
			leases := make([]*lockv1.Lease, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range sets {
				wg.Go(func() {
					defer GinkgoRecover()
					<-start
					res, err := sc.AcquireSet(ctx, rpcs[i%len(rpcs)], sc.LongTTL(), 0, sets[i]...)
					Expect(err).NotTo(HaveOccurred())
					if res.GetAcquired() {
						leases[i] = res.GetLease()
					}
				})
			}
			close(start)
			wg.Wait()
			owner := map[string]int{}
			for i, l := range leases {
				if l == nil {
					continue
				}
				for _, k := range sets[i] {
					j, taken := owner[k]
					Expect(taken).To(BeFalse(), "round %d: sets %d %v and %d %v both won %q", round, j, sets[j], i, sets[i], k)
					owner[k] = i
				}
			}
			Expect(owner).NotTo(BeEmpty(), "round %d: nobody won", round)
			for i, l := range leases {
				if l != nil {
					rel, err := sc.RPC.Release(ctx, &lockv1.ReleaseRequest{Keys: sets[i], OwnerToken: l.GetOwnerToken()})
					Expect(err).NotTo(HaveOccurred())
					Expect(rel.GetReleased()).To(BeTrue())
				}
			}
		}
	}, SpecTimeout(time.Minute))

	It("serves a random workload of waiting overlapping sets and single keys without deadlock or overlap, in bounded time", func(ctx SpecContext) {
		pool := []string{sc.Key("w0"), sc.Key("w1"), sc.Key("w2"), sc.Key("w3"), sc.Key("w4")}
		const workers, rounds = 6, 6
		var mu sync.Mutex
		holder := map[string]int{}
		var wg sync.WaitGroup
		deadline := time.Now().Add(45 * time.Second)
		for w := range workers {
			wg.Go(func() {
				defer GinkgoRecover()
				r := rand.New(rand.NewPCG(uint64(w), 5))
				for round := range rounds {
					keys := slices.Clone(pool)
					r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
					keys = keys[:1+r.IntN(min(3, int(sc.Backend().GetMaxKeys())))]
					var res *lockv1.AcquireResponse
					var err error
					if len(keys) == 1 {
						res, err = sc.Acquire(ctx, sc.RPC, keys[0], sc.LongTTL(), time.Until(deadline))
					} else {
						res, err = sc.AcquireSet(ctx, sc.RPC, sc.LongTTL(), time.Until(deadline), keys...)
					}
					Expect(err).NotTo(HaveOccurred())
					Expect(res.GetAcquired()).To(BeTrue(), "worker %d round %d %v was not served within the wait: a deadlock or starvation", w, round, keys)
					mu.Lock()
					for _, k := range keys {
						if h, ok := holder[k]; ok {
							Fail(fmt.Sprintf("workers %d and %d hold %q at once", w, h, k))
						}
						holder[k] = w
					}
					mu.Unlock()
					time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond) // the critical section
					mu.Lock()
					for _, k := range keys {
						delete(holder, k)
					}
					mu.Unlock()
					rel := &lockv1.ReleaseRequest{OwnerToken: res.GetLease().GetOwnerToken()}
					if len(keys) == 1 {
						rel.Key = keys[0]
					} else {
						rel.Keys = keys
					}
					out, err := sc.RPC.Release(ctx, rel)
					Expect(err).NotTo(HaveOccurred())
					Expect(out.GetReleased()).To(BeTrue())
				}
			})
		}
		wg.Wait()
	}, SpecTimeout(time.Minute))

	It("serves a waiting set before single-key waiters that came after it", func(ctx SpecContext) {
		a, b := sc.Key("a"), sc.Key("b")
		held := sc.MustAcquire(ctx, a, sc.LongTTL())
		type won struct {
			who string
			res *lockv1.AcquireResponse
		}
		wins := make(chan won, 2)
		go func() {
			defer GinkgoRecover()
			res, err := sc.AcquireSet(ctx, sc.RPC, sc.LongTTL(), 20*time.Second, a, b)
			Expect(err).NotTo(HaveOccurred())
			wins <- won{"set", res}
		}()
		Eventually(ctx, func() uint32 {
			ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: a})
			Expect(err).NotTo(HaveOccurred())
			return ins.GetState().GetWaiters()
		}).WithTimeout(5 * time.Second).WithPolling(2 * time.Millisecond).Should(BeNumerically("==", 1))
		// b is free, but the set queued for it first: a later waiter for b
		// waits behind the set.
		go func() {
			defer GinkgoRecover()
			res, err := sc.Acquire(ctx, sc.RPC, b, sc.LongTTL(), 20*time.Second)
			Expect(err).NotTo(HaveOccurred())
			wins <- won{"b", res}
		}()
		Consistently(wins).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "a waiter barged past a set that queued first")
		Expect(sc.Release(ctx, a, held.GetOwnerToken())).To(BeTrue())
		var first won
		Eventually(wins).WithTimeout(10 * time.Second).Should(Receive(&first))
		Expect(first.who).To(Equal("set"), "the waiter for b came after the set but was served first")
		rel, err := sc.RPC.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{a, b}, OwnerToken: first.res.GetLease().GetOwnerToken()})
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.GetReleased()).To(BeTrue())
		var second won
		Eventually(wins).WithTimeout(10 * time.Second).Should(Receive(&second))
		Expect(second.res.GetAcquired()).To(BeTrue())
		Expect(sc.Release(ctx, b, second.res.GetLease().GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(time.Minute))
})
