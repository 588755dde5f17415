package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// SDK-level specs register here, like the other levels' (registry.go).
type sdkSpec struct {
	text   string
	labels ginkgo.Labels
	body   func(sc *SDKContext)
}

var sdkSpecs []sdkSpec

// describeSDK registers a container of SDK-level specs.
func describeSDK(text string, labels ginkgo.Labels, body func(sc *SDKContext)) bool {
	sdkSpecs = append(sdkSpecs, sdkSpec{text, labels, body})
	return true
}

func registerSDK(sc *SDKContext) {
	ginkgo.BeforeSuite(sc.setup, ginkgo.NodeTimeout(3*time.Minute))
	ginkgo.AfterSuite(sc.teardown)
	for _, s := range sdkSpecs {
		ginkgo.Describe(s.text, s.labels, func() { s.body(sc) })
	}
}

// SDKContext is what SDK-level specs share: everything a service-level spec
// has (the server under test, a raw client for checking what the SDK did,
// servers the suite starts), plus the SDK's adapter process, driven through
// the runner protocol (package sdkrunner).
type SDKContext struct {
	*ServiceContext
	// Adapter is the adapter process the specs share. Specs that pause an
	// adapter start their own with StartAdapter.
	Adapter *sdkrunner.Adapter

	mu       sync.Mutex
	adapters []*sdkrunner.Adapter
}

func newSDKContext(cfg Config) *SDKContext {
	return &SDKContext{ServiceContext: newServiceContext(cfg)}
}

func (sc *SDKContext) setup(ctx ginkgo.SpecContext) {
	if len(sc.Config.Runner) == 0 {
		ginkgo.Fail("Config.Runner (--runner) must give the SDK adapter's command line")
	}
	sc.ServiceContext.setup(ctx)
	a, err := sc.StartAdapter(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "starting the adapter %q", sc.Config.Runner)
	sc.Adapter = a
	ginkgo.GinkgoWriter.Printf("adapter %q: sdk %q version %q, protocol %d, capabilities %v\n",
		sc.Config.Runner, a.Hello.SDK, a.Hello.Version, a.Hello.ProtocolVersion, a.Hello.Capabilities)
}

func (sc *SDKContext) teardown() {
	sc.mu.Lock()
	adapters := sc.adapters
	sc.adapters = nil
	sc.mu.Unlock()
	var errs []error
	for _, a := range adapters {
		if err := a.Close(0); err != nil {
			errs = append(errs, err)
		}
	}
	sc.ServiceContext.teardown()
	gomega.Expect(errors.Join(errs...)).NotTo(gomega.HaveOccurred(), "an adapter did not shut down cleanly")
}

// StartAdapter starts one more adapter process from Config.Runner; the
// suite closes it at the end of the run unless the caller closes it first.
func (sc *SDKContext) StartAdapter(ctx context.Context) (*sdkrunner.Adapter, error) {
	a, err := sdkrunner.Start(ctx, sc.Config.Runner, sdkrunner.Options{Dir: sc.Config.RunnerDir, Stderr: ginkgo.GinkgoWriter})
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	sc.adapters = append(sc.adapters, a)
	sc.mu.Unlock()
	return a, nil
}

// SDKClient is one SDK client inside an adapter.
type SDKClient struct {
	A  *sdkrunner.Adapter
	ID string
}

// Connect makes a client in adapter a for the server at url (protocol
// "connect" when empty); it is closed when the current spec ends.
func (sc *SDKContext) Connect(ctx context.Context, a *sdkrunner.Adapter, url, protocol string) SDKClient {
	ginkgo.GinkgoHelper()
	return sc.ConnectWith(ctx, a, sdkrunner.ConnectArgs{Addr: url, Protocol: protocol})
}

// SDK makes a client in the shared adapter for the server under test.
func (sc *SDKContext) SDK(ctx context.Context) SDKClient {
	ginkgo.GinkgoHelper()
	return sc.Connect(ctx, sc.Adapter, sc.URL, "")
}

