package conformance

import (
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Read-write locks through an SDK (docs/sdk-behaviour.md, "Semaphores and
// read-write locks"): readers share the key, a writer holds it alone, and
// waiters are served strictly in arrival order.
var _ = describeSDK("rwlock", Label("rwlock"), func(sc *SDKContext) {
	BeforeEach(func() { sc.needKind(sdkrunner.CapRWLock) })

	It("lets readers share the key and a writer hold it alone, with fencing tokens increasing over every grant", func(ctx SpecContext) {
		key := sc.Key("sdk-rw-share")
		c1, c2, c3 := sc.SDK(ctx), sc.SDK(ctx), sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		r1, err := c1.LockWith(ctx, rwArgs(key, sdkrunner.ModeShared, long, true))
		Expect(err).NotTo(HaveOccurred(), "a reader of a free key")
		Expect(r1.Kind).To(Equal(sdkrunner.LockKindRWLock), "the guard's kind")
		Expect(r1.Mode).To(Equal(sdkrunner.ModeShared), "a reader's mode")
		Expect(r1.Permits).To(Equal(1), "an rwlock grant's permits")
		r2, err := c2.LockWith(ctx, rwArgs(key, sdkrunner.ModeShared, long, true))
		Expect(err).NotTo(HaveOccurred(), "a second reader beside the first")
		Expect(r2.FencingToken).To(BeNumerically(">", r1.FencingToken))
		st := c3.Inspect(ctx, key)
		Expect(st.State).NotTo(BeNil())
		Expect(st.State.Kind).To(Equal(sdkrunner.LockKindRWLock), "inspect: the key's kind")
		Expect(st.State.Holders).To(HaveLen(2), "inspect: both readers")
		for _, h := range st.State.Holders {
			Expect(h.Mode).To(Equal(sdkrunner.ModeShared), "inspect: a reader's mode")
		}
		_, err = c3.LockWith(ctx, rwArgs(key, sdkrunner.ModeExclusive, long, true))
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired), "a writer while readers hold")
		Expect(c1.Unlock(ctx, r1.Guard)).To(Succeed())
		_, err = c3.LockWith(ctx, rwArgs(key, sdkrunner.ModeExclusive, long, true))
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired), "a writer while one reader still holds")
		Expect(c2.Unlock(ctx, r2.Guard)).To(Succeed())

		w, err := c3.LockWith(ctx, rwArgs(key, sdkrunner.ModeExclusive, long, true))
		Expect(err).NotTo(HaveOccurred(), "a writer once the readers left")
		Expect(w.Mode).To(Equal(sdkrunner.ModeExclusive), "a writer's mode")
		Expect(w.FencingToken).To(BeNumerically(">", r2.FencingToken))
		_, err = c1.LockWith(ctx, rwArgs(key, sdkrunner.ModeShared, long, true))
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired), "a reader while a writer holds")
		_, err = c2.LockWith(ctx, rwArgs(key, sdkrunner.ModeExclusive, long, true))
		Expect(err).To(BeKind(sdkrunner.KindNotAcquired), "a second writer")
		Expect(c3.Unlock(ctx, w.Guard)).To(Succeed())
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "every grant released")
	}, SpecTimeout(time.Minute))

	It("serves waiters strictly in arrival order: a reader arriving behind a waiting writer waits for the writer, though readers hold", func(ctx SpecContext) {
		key := sc.Key("sdk-rw-fifo")
		c1, c2, c3 := sc.SDK(ctx), sc.SDK(ctx), sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		r1, err := c1.LockWith(ctx, rwArgs(key, sdkrunner.ModeShared, long, true))
		Expect(err).NotTo(HaveOccurred())
		writer := c2.SendLock(rwArgs(key, sdkrunner.ModeExclusive, long, false, 20*time.Second))
		sc.AwaitQueued(ctx, sc.RPC, key, 1, writer)
		reader := c3.SendLock(rwArgs(key, sdkrunner.ModeShared, long, false, 20*time.Second))
		// Queued (not granted beside r1): AwaitQueued fails at once if the
		// reader's lock answers instead.
		sc.AwaitQueued(ctx, sc.RPC, key, 2, reader)

		Expect(c1.Unlock(ctx, r1.Guard)).To(Succeed())
		var w sdkrunner.LockResult
		Expect(writer.Wait(ctx, &w)).To(Succeed(), "the writer at the head of the queue")
		Expect(w.FencingToken).To(BeNumerically(">", r1.FencingToken))
		sc.AwaitQueued(ctx, sc.RPC, key, 1, reader)
		Expect(c2.Unlock(ctx, w.Guard)).To(Succeed())
		var r sdkrunner.LockResult
		Expect(reader.Wait(ctx, &r)).To(Succeed(), "the reader after the writer")
		Expect(r.FencingToken).To(BeNumerically(">", w.FencingToken))
		Expect(c3.Unlock(ctx, r.Guard)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("answers failed_precondition for a read-write lock's key taken as a lock or a semaphore, and a lock's key taken as a read-write lock", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		long := sc.LongTTL().Milliseconds()
		key := sc.Key("sdk-rw-mismatch")
		r, err := c.LockWith(ctx, rwArgs(key, sdkrunner.ModeShared, long, true))
		Expect(err).NotTo(HaveOccurred())
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: long, Try: true})
		Expect(err).To(HaveCode("failed_precondition"), "a read-write lock's key taken as a lock")
		_, err = c.LockWith(ctx, semArgs(key, 3, nil, long, true))
		Expect(err).To(HaveCode("failed_precondition"), "a read-write lock's key taken as a semaphore")
		Expect(c.Unlock(ctx, r.Guard)).To(Succeed())

		lockKey := sc.Key("sdk-rw-mismatch-lock")
		held := sc.MustAcquire(ctx, lockKey, sc.LongTTL())
		_, err = c.LockWith(ctx, rwArgs(lockKey, sdkrunner.ModeShared, long, true))
		Expect(err).To(HaveCode("failed_precondition"), "a held lock's key taken as a read-write lock")
		Expect(sc.Release(ctx, lockKey, held.GetOwnerToken())).To(BeTrue())
	}, SpecTimeout(30*time.Second))
})

// rwArgs is a lock of the read-write lock key in mode: one attempt when
// try, else waiting for wait (the first of waits).
func rwArgs(key, mode string, ttlMs int64, try bool, waits ...time.Duration) sdkrunner.LockArgs {
	a := sdkrunner.LockArgs{Key: key, Kind: sdkrunner.LockKindRWLock, Mode: mode, TTLMs: ttlMs, Try: try}
	if len(waits) > 0 {
		a.WaitMs = waits[0].Milliseconds()
	}
	return a
}
