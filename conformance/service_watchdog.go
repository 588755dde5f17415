package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Promise 5: the SDK's watchdog renews at about TTL/3 and poisons the guard
// when the lease is lost.
var _ = describeService("watchdog", Label("watchdog"), func(sc *ServiceContext) {
	It("keeps a guard and its fencing token for 3 TTLs by renewing it", func(ctx SpecContext) {
		key := sc.Key("watchdog")
		// At least 1s: every renewal must be answered within two thirds of
		// the lease, and with 300ms (200ms for a commit through the server
		// and the backend, in a -race process) a loaded 2-core machine lost
		// leases to scheduling alone (a PostgreSQL row, LastErr nil: no
		// renewal had even come back). Renewing at TTL/3 is the same promise
		// at any TTL.
		ttl := max(sc.TTL(), time.Second)
		g, err := sc.Client().Lock(key).TTL(ttl).TryLock(ctx)
		Expect(err).NotTo(HaveOccurred())
		tok, err := g.FencingToken()
		Expect(err).NotTo(HaveOccurred())

		// Holding for 3 TTLs is what is being tested: this wait is the
		// subject, not a stand-in for synchronisation.
		end := time.After(3 * ttl)
		other := sc.Client()
	hold:
		for {
			select {
			case <-g.Done():
				Fail("the guard was poisoned while its watchdog should have renewed it: " + context.Cause(g.Context()).Error())
			case <-end:
				break hold
			case <-time.After(ttl / 2):
				_, err := other.Lock(key).TTL(ttl).TryLock(ctx)
				Expect(errors.Is(err, holdfast.ErrNotAcquired)).To(BeTrue(), "another client acquired a watched lock: %v", err)
			}
		}
		got, err := g.FencingToken()
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal(tok))
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		Expect(err).NotTo(HaveOccurred())
		Expect(ins.GetHeld()).To(BeTrue())
		Expect(ins.GetState().GetFencingToken()).To(Equal(tok))
		Expect(g.Unlock(ctx)).To(Succeed())
	}, SpecTimeout(30*time.Second))

	It("poisons a guard within its TTL when renewals cannot get through, and the lock is taken over", func(ctx SpecContext) {
		key := sc.Key("poison")
		ttl := sc.TTL()
		cut := &cuttable{base: http.DefaultTransport.(*http.Transport).Clone()}
		DeferCleanup(cut.base.CloseIdleConnections)
		c := sc.Client(holdfast.WithHTTPClient(&http.Client{Transport: cut}))
		g, err := c.Lock(key).TTL(ttl).TryLock(ctx)
		Expect(err).NotTo(HaveOccurred())
		tok, err := g.FencingToken()
		Expect(err).NotTo(HaveOccurred())

		// From now on renewals hang as in a partition. The last successful
		// renewal was sent before this moment, so the guard must be poisoned
		// by cutAt + TTL on the local clock.
		cut.cut.Store(true)
		cutAt := time.Now()
		Eventually(g.Done()).WithTimeout(ttl+100*time.Millisecond).WithPolling(time.Millisecond).Should(BeClosed(),
			"guard still held %s after renewals stopped getting through (TTL %s)", time.Since(cutAt), ttl)
		Expect(time.Since(cutAt)).To(BeNumerically("<=", ttl+100*time.Millisecond))

		cause := context.Cause(g.Context())
		Expect(errors.Is(cause, holdfast.ErrLeaseLost)).To(BeTrue(), "context cause %v, want a lease-lost error", cause)
		_, err = g.FencingToken()
		Expect(errors.Is(err, holdfast.ErrLeaseLost)).To(BeTrue(), "FencingToken after loss: %v", err)
		Expect(errors.Is(g.Extend(ctx, ttl), holdfast.ErrLeaseLost)).To(BeTrue())

		// The server agrees: the lease runs out and someone else takes it
		// with a larger fencing token.
		next, _, _, err := sc.AwaitFree(ctx, key, sc.LongTTL(), sc.FreeWithin()+2*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(next.GetFencingToken()).To(BeNumerically(">", tok))
		cut.cut.Store(false)
	}, SpecTimeout(30*time.Second))

	It("poisons a guard whose renewal is answered extended=false", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it cannot end a lease behind its guard's back (use Config.Serve)")
		}
		if sc.Backend().GetDurable() {
			Skip("the backend declares durable=true: killing its plugin does not end a lease")
		}
		if sc.Backend().GetShared() {
			// durable=false there means the store (Redis without persistence)
			// forgets locks when it restarts; the store outlives the plugin.
			Skip("the backend is shared: its locks live outside the plugin, so killing the plugin does not end a lease")
		}
		// Owner tokens never leave the SDK, so the one honest way to end a
		// lease behind its guard is to lose the store: kill -9 the
		// (non-durable) plugin under a server of our own. The host restarts
		// it empty and the guard's next renewal is answered extended=false.
		s, err := sc.StartServer(ctx)
		Expect(err).NotTo(HaveOccurred())
		pid, err := childPID(s.PID())
		if err != nil {
			Skip("cannot find the server's plugin process: " + err.Error())
		}
		ttl := max(sc.TTL(), 3*time.Second)
		g, err := sc.ClientFor(s.URL).Lock(sc.Key("poison-rejected")).TTL(ttl).TryLock(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		Eventually(g.Done()).WithTimeout(ttl + 100*time.Millisecond).Should(BeClosed())
		var lost *holdfast.LeaseLostError
		Expect(errors.As(context.Cause(g.Context()), &lost)).To(BeTrue(), "cause %v", context.Cause(g.Context()))
		Expect(lost.Reason).To(Equal(holdfast.LossRejected),
			"the renewal after the restart should have been answered extended=false (%v)", lost)
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))
})

// cuttable is an HTTP transport that, while cut, holds every Extend request
// until its context ends, as a network partition would.
type cuttable struct {
	base *http.Transport
	cut  atomic.Bool
}

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() && strings.HasSuffix(r.URL.Path, "/Extend") {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	return c.base.RoundTrip(r)
}

// childPID finds the one child process of pid (the plugin under a server),
// from Linux's /proc.
func childPID(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				return c, nil
			}
		}
	}
	return 0, fmt.Errorf("process %d has no child process", pid)
}