// TryLock makes one attempt through the SDK.
func (c SDKClient) TryLock(ctx context.Context, key string, ttl time.Duration) (sdkrunner.LockResult, error) {
	var res sdkrunner.LockResult
	err := c.A.Call(ctx, sdkrunner.CmdLock, sdkrunner.LockArgs{Client: c.ID, Key: key, TTLMs: ttl.Milliseconds(), Try: true, Holder: "conformance-sdk"}, &res)
	return res, err
}

// Lock queues on the server for up to wait through the SDK.
func (c SDKClient) Lock(ctx context.Context, key string, ttl, wait time.Duration) (sdkrunner.LockResult, error) {
	var res sdkrunner.LockResult
	err := c.A.Call(ctx, sdkrunner.CmdLock, sdkrunner.LockArgs{Client: c.ID, Key: key, TTLMs: ttl.Milliseconds(), WaitMs: wait.Milliseconds(), Holder: "conformance-sdk"}, &res)
	return res, err
}

// MustLock takes a free key through the SDK.
func (c SDKClient) MustLock(ctx context.Context, key string, ttl time.Duration) sdkrunner.LockResult {
	ginkgo.GinkgoHelper()
	res, err := c.TryLock(ctx, key, ttl)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "SDK lock of free key %q", key)
	gomega.Expect(res.Guard).NotTo(gomega.BeEmpty(), "lock must name the guard")
	gomega.Expect(res.FencingToken).NotTo(gomega.BeZero(), "a lease has a fencing token")
	return res
}

// MustLockMany takes a guard on every key at once (lock_many) and fails the
// spec unless every key was free.
func (c SDKClient) MustLockMany(ctx context.Context, keys []string, ttl time.Duration) []sdkrunner.LockResult {
	ginkgo.GinkgoHelper()
	var res sdkrunner.LockManyResult
	err := c.A.Call(ctx, sdkrunner.CmdLockMany, sdkrunner.LockManyArgs{Client: c.ID, Keys: keys, TTLMs: ttl.Milliseconds()}, &res)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "lock_many of %d keys", len(keys))
	gomega.Expect(res.Guards).To(gomega.HaveLen(len(keys)), "lock_many: one guard per key")
	return res.Guards
}

// Unlock releases a guard through the SDK.
func (c SDKClient) Unlock(ctx context.Context, guard string) error {
	return c.A.Call(ctx, sdkrunner.CmdUnlock, sdkrunner.GuardArgs{Guard: guard}, nil)
}

// Extend renews a guard through the SDK.
func (c SDKClient) Extend(ctx context.Context, guard string, ttl time.Duration) error {
	return c.A.Call(ctx, sdkrunner.CmdExtend, sdkrunner.GuardArgs{Guard: guard, TTLMs: ttl.Milliseconds()}, nil)
}

// FencingToken asks the guard for its token.
func (c SDKClient) FencingToken(ctx context.Context, guard string) (uint64, error) {
	var res sdkrunner.FencingTokenResult
	err := c.A.Call(ctx, sdkrunner.CmdFencingToken, sdkrunner.GuardArgs{Guard: guard}, &res)
	return uint64(res.FencingToken), err
}

// GuardState asks whether the guard still holds.
func (c SDKClient) GuardState(ctx context.Context, guard string) sdkrunner.GuardStateResult {
	ginkgo.GinkgoHelper()
	var res sdkrunner.GuardStateResult
	gomega.Expect(c.A.Call(ctx, sdkrunner.CmdGuardState, sdkrunner.GuardArgs{Guard: guard}, &res)).To(gomega.Succeed())
	return res
}

// ClockNow reads the client's HLC.
func (c SDKClient) ClockNow(ctx context.Context) sdkrunner.Stamp {
	ginkgo.GinkgoHelper()
	var res sdkrunner.ClockResult
	gomega.Expect(c.A.Call(ctx, sdkrunner.CmdClockNow, sdkrunner.ClientArgs{Client: c.ID}, &res)).To(gomega.Succeed())
	gomega.Expect(res.Stamp.WallTimeNs).NotTo(gomega.BeZero(), "clock_now must read the clock")
	return res.Stamp
}

