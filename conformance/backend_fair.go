package conformance

import (
	"context"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 7 across servers, the backend's part: a backend that declares
// fair=true keeps one queue per key in the store (backend.FairBackend). Only
// the head of a key's queue may take it when it is free, and a caller with no
// entry only when nobody is queued; a waiter that leaves hands the turn on at
// once; and an entry never outlives a waiter that took it back, so an
// Enqueue whose outcome the caller did not learn (it retries with the same
// waiter ID, or dequeues) cannot block the key.
var _ = describeBackend("fair queue", Label("fair"), func(sc *BackendContext) {
	fairOf := func(b backend.Backend) backend.FairBackend {
		GinkgoHelper()
		if !sc.Info.Fair {
			Skip("the backend declares fair=false: waiters are served in order within one server only, by the server")
		}
		f, ok := b.(backend.FairBackend)
		Expect(ok).To(BeTrue(), "the plugin host does not offer the queue calls")
		return f
	}
	// acquireAs tries key as waiterID ("" for a caller with no entry).
	acquireAs := func(ctx context.Context, f backend.FairBackend, key, waiterID string) (backend.AcquireRequest, backend.AcquireResult) {
		GinkgoHelper()
		req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: sc.LongTTL(), Holder: "fair", Stamp: sc.Stamp(), WaiterID: waiterID}
		res, err := f.Acquire(ctx, req)
		Expect(err).NotTo(HaveOccurred(), "Acquire %q as waiter %q", key, waiterID)
		return req, res
	}
	release := func(ctx context.Context, f backend.FairBackend, req backend.AcquireRequest) {
		GinkgoHelper()
		ok, err := f.Release(ctx, backend.ReleaseRequest{Key: req.Key, OwnerToken: req.OwnerToken, Stamp: sc.Stamp()})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "release of %q by waiter %q", req.Key, req.WaiterID)
	}
	// turn runs WaitTurn in the background; its answer arrives on the channel.
	type answer struct {
		queued bool
		err    error
	}
	turn := func(ctx context.Context, f backend.FairBackend, key, waiterID string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			ok, err := f.WaitTurn(ctx, key, waiterID)
			out <- answer{ok, err}
		}()
		return out
	}
	// soon is how quickly a WaitTurn must answer once its turn came, or once
	// it was cancelled: "at once", with the configured slack for a loaded
	// machine. A backend that polls its queue every few hundred milliseconds
	// misses it.
	soon := func() time.Duration { return sc.Config.Slack }

	// queueOrder checks the arrival order of three waiters, the i-th queued
	// through hosts[i%len(hosts)].
	queueOrder := func(ctx context.Context, hosts []backend.FairBackend) {
		GinkgoHelper()
		key := sc.Key("fair-order")
		holderReq, res := acquireAs(ctx, hosts[0], key, "")
		Expect(res.Acquired).To(BeTrue(), "a free key with an empty queue")
		ids := []string{sc.Token(), sc.Token(), sc.Token()}
		host := func(i int) backend.FairBackend { return hosts[i%len(hosts)] }
		for i, id := range ids {
			Expect(host(i).Enqueue(ctx, key, id)).To(Succeed(), "Enqueue of waiter %d", i)
		}
		release(ctx, hosts[0], holderReq)

		for _, h := range hosts {
			_, res = acquireAs(ctx, h, key, "")
			Expect(res.Acquired).To(BeFalse(), "a caller with no entry took a free key while waiters were queued")
		}
		_, res = acquireAs(ctx, host(1), key, ids[1])
		Expect(res.Acquired).To(BeFalse(), "the second waiter took the key before the first")
		_, held, err := hosts[0].Get(ctx, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(held).To(BeFalse(), "a refused Acquire took the key")

		for i, id := range ids {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var a answer
			Eventually(turn(tctx, host(i), key, id)).WithTimeout(10*time.Second).Should(Receive(&a), "waiter %d's turn", i)
			cancel()
			Expect(a.err).NotTo(HaveOccurred(), "WaitTurn of waiter %d, the head", i)
			Expect(a.queued).To(BeTrue(), "WaitTurn of waiter %d, the head, answered that its entry is gone", i)
			req, res := acquireAs(ctx, host(i), key, id)
			Expect(res.Acquired).To(BeTrue(), "waiter %d, the head, could not take the free key", i)
			if i+1 < len(ids) {
				_, again := acquireAs(ctx, host(i+1), key, ids[i+1])
				Expect(again.Acquired).To(BeFalse(), "waiter %d took a held key", i+1)
				Expect(again.Record.FencingToken).To(Equal(res.Record.FencingToken), "a refused waiter is shown the holder")
			}
			release(ctx, host(i), req)
		}
		req, res := acquireAs(ctx, hosts[len(hosts)-1], key, "")
		Expect(res.Acquired).To(BeTrue(), "the queue is empty, yet a caller with no entry cannot take the free key")
		release(ctx, hosts[len(hosts)-1], req)
	}

	It("lets only the head of a key's queue take it, in arrival order, and never a caller with no entry while waiters are queued", func(ctx SpecContext) {
		queueOrder(ctx, []backend.FairBackend{fairOf(sc.Backend)})
	}, SpecTimeout(time.Minute))

	It("keeps one queue per key across two plugin instances", Label("sharing"), func(ctx SpecContext) {
		f := fairOf(sc.Backend)
		if !sc.Info.Shared {
			Skip("the backend declares shared=false: each plugin instance has its own queues")
		}
		other, err := sc.StartPlugin(ctx)
		Expect(err).NotTo(HaveOccurred(), "starting a second plugin instance")
		defer other.Close()
		queueOrder(ctx, []backend.FairBackend{f, fairOf(other)})
	}, SpecTimeout(time.Minute))

	It("hands the turn to the next waiter at once when the head leaves, and answers a cancelled WaitTurn at once", func(ctx SpecContext) {
		f := fairOf(sc.Backend)
		key := sc.Key("fair-leave")
		holderReq, res := acquireAs(ctx, f, key, "")
		Expect(res.Acquired).To(BeTrue())
		first, second := sc.Token(), sc.Token()
		Expect(f.Enqueue(ctx, key, first)).To(Succeed())
		Expect(f.Enqueue(ctx, key, second)).To(Succeed())

		cctx, cancel := context.WithCancel(ctx)
		waiting := turn(cctx, f, key, second)
		Consistently(waiting).WithTimeout(100*time.Millisecond).ShouldNot(Receive(), "WaitTurn answered while another waiter was ahead")
		cancelled := time.Now()
		cancel()
		Eventually(waiting).WithTimeout(10*time.Second).Should(Receive(), "a cancelled WaitTurn never returned")
		Expect(time.Since(cancelled)).To(BeNumerically("<=", soon()), "a cancelled WaitTurn returned %s after the cancel", time.Since(cancelled))

		waiting = turn(ctx, f, key, second)
		Consistently(waiting).WithTimeout(100*time.Millisecond).ShouldNot(Receive(), "WaitTurn answered while another waiter was ahead")
		left := time.Now()
		Expect(f.Dequeue(ctx, key, first)).To(Succeed(), "the head leaves")
		var a answer
		Eventually(waiting).WithTimeout(10*time.Second).Should(Receive(&a), "the next waiter was never told its turn")
		Expect(time.Since(left)).To(BeNumerically("<=", soon()), "the next waiter was told its turn %s after the head left", time.Since(left))
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.queued).To(BeTrue())

		release(ctx, f, holderReq)
		req, res := acquireAs(ctx, f, key, second)
		Expect(res.Acquired).To(BeTrue(), "the head could not take the key once free")
		release(ctx, f, req)
	}, SpecTimeout(time.Minute))

	It("never lets an entry whose Enqueue had an unknown outcome block the key: Enqueue again keeps one entry, Dequeue of an entry present or not leaves none", func(ctx SpecContext) {
		f := fairOf(sc.Backend)
		key := sc.Key("fair-unknown")
		holderReq, res := acquireAs(ctx, f, key, "")
		Expect(res.Acquired).To(BeTrue())
		// A caller that did not learn whether its Enqueue went through
		// either sends it again with the same waiter ID or takes it back.
		unsure, next := sc.Token(), sc.Token()
		Expect(f.Enqueue(ctx, key, unsure)).To(Succeed())
		Expect(f.Enqueue(ctx, key, unsure)).To(Succeed(), "Enqueue again of a queued waiter")
		Expect(f.Enqueue(ctx, key, next)).To(Succeed())
		Expect(f.Dequeue(ctx, key, unsure)).To(Succeed())
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var a answer
		Eventually(turn(tctx, f, key, next)).WithTimeout(10*time.Second).Should(Receive(&a), "an entry enqueued twice and dequeued once still blocks the next waiter")
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.queued).To(BeTrue())

		Expect(f.Dequeue(ctx, key, next)).To(Succeed())
		for _, id := range []string{next, unsure, sc.Token()} {
			Expect(f.Dequeue(ctx, key, id)).To(Succeed(), "Dequeue of a waiter that is not queued must be a no-op")
		}
		absent := sc.Token()
		sent := time.Now()
		ok, err := f.WaitTurn(tctx, key, absent)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse(), "WaitTurn of a waiter that is not queued answered that it is")
		Expect(time.Since(sent)).To(BeNumerically("<=", soon()), "WaitTurn of a waiter that is not queued took %s", time.Since(sent))

		release(ctx, f, holderReq)
		_, res = acquireAs(ctx, f, key, unsure)
		Expect(res.Acquired).To(BeFalse(), "a waiter whose entry was taken back took the key")
		req, res := acquireAs(ctx, f, key, "")
		Expect(res.Acquired).To(BeTrue(), "every entry was taken back, yet a caller with no entry cannot take the free key (holder %+v)", res.Record)
		release(ctx, f, req)
	}, SpecTimeout(time.Minute))
	// The engine reuses a waiter ID once its entries are gone (a winning
	// Acquire or a Dequeue removed them): the ID queued again is a new entry
	// at the tail, and a waiter behind its old entry is not held up by it.
	It("treats a waiter ID queued again after it left as a new entry at the tail", func(ctx SpecContext) {
		f := fairOf(sc.Backend)
		key := sc.Key("fair-reused")
		holderReq, res := acquireAs(ctx, f, key, "")
		Expect(res.Acquired).To(BeTrue())
		reused, behind := sc.Token(), sc.Token()
		Expect(f.Enqueue(ctx, key, reused)).To(Succeed())
		Expect(f.Enqueue(ctx, key, behind)).To(Succeed())
		Expect(f.Dequeue(ctx, key, reused)).To(Succeed(), "the head leaves")
		Expect(f.Enqueue(ctx, key, reused)).To(Succeed(), "the head's ID queued again")

		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var a answer
		sent := time.Now()
		Eventually(turn(tctx, f, key, behind)).WithTimeout(10*time.Second).Should(Receive(&a), "the waiter behind the ID's old entry was never told its turn")
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.queued).To(BeTrue(), "WaitTurn of the head answered that its entry is gone")
		Expect(time.Since(sent)).To(BeNumerically("<=", soon()), "the head was told its turn %s after it asked: it waited for the ID queued again behind it", time.Since(sent))

		waiting := turn(tctx, f, key, reused)
		Consistently(waiting).WithTimeout(100*time.Millisecond).ShouldNot(Receive(), "the ID queued again was told its turn while a waiter queued before it was still there")
		release(ctx, f, holderReq)
		_, res = acquireAs(ctx, f, key, reused)
		Expect(res.Acquired).To(BeFalse(), "the ID queued again took the key back from the waiter queued before it")
		req, res := acquireAs(ctx, f, key, behind)
		Expect(res.Acquired).To(BeTrue(), "the head could not take the free key")
		Eventually(waiting).WithTimeout(10*time.Second).Should(Receive(&a), "the ID queued again was never told its turn once the head took the key")
		Expect(a.err).NotTo(HaveOccurred())
		Expect(a.queued).To(BeTrue())
		release(ctx, f, req)
		req, res = acquireAs(ctx, f, key, reused)
		Expect(res.Acquired).To(BeTrue(), "the ID queued again, now the head, could not take the free key")
		release(ctx, f, req)
	}, SpecTimeout(time.Minute))
})
