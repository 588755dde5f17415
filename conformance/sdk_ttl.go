package conformance

import (
	"syscall"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promises 2 and 3 through an SDK: a holder that stops running (a GC pause,
// a stopped VM: here SIGSTOP of the adapter's process group) keeps its lock
// for the TTL and no longer; once it runs again, its SDK knows the lease is
// gone and its stale owner token cannot touch the successor's lock.
var _ = describeSDK("TTL", Label("ttl"), func(sc *SDKContext) {
	It("keeps an SDK lock for at least its TTL after the holder pauses, frees it within TTL + granularity + slack, and the SDK reports the loss when it resumes", Label("disruptive"), func(ctx SpecContext) {
		a, err := sc.StartAdapter(ctx)
		Expect(err).NotTo(HaveOccurred())
		c := sc.Connect(ctx, a, sc.URL, "")
		key := sc.Key("sdk-ttl")
		ttl := sc.TTL()
		sent := time.Now()
		l := c.MustLock(ctx, key, ttl)
		DeferCleanup(func() { _ = a.Signal(syscall.SIGCONT) })
		Expect(a.Signal(syscall.SIGSTOP)).To(Succeed())
		// Any renewal the watchdog sent was sent before this moment.
		stopped := time.Now()

		next, freeAt, lastRefusedSent, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("SDK lock with TTL "+ttl.String()+", paused holder, taken over after", freeAt.Sub(sent).String(), ReportEntryVisibilityFailureOrVerbose)
		Expect(freeAt.Sub(sent)).To(BeNumerically(">=", ttl), "taken over %s after an SDK lock with TTL %s", freeAt.Sub(sent), ttl)
		if !lastRefusedSent.IsZero() {
			Expect(lastRefusedSent.Sub(stopped)).To(BeNumerically("<=", sc.FreeWithin()),
				"still held %s after the holder paused (TTL %s + granularity + slack %s)", lastRefusedSent.Sub(stopped), ttl, sc.Config.Slack)
		}
		Expect(next.GetFencingToken()).To(BeNumerically(">", uint64(l.FencingToken)))

		Expect(a.Signal(syscall.SIGCONT)).To(Succeed())
		st := c.GuardState(ctx, l.Guard)
		Expect(st.State).To(Equal(sdkrunner.StateLost), "the guard of a lease that ran out while its holder was paused")
		Expect(st.Reason).To(Equal(sdkrunner.ReasonExpired))
		_, err = c.FencingToken(ctx, l.Guard)
		Expect(err).To(BeKind(sdkrunner.KindLeaseLost), "fencing_token of a guard whose lease ran out")
	}, SpecTimeout(30*time.Second))
})