// Inspect asks the SDK who holds key.
func (c SDKClient) Inspect(ctx context.Context, key string) sdkrunner.InspectResult {
	ginkgo.GinkgoHelper()
	var res sdkrunner.InspectResult
	gomega.Expect(c.A.Call(ctx, sdkrunner.CmdInspect, sdkrunner.InspectArgs{Client: c.ID, Key: key}, &res)).To(gomega.Succeed())
	return res
}

// BeKind matches an adapter error of the given kind.
func BeKind(kind string) gomega.OmegaMatcher {
	return gomega.WithTransform(func(err error) string { return sdkrunner.KindOf(err) }, gomega.Equal(kind))
}

// InspectRaw asks a server directly (not through the SDK) who holds key.
func (sc *SDKContext) InspectRaw(ctx context.Context, rpc lockv1connect.LockServiceClient, key string) *lockv1.InspectResponse {
	ginkgo.GinkgoHelper()
	res, err := rpc.Inspect(ctx, &lockv1.InspectRequest{Key: key})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "Inspect %q", key)
	return res
}

// AwaitWaiters waits until the server reports n callers queued on key.
func (sc *SDKContext) AwaitWaiters(ctx context.Context, key string, n int) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(ctx, func(g gomega.Gomega) {
		ins, err := sc.RPC.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ins.GetState().GetWaiters()).To(gomega.BeNumerically("==", n))
	}).WithTimeout(10*time.Second).WithPolling(2*time.Millisecond).Should(gomega.Succeed(), "waiting for %d queued callers on %q", n, key)
}

