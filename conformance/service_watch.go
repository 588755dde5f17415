package conformance

import (
	"context"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = describeService("watch", Label("watch"), func(sc *ServiceContext) {
	It("streams synced first, then acquired and released events for the prefix", func(ctx SpecContext) {
		prefix := sc.Key("watch/")
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := sc.RPC.Watch(wctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: prefix}})
		Expect(err).NotTo(HaveOccurred())
		defer stream.Close()
		events := make(chan *lockv1.WatchResponse, 64)
		go func() {
			defer close(events)
			for stream.Receive() {
				events <- stream.Msg()
			}
		}()
		next := func() *lockv1.WatchResponse {
			GinkgoHelper()
			var e *lockv1.WatchResponse
			Eventually(events).WithTimeout(5*time.Second).Should(Receive(&e), "no watch event")
			Expect(e).NotTo(BeNil(), "the watch stream ended: %v", stream.Err())
			return e
		}
		Expect(next().GetType()).To(Equal(lockv1.EventType_EVENT_TYPE_SYNCED))

		key := prefix + "a"
		l := sc.MustAcquire(ctx, key, sc.LongTTL())
		e := next()
		Expect(e.GetType()).To(Equal(lockv1.EventType_EVENT_TYPE_ACQUIRED))
		Expect(e.GetState().GetKey()).To(Equal(key))
		Expect(e.GetState().GetFencingToken()).To(Equal(l.GetFencingToken()))
		Expect(sc.Release(ctx, key, l.GetOwnerToken())).To(BeTrue())
		e = next()
		Expect(e.GetType()).To(Equal(lockv1.EventType_EVENT_TYPE_RELEASED))
		Expect(e.GetState().GetKey()).To(Equal(key))
		cancel()
	}, SpecTimeout(30*time.Second))
})
