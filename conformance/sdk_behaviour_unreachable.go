package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "unreachable server", "retries" and "Backoff":
// every call fails with unavailable after the retry budget, never later
// than its own budget, never hangs; attempts are spaced by the backoff.
var _ = describeSDK("behaviour table: an unreachable server", Label("sdk-behaviour", "unreachable", "backend-independent"), func(sc *SDKContext) {
	// The default retry budget and backoff (docs/sdk-behaviour.md).
	const budget = 5 * time.Second
	backoff := func(n int) time.Duration { return min(50*time.Millisecond<<n, time.Second) }

	type call struct {
		name    string
		c       SDKClient
		cmd     string
		args    any
		ownWait time.Duration // a wait shorter than the budget bounds the call
	}
	type outcome struct {
		err  error
		took time.Duration
	}
	// runAll runs the calls at once; a call still unanswered after within
	// counts as hanging.
	runAll := func(sctx SpecContext, calls []call, within time.Duration) map[string]outcome {
		ctx, cancel := context.WithTimeout(sctx, within)
		defer cancel()
		var mu sync.Mutex
		got := map[string]outcome{}
		var wg sync.WaitGroup
		for _, cl := range calls {
			wg.Go(func() {
				defer GinkgoRecover()
				start := time.Now()
				err := cl.c.A.Call(ctx, cl.cmd, cl.args, nil)
				mu.Lock()
				got[cl.name] = outcome{err, time.Since(start)}
				mu.Unlock()
			})
		}
		wg.Wait()
		return got
	}
	lockArgs := func(c SDKClient, key string, f func(*sdkrunner.LockArgs)) sdkrunner.LockArgs {
		a := sdkrunner.LockArgs{Client: c.ID, Key: key, TTLMs: sc.LongTTL().Milliseconds(), Holder: "conformance-sdk"}
		f(&a)
		return a
	}

	It("unreachable server: every call (acquire with or without a wait, try, unlock, inspect, list, server info) fails with unavailable after the default retry budget of 5s, never later than its own budget, attempts spaced by the backoff (equal jitter, capped at 1s)", func(ctx SpecContext) {
		// Refused connections: nothing listens on the address. No options:
		// the SDK's defaults.
		refused := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: sc.ClosedURL()})
		// A server that answers unavailable (the fault proxy): it counts the
		// attempts, and it carries a guard taken while it still forwarded.
		p := sc.Proxy(sc.URL)
		answering := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL})
		// A lease longer than the budget (so the unlock's budget ends
		// first), short enough that an SDK retrying until its expiry
		// instead is done before the spec ends.
		g := answering.MustLock(ctx, sc.Key("sdk-unreachable-unlock"), max(budget+3*time.Second, sc.TTL()))
		p.SetMode(faultproxy.Unavailable)
		since := time.Now()

		key := sc.Key("sdk-unreachable")
		calls := []call{
			{name: "acquire, no wait set", c: refused, cmd: sdkrunner.CmdLock, args: lockArgs(refused, key, func(a *sdkrunner.LockArgs) { a.WaitUnset = true })},
			{name: "acquire, wait 0", c: refused, cmd: sdkrunner.CmdLock, args: lockArgs(refused, key, func(a *sdkrunner.LockArgs) {})},
			{name: "acquire, wait 300ms", c: refused, cmd: sdkrunner.CmdLock, args: lockArgs(refused, key, func(a *sdkrunner.LockArgs) { a.WaitMs = 300 }), ownWait: 300 * time.Millisecond},
			{name: "try", c: refused, cmd: sdkrunner.CmdLock, args: lockArgs(refused, key, func(a *sdkrunner.LockArgs) { a.Try = true })},
			{name: "inspect", c: refused, cmd: sdkrunner.CmdInspect, args: sdkrunner.InspectArgs{Client: refused.ID, Key: key}},
			{name: "list", c: refused, cmd: sdkrunner.CmdList, args: sdkrunner.ListArgs{Client: refused.ID, Prefix: key}},
			{name: "server info", c: refused, cmd: sdkrunner.CmdServerInfo, args: sdkrunner.ClientArgs{Client: refused.ID}},
			{name: "unlock (server answers unavailable)", c: answering, cmd: sdkrunner.CmdUnlock, args: sdkrunner.GuardArgs{Guard: g.Guard}},
			{name: "acquire, no wait set (server answers unavailable)", c: answering, cmd: sdkrunner.CmdLock, args: lockArgs(answering, key, func(a *sdkrunner.LockArgs) { a.WaitUnset = true })},
		}
		got := runAll(ctx, calls, budget+5*time.Second)
		var wrong []string
		for _, cl := range calls {
			o := got[cl.name]
			bound := budget
			if cl.ownWait > 0 {
				bound = cl.ownWait
			}
			switch {
			case sdkrunner.KindOf(o.err) != sdkrunner.KindUnavailable:
				wrong = append(wrong, fmt.Sprintf("%s: answered %v, want kind unavailable", cl.name, o.err))
			case ErrorOf(o.err).Code != "unavailable":
				wrong = append(wrong, fmt.Sprintf("%s: code %q, want unavailable", cl.name, ErrorOf(o.err).Code))
			case o.took < bound*9/10:
				wrong = append(wrong, fmt.Sprintf("%s: gave up after %s, before its budget %s", cl.name, o.took, bound))
			case o.took > bound+2*sc.Config.Slack:
				wrong = append(wrong, fmt.Sprintf("%s: gave up after %s, later than its budget %s", cl.name, o.took, bound))
			}
		}
		Expect(wrong).To(BeEmpty(), "calls against an unreachable server")

		// The acquire's attempts through the proxy, from the moment it
		// answered unavailable: each pause in [d/2, d] of the backoff
		// (50ms doubling, capped at 1s), measured where the requests
		// arrive, hence the slack on the long side (a loaded machine runs
		// timers late, never early).
		var at []time.Time
		for _, r := range p.Requests("Acquire") {
			if r.Outcome == faultproxy.Refused && r.Arrived.After(since) {
				at = append(at, r.Arrived)
			}
		}
		Expect(len(at)).To(BeNumerically(">=", 6), "attempts of an acquire within the 5s budget (the backoff reaches its 1s cap after 5)")
		var gaps []string
		for i := 1; i < len(at); i++ {
			gap, d := at[i].Sub(at[i-1]), backoff(i-1)
			gaps = append(gaps, gap.Round(time.Millisecond).String())
			Expect(gap).To(BeNumerically(">=", d/2-10*time.Millisecond), "pause %d between attempts: %s, want at least d/2 of d=%s (all: %v)", i, gap, d, gaps)
			Expect(gap).To(BeNumerically("<=", d+2*sc.Config.Slack), "pause %d between attempts: %s, want at most d=%s (+ 2 x slack) (all: %v)", i, gap, d, gaps)
		}
		AddReportEntry("pauses between unavailable attempts", fmt.Sprint(gaps), ReportEntryVisibilityFailureOrVerbose)
	}, SpecTimeout(time.Minute))

	It("unreachable server: a server that accepts connections and never answers fails every call with unavailable within the retry budget, never hangs", func(ctx SpecContext) {
		p := sc.Proxy(sc.URL)
		p.SetMode(faultproxy.Blackhole)
		const short = time.Second
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL, RetryBudgetMs: short.Milliseconds()})
		key := sc.Key("sdk-blackhole")
		calls := []call{
			{name: "acquire, wait 0", c: c, cmd: sdkrunner.CmdLock, args: lockArgs(c, key, func(a *sdkrunner.LockArgs) {})},
			{name: "try", c: c, cmd: sdkrunner.CmdLock, args: lockArgs(c, key, func(a *sdkrunner.LockArgs) { a.Try = true })},
			{name: "inspect", c: c, cmd: sdkrunner.CmdInspect, args: sdkrunner.InspectArgs{Client: c.ID, Key: key}},
			{name: "list", c: c, cmd: sdkrunner.CmdList, args: sdkrunner.ListArgs{Client: c.ID, Prefix: key}},
			{name: "server info", c: c, cmd: sdkrunner.CmdServerInfo, args: sdkrunner.ClientArgs{Client: c.ID}},
		}
		got := runAll(ctx, calls, short+5*time.Second)
		var wrong []string
		for _, cl := range calls {
			o := got[cl.name]
			switch {
			case sdkrunner.KindOf(o.err) != sdkrunner.KindUnavailable:
				wrong = append(wrong, fmt.Sprintf("%s: answered %v, want kind unavailable", cl.name, o.err))
			case o.took > short+2*sc.Config.Slack:
				wrong = append(wrong, fmt.Sprintf("%s: gave up after %s, later than the retry budget %s (the request timeout is 10s: an attempt must be cut at the budget)", cl.name, o.took, short))
			}
		}
		Expect(wrong).To(BeEmpty(), "calls against a server that never answers, retry budget %s", short)
	}, SpecTimeout(time.Minute))
})