// AwaitFreeOn is AwaitFree against the server behind rpc.
func (sc *SDKContext) AwaitFreeOn(ctx context.Context, rpc lockv1connect.LockServiceClient, key string, ttl, within time.Duration) (*lockv1.Lease, error) {
	deadline := time.Now().Add(within)
	for {
		res, err := sc.Acquire(ctx, rpc, key, ttl, 0)
		if err != nil {
			return nil, err
		}
		if res.GetAcquired() {
			return res.GetLease(), nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%q still held after %s (holder %v)", key, within, res.GetCurrent())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Call sends one command of the client's adapter with the client's id set
// by the caller in args.
func (c SDKClient) Call(ctx context.Context, cmd string, args, result any) error {
	return c.A.Call(ctx, cmd, args, result)
}

// ConnectWith makes a client in adapter a with the given connect arguments
// (addr, protocol and client options); it is closed when the spec ends.
func (sc *SDKContext) ConnectWith(ctx context.Context, a *sdkrunner.Adapter, args sdkrunner.ConnectArgs) SDKClient {
	ginkgo.GinkgoHelper()
	var res sdkrunner.ConnectResult
	err := a.Call(ctx, sdkrunner.CmdConnect, args, &res)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "connect %+v", args)
	gomega.Expect(res.Client).NotTo(gomega.BeEmpty(), "connect must name the client")
	ginkgo.DeferCleanup(func(ctx context.Context) {
		select {
		case <-a.Done():
		default:
			_ = a.Call(ctx, sdkrunner.CmdClose, sdkrunner.ClientArgs{Client: res.Client}, nil) //nolint:staticcheck // S1016: two messages that share a shape, not one type
		}
	}, ginkgo.NodeTimeout(10*time.Second))
	return SDKClient{A: a, ID: res.Client}
}

// Proxy starts a fault proxy in front of the server at url; it is closed
// when the spec ends.
func (sc *SDKContext) Proxy(url string) *faultproxy.Proxy {
	ginkgo.GinkgoHelper()
	p, err := faultproxy.New(url)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "starting a fault proxy")
	ginkgo.DeferCleanup(p.Close)
	return p
}

// ClosedURL is the address of a loopback port nothing listens on: every
// connection to it is refused.
func (sc *SDKContext) ClosedURL() string {
	ginkgo.GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	addr := ln.Addr().String()
	gomega.Expect(ln.Close()).To(gomega.Succeed())
	return "http://" + addr
}

// SendLock starts a lock command without waiting for its answer.
func (c SDKClient) SendLock(args sdkrunner.LockArgs) *sdkrunner.Pending {
	ginkgo.GinkgoHelper()
	args.Client = c.ID
	if args.Holder == "" {
		args.Holder = "conformance-sdk"
	}
	p, err := c.A.Send(sdkrunner.CmdLock, args)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return p
}

// LockWith runs a lock command with the given arguments (the client's id
// and a holder label filled in).
func (c SDKClient) LockWith(ctx context.Context, args sdkrunner.LockArgs) (sdkrunner.LockResult, error) {
	var res sdkrunner.LockResult
	args.Client = c.ID
	if args.Holder == "" {
		args.Holder = "conformance-sdk"
	}
	err := c.A.Call(ctx, sdkrunner.CmdLock, args, &res)
	return res, err
}

// LeaseEvent waits for a lease_event of the given type for the lease with
// this fencing token, and returns it.
func (c SDKClient) LeaseEvent(ctx context.Context, token sdkrunner.U64, typ string, within time.Duration) (sdkrunner.Event, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return c.A.WaitEvent(wctx, func(e sdkrunner.Event) bool {
		return e.Event == sdkrunner.EventLease && e.Type == typ && e.FencingToken == token
	})
}

// ErrorOf is the adapter's error answer in err; it fails the spec when err
// is not one.
func ErrorOf(err error) *sdkrunner.Error {
	ginkgo.GinkgoHelper()
	e := sdkrunner.ErrorOf(err)
	gomega.Expect(e).NotTo(gomega.BeNil(), "want an error answer from the adapter, got %v", err)
	return e
}

// HaveCode matches an adapter error whose SDK code is code.
func HaveCode(code string) gomega.OmegaMatcher {
	return gomega.WithTransform(func(err error) string {
		if e := sdkrunner.ErrorOf(err); e != nil {
			return e.Code
		}
		return fmt.Sprintf("(not an adapter error: %v)", err)
	}, gomega.Equal(code))
}

// AwaitWaitersOn is AwaitWaiters against the server behind rpc.
func (sc *SDKContext) AwaitWaitersOn(ctx context.Context, rpc lockv1connect.LockServiceClient, key string, n int) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(ctx, func(g gomega.Gomega) {
		ins, err := rpc.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ins.GetState().GetWaiters()).To(gomega.BeNumerically("==", n))
	}).WithTimeout(10*time.Second).WithPolling(2*time.Millisecond).Should(gomega.Succeed(), "waiting for %d queued callers on %q", n, key)
}

func releaseReq(key, ownerToken string) *lockv1.ReleaseRequest {
	return &lockv1.ReleaseRequest{Key: key, OwnerToken: ownerToken}
}

// AwaitQueued waits until the server reports n callers queued on key, as
// AwaitWaiters does, failing at once if the command p that should be
// queued has answered instead.
func (sc *SDKContext) AwaitQueued(ctx context.Context, rpc lockv1connect.LockServiceClient, key string, n int, p *sdkrunner.Pending) {
	ginkgo.GinkgoHelper()
	gomega.Eventually(ctx, func(g gomega.Gomega) {
		if p.Answered() {
			err := p.Wait(ctx, nil)
			gomega.StopTrying(fmt.Sprintf("the command that should be queued on %q answered: %v", key, err)).Now()
		}
		ins, err := rpc.Inspect(ctx, &lockv1.InspectRequest{Key: key})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ins.GetState().GetWaiters()).To(gomega.BeNumerically("==", n))
	}).WithTimeout(10*time.Second).WithPolling(2*time.Millisecond).Should(gomega.Succeed(), "waiting for %d queued callers on %q", n, key)
}
