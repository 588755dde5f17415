package conformance

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "Durations and validation": what an SDK refuses
// before it sends anything, and what it leaves to the server.
//
// "Before anything is sent" is checked against an address nothing listens
// on: an SDK that sent the request would retry the refused connection for
// its retry budget (set to 3s here) and answer unavailable; an SDK that
// validates first answers invalid_argument at once.
var _ = describeSDK("behaviour table: durations and validation", Label("sdk-behaviour", "bad-input", "backend-independent"), func(sc *SDKContext) {
	const budget = 3 * time.Second
	prompt := budget / 3 // far less than the budget an attempt would cost
	unreachable := func(ctx SpecContext) SDKClient {
		return sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.ClosedURL(), RetryBudgetMs: budget.Milliseconds()})
	}
	// The limit in any SDK's words: 100ms, 100 ms, 0.1s, 0.1 s.
	limit := regexp.MustCompile(`(?i)\b100\s?ms\b|\b0\.1\s?s\b`)

	It("TTL range: a TTL below the SDK minimum (100ms) is refused with invalid_argument before anything is sent, the message naming the field, the value and the limit", func(ctx SpecContext) {
		c := unreachable(ctx)
		for _, try := range []bool{false, true} {
			start := time.Now()
			_, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: sc.Key("sdk-ttl-min"), TTLMs: 50, Try: try})
			took := time.Since(start)
			Expect(err).To(BeKind(sdkrunner.KindInvalidArgument), "lock (try=%v) with ttl 50ms", try)
			Expect(err).To(HaveCode("invalid_argument"))
			Expect(took).To(BeNumerically("<", prompt), "answered after %s: was it sent? (the address refuses connections; retry budget %s)", took, budget)
			msg := ErrorOf(err).Message
			Expect(strings.ToLower(msg)).To(ContainSubstring("ttl"), "the message must name the field: %q", msg)
			Expect(msg).To(MatchRegexp(`(?i)\b(50\s?ms|0\.05\s?s)\b`), "the message must give the value with its unit, 50ms: %q", msg)
			Expect(limit.MatchString(msg)).To(BeTrue(), "the message must give the limit, 100ms: %q", msg)
		}
	}, SpecTimeout(30*time.Second))

	It("TTL range: a bare number is read in the SDK's own unit (hello's duration_unit), so TTL 3 is never a 3ms lease, and an infinite TTL is refused", func(ctx SpecContext) {
		unit := sc.Adapter.Hello.DurationUnit
		Expect(unit).To(BeElementOf(sdkrunner.UnitNanoseconds, sdkrunner.UnitMilliseconds, sdkrunner.UnitSeconds),
			"the adapter must say in hello (duration_unit) which unit its SDK reads bare numbers in")
		c := sc.SDK(ctx)
		key := sc.Key("sdk-ttl-native")
		res, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLNative: json.RawMessage("3"), Try: true})
		switch unit {
		case sdkrunner.UnitSeconds:
			// Three seconds, as the server sees it.
			Expect(err).NotTo(HaveOccurred(), "TTL 3 in seconds is a valid lease")
			ins := sc.InspectRaw(ctx, sc.RPC, key)
			Expect(ins.GetHeld()).To(BeTrue())
			left := ins.GetState().GetExpiresAt().AsTime().Sub(time.Unix(0, ins.GetServerStamp().GetWallTimeNs()))
			gran := sc.Backend().GetTtlGranularity().AsDuration()
			Expect(left).To(BeNumerically("~", 3*time.Second, time.Second+gran), "TTL 3 with duration_unit s: the server holds it for %s", left)
			Expect(c.Unlock(ctx, res.Guard)).To(Succeed())
		default:
			Expect(err).To(BeKind(sdkrunner.KindInvalidArgument), "TTL 3 with duration_unit %s is below 100ms", unit)
			Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "a refused TTL took the key")
		}
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLNative: json.RawMessage(`"inf"`), Try: true})
		Expect(err).To(BeKind(sdkrunner.KindInvalidArgument), "an infinite TTL (the SDK's nearest: its longest duration)")
		Expect(sc.InspectRaw(ctx, sc.RPC, key).GetHeld()).To(BeFalse(), "a refused TTL took the key")
	}, SpecTimeout(30*time.Second))

	It("wait: a negative wait is refused with invalid_argument before anything is sent", func(ctx SpecContext) {
		c := unreachable(ctx)
		start := time.Now()
		_, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: sc.Key("sdk-wait-negative"), TTLMs: sc.LongTTL().Milliseconds(), WaitMs: -100})
		took := time.Since(start)
		Expect(err).To(BeKind(sdkrunner.KindInvalidArgument))
		Expect(err).To(HaveCode("invalid_argument"))
		Expect(took).To(BeNumerically("<", prompt), "answered after %s: was it sent?", took)
		Expect(strings.ToLower(ErrorOf(err).Message)).To(ContainSubstring("wait"), "the message must name the field")
	}, SpecTimeout(30*time.Second))

	It("key: the SDK sends the key as given and surfaces the server's invalid_argument", func(ctx SpecContext) {
		c := sc.SDK(ctx)
		for _, key := range []string{strings.Repeat("k", 600), "with\x00nul"} {
			_, err := c.LockWith(ctx, sdkrunner.LockArgs{Key: key, TTLMs: sc.LongTTL().Milliseconds(), Try: true})
			Expect(err).To(BeKind(sdkrunner.KindInvalidArgument), "key %.20q...", key)
			Expect(err).To(HaveCode("invalid_argument"))
			Expect(ErrorOf(err).Message).To(ContainSubstring("key"), "the server's message names the key")
		}
		// The SDK itself does not judge keys: against an address that
		// refuses connections the same key is sent (and retried).
		u := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.ClosedURL(), RetryBudgetMs: 300})
		_, err := u.LockWith(ctx, sdkrunner.LockArgs{Key: strings.Repeat("k", 600), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(BeKind(sdkrunner.KindUnavailable), "an SDK that refuses keys of its own accord answers before sending")
	}, SpecTimeout(30*time.Second))
})
