package conformance

import (
	"strings"
	"time"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Promise 3 at the API.
var _ = describeService("TTL", Label("ttl"), func(sc *ServiceContext) {
	It("holds a lock for at least its TTL and frees it within TTL + granularity + slack", func(ctx SpecContext) {
		key := sc.Key("ttl")
		ttl := sc.TTL()
		sent := time.Now()
		first := sc.MustAcquire(ctx, key, ttl)
		answered := time.Now()
		Expect(first.GetTtl().AsDuration()).To(Equal(ttl), "the lease must state its TTL")

		next, freeAt, lastRefusedSent, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("acquired with TTL "+ttl.String()+", taken over after", freeAt.Sub(sent).String(), ReportEntryVisibilityFailureOrVerbose)
		Expect(freeAt.Sub(sent)).To(BeNumerically(">=", ttl), "taken over %s after an acquire with TTL %s", freeAt.Sub(sent), ttl)
		if !lastRefusedSent.IsZero() {
			Expect(lastRefusedSent.Sub(answered)).To(BeNumerically("<=", sc.FreeWithin()),
				"still held %s after acquisition (TTL %s + granularity + slack %s)", lastRefusedSent.Sub(answered), ttl, sc.Config.Slack)
		}
		Expect(next.GetFencingToken()).To(BeNumerically(">", first.GetFencingToken()))
	}, SpecTimeout(30*time.Second))

	It("refuses a TTL outside the backend's bounds with invalid_argument naming the field, and changes nothing", Label("bad-input"), func(ctx SpecContext) {
		key := sc.Key("ttl-bounds")
		bad := []time.Duration{0, -time.Second}
		if hi := sc.Backend().GetMaxTtl().AsDuration(); hi > 0 {
			bad = append(bad, hi+time.Second)
		}
		if lo := sc.Backend().GetMinTtl().AsDuration(); lo > time.Millisecond {
			bad = append(bad, lo/2)
		}
		for _, ttl := range bad {
			_, err := sc.RPC.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl)})
			Expect(codeOf(err)).To(Equal(connect.CodeInvalidArgument), "Acquire with ttl %s: %v", ttl, err)
			Expect(strings.ToLower(err.Error())).To(ContainSubstring("ttl"), "the message must name the field")
		}
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeFalse(), "a refused Acquire took the lock")
	}, SpecTimeout(30*time.Second))
})
