package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	holdfast "github.com/holdfast/holdfast/sdk-go"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ServiceContext is what service-level specs share: the server under test,
// a raw Connect client for it, and helpers to make SDK clients.
type ServiceContext struct {
	Config Config
	// URL is the base URL of the server under test.
	URL string
	// RPC is the generated Connect client, for what the SDK does not expose.
	RPC lockv1connect.LockServiceClient
	// Info is the server's GetServerInfo answer at the start of the run.
	Info *lockv1.GetServerInfoResponse

	transport *http.Transport
	buildDir  string
	runID     string
	seq       atomic.Uint64

	mu      sync.Mutex
	servers []*harness.Server // started by the suite (Config.Serve), the one under test first
	main    *harness.Server   // the server under test, when the suite started it
	second  string            // URL of the second server, once known
	// yielded: a spec stopped the server under test because the store
	// allows one owner (Config.SingleInstance); it starts again when the
	// spec ends.
	yielded bool
}

func newServiceContext(cfg Config) *ServiceContext {
	return &ServiceContext{Config: cfg, runID: randomHex(4)}
}

func (sc *ServiceContext) setup(ctx ginkgo.SpecContext) {
	switch {
	case sc.Config.Addr != "":
		sc.URL = strings.TrimRight(sc.Config.Addr, "/")
		if !strings.Contains(sc.URL, "://") {
			sc.URL = "http://" + sc.URL
		}
	case sc.Config.Serve != nil:
		s, err := sc.startServer(ctx)
		if err != nil {
			ginkgo.Fail("starting the server: " + strings.Join(strings.Fields(err.Error()), " "))
		}
		sc.main = s
		sc.URL = s.URL
	default:
		ginkgo.Fail("Config.Addr (--addr) or Config.Serve must say which server to test")
	}
	sc.transport = http.DefaultTransport.(*http.Transport).Clone()
	sc.transport.MaxIdleConnsPerHost = 128
	sc.RPC = lockv1connect.NewLockServiceClient(&http.Client{Transport: sc.transport}, sc.URL)
	var err error
	sc.Info, err = sc.RPC.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "GetServerInfo at %s", sc.URL)
	b := sc.Info.GetBackend()
	ginkgo.GinkgoWriter.Printf("server %s version %q, backend %q: shared=%v durable=%v fair=%v ttl_granularity=%s min_ttl=%s max_ttl=%s; specs use TTL %s\n",
		sc.URL, sc.Info.GetVersion(), b.GetName(), b.GetShared(), b.GetDurable(), b.GetFair(),
		b.GetTtlGranularity().AsDuration(), b.GetMinTtl().AsDuration(), b.GetMaxTtl().AsDuration(), sc.TTL())
	if sc.Config.SingleInstance && b.GetShared() {
		ginkgo.Fail("Config.SingleInstance (--single-instance) with a backend that declares shared=true: a store that allows one owner cannot be shared by several servers")
	}
}

func (sc *ServiceContext) teardown() {
	sc.mu.Lock()
	servers := sc.servers
	sc.servers = nil
	sc.mu.Unlock()
	var errs []error
	for _, s := range servers {
		if err := s.Stop(0); err != nil {
			errs = append(errs, err)
		}
	}
	if sc.transport != nil {
		sc.transport.CloseIdleConnections()
	}
	if sc.buildDir != "" {
		_ = os.RemoveAll(sc.buildDir)
	}
	gomega.Expect(errors.Join(errs...)).NotTo(gomega.HaveOccurred(), "a server did not stop gracefully")
}

// CanStartServers reports whether the suite starts servers itself
// (Config.Serve), which specs that pause or restart a server need.
func (sc *ServiceContext) CanStartServers() bool { return sc.Config.Serve != nil }

// StartServer starts one more server with Config.Serve; the suite stops it
// at the end of the run unless the caller stops it first. On a
// single-instance store (Config.SingleInstance) it first stops every server
// the suite runs, the one under test included, and the suite starts the
// server under test again when the spec ends: the store allows one owner at
// a time.
func (sc *ServiceContext) StartServer(ctx context.Context) (*harness.Server, error) {
	return sc.StartServerWith(ctx)
}

// StartServerWith is StartServer with extra `holdfast serve` arguments
// (say --max-wait 1s).
func (sc *ServiceContext) StartServerWith(ctx context.Context, args ...string) (*harness.Server, error) {
	if sc.Config.SingleInstance {
		if err := sc.yieldStore(); err != nil {
			return nil, err
		}
	}
	return sc.startServer(ctx, args...)
}

// startServer starts a server with Config.Serve and args, whatever else
// runs.
func (sc *ServiceContext) startServer(ctx context.Context, args ...string) (*harness.Server, error) {
	if sc.Config.Serve == nil {
		return nil, errors.New("conformance: Config.Serve is not set")
	}
	opts := *sc.Config.Serve
	opts.Args = append(slices.Clone(opts.Args), args...)
	if opts.Binary == "" && opts.BuildDir == "" {
		sc.mu.Lock()
		if sc.buildDir == "" {
			d, err := os.MkdirTemp("", "holdfast-conformance-")
			if err != nil {
				sc.mu.Unlock()
				return nil, err
			}
			sc.buildDir = d
		}
		opts.BuildDir = sc.buildDir
		sc.mu.Unlock()
	}
	if opts.Stderr == nil {
		opts.Stderr = ginkgo.GinkgoWriter
	}
	s, err := harness.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	sc.servers = append(sc.servers, s)
	sc.mu.Unlock()
	return s, nil
}

// yieldStore stops every server the suite runs, so that the calling spec
// may start one of its own on a single-instance store, and arranges for the
// server under test to start again when the spec ends.
func (sc *ServiceContext) yieldStore() error {
	sc.mu.Lock()
	servers := slices.Clone(sc.servers)
	first := !sc.yielded
	sc.yielded = true
	sc.mu.Unlock()
	if first {
		ginkgo.DeferCleanup(sc.restoreServer)
	}
	var errs []error
	for _, s := range servers {
		if err := s.Stop(0); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("conformance: stopping the servers on the single-instance store: %w", err)
	}
	return nil
}

// restoreServer ends a spec that took the single-instance store: it stops
// the servers the spec left running and starts the server under test again,
// on a new address.
func (sc *ServiceContext) restoreServer(ctx ginkgo.SpecContext) {
	sc.mu.Lock()
	servers := slices.Clone(sc.servers)
	sc.yielded = false
	sc.mu.Unlock()
	for _, s := range servers {
		_ = s.Stop(0) // a server the spec stopped already answers its first Stop's outcome
	}
	s, err := sc.startServer(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "starting the server under test again after the spec took the single-instance store")
	sc.mu.Lock()
	sc.main = s
	sc.mu.Unlock()
	sc.URL = s.URL
	sc.RPC = lockv1connect.NewLockServiceClient(&http.Client{Transport: sc.transport}, sc.URL)
}

// Server returns the server under test when the suite started it, or nil
// when it tests a server given by address.
func (sc *ServiceContext) Server() *harness.Server {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.main
}

// SecondURL returns a second server with the same backend configuration
// (Config.SecondAddr, or one the suite starts), or "" when there is none.
func (sc *ServiceContext) SecondURL(ctx context.Context) (string, error) {
	sc.mu.Lock()
	second := sc.second
	sc.mu.Unlock()
	if second != "" {
		return second, nil
	}
	switch {
	case sc.Config.SingleInstance:
		return "", nil // the store allows one server at a time
	case sc.Config.SecondAddr != "":
		second = strings.TrimRight(sc.Config.SecondAddr, "/")
		if !strings.Contains(second, "://") {
			second = "http://" + second
		}
	case sc.Config.Serve != nil:
		s, err := sc.startServer(ctx)
		if err != nil {
			return "", err
		}
		second = s.URL
	default:
		return "", nil
	}
	sc.mu.Lock()
	sc.second = second
	sc.mu.Unlock()
	return second, nil
}

// RPCFor returns a raw client for another server.
func (sc *ServiceContext) RPCFor(url string) lockv1connect.LockServiceClient {
	return lockv1connect.NewLockServiceClient(&http.Client{Transport: sc.transport}, url)
}

// Client dials the server under test with the Go SDK; the client is closed
// when the current spec ends.
func (sc *ServiceContext) Client(opts ...holdfast.Option) *holdfast.Client {
	ginkgo.GinkgoHelper()
	return sc.ClientFor(sc.URL, opts...)
}

// ClientFor dials url with the Go SDK; closed when the current spec ends.
func (sc *ServiceContext) ClientFor(url string, opts ...holdfast.Option) *holdfast.Client {
	ginkgo.GinkgoHelper()
	c, err := holdfast.Dial(url, opts...)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() { _ = c.Close() })
	return c
}

// Key returns a key no other spec of any run uses, ending in name.
func (sc *ServiceContext) Key(name string) string {
	return fmt.Sprintf("conformance/%s/%d/%s", sc.runID, sc.seq.Add(1), name)
}

// Backend is the backend facts the server reported.
func (sc *ServiceContext) Backend() *lockv1.BackendInfo { return sc.Info.GetBackend() }

// TTL is the short lease the timing specs use, within the backend's bounds.
func (sc *ServiceContext) TTL() time.Duration {
	b := sc.Backend()
	return clampTTL(sc.Config.TTL, b.GetMinTtl().AsDuration(), b.GetMaxTtl().AsDuration())
}

// LongTTL is a lease that outlives any spec.
func (sc *ServiceContext) LongTTL() time.Duration {
	b := sc.Backend()
	return clampTTL(time.Minute, b.GetMinTtl().AsDuration(), b.GetMaxTtl().AsDuration())
}

// FreeWithin is how soon after an acquisition a lease of TTL() must be free.
func (sc *ServiceContext) FreeWithin() time.Duration {
	return sc.TTL() + sc.Backend().GetTtlGranularity().AsDuration() + sc.Config.Slack
}

// MaxClockOffset is how far ahead a client stamp may be.
func (sc *ServiceContext) MaxClockOffset() time.Duration {
	if d := sc.Info.GetMaxClockOffset().AsDuration(); d > 0 {
		return d
	}
	return hlc.DefaultMaxOffset
}

// Acquire sends one raw Acquire.
func (sc *ServiceContext) Acquire(ctx context.Context, rpc lockv1connect.LockServiceClient, key string, ttl, wait time.Duration) (*lockv1.AcquireResponse, error) {
	req := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl), Holder: "conformance"}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return rpc.Acquire(ctx, req)
}

// MustAcquire acquires a free key through the raw client and returns the
// lease. An unavailable answer is retried until ctx ends, as the SDKs
// retry it: on a loaded machine a backend can take longer than a short
// TTL to grant, and the server then answers unavailable rather than
// report a lease that may already have run out. The specs using it check
// what follows an acquisition, not the store's speed; each retry is
// logged, and a backend that stays unavailable fails at the spec's
// timeout with its last answer.
func (sc *ServiceContext) MustAcquire(ctx context.Context, key string, ttl time.Duration) *lockv1.Lease {
	ginkgo.GinkgoHelper()
	res, err := sc.Acquire(ctx, sc.RPC, key, ttl, 0)
	for codeOf(err) == connect.CodeUnavailable && ctx.Err() == nil {
		ginkgo.GinkgoWriter.Printf("Acquire %q: %v; retrying\n", key, err)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
		res, err = sc.Acquire(ctx, sc.RPC, key, ttl, 0)
	}
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "Acquire %q", key)
	gomega.Expect(res.GetAcquired()).To(gomega.BeTrue(), "Acquire of free key %q: held by %v", key, res.GetCurrent())
	gomega.Expect(res.GetServerStamp()).NotTo(gomega.BeNil(), "every response carries server_stamp")
	return res.GetLease()
}

// Release releases through the raw client and returns released.
func (sc *ServiceContext) Release(ctx context.Context, key, token string) bool {
	ginkgo.GinkgoHelper()
	res, err := sc.RPC.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: token})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "Release %q", key)
	gomega.Expect(res.GetServerStamp()).NotTo(gomega.BeNil(), "every response carries server_stamp")
	return res.GetReleased()
}

// AwaitFree tries to acquire key every few milliseconds until it succeeds or
// within elapses, like BackendContext.AwaitFree.
func (sc *ServiceContext) AwaitFree(ctx context.Context, key string, ttl, within time.Duration) (lease *lockv1.Lease, freeAt, lastRefusedSent time.Time, err error) {
	deadline := time.Now().Add(within)
	for {
		sent := time.Now()
		res, aerr := sc.Acquire(ctx, sc.RPC, key, ttl, 0)
		if aerr != nil {
			return nil, time.Time{}, lastRefusedSent, aerr
		}
		if res.GetAcquired() {
			return res.GetLease(), time.Now(), lastRefusedSent, nil
		}
		lastRefusedSent = sent
		if time.Now().After(deadline) {
			return nil, time.Time{}, lastRefusedSent, fmt.Errorf("%q still held after %s (holder %v)", key, within, res.GetCurrent())
		}
		select {
		case <-ctx.Done():
			return nil, time.Time{}, lastRefusedSent, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// AwaitTakeover waits, as AwaitFree does, for key to be granted to a new
// holder after the lease with fencing token old, and also returns heldUntil:
// the latest send of an attempt the store refused because that old lease
// still held the key. The store held it at some moment after each such send,
// so its grant came after heldUntil. Attempts go out every few milliseconds
// without waiting for the previous answers (a few in flight at once), so
// one slow round trip does not blind the measurement: under load a single
// attempt can take hundreds of milliseconds, and with one attempt at a time
// the last refusal seen would be that long before the grant. Refusals
// naming another holder (the new one, to an attempt decided after the
// grant) say nothing about the old lease and are not counted.
func (sc *ServiceContext) AwaitTakeover(ctx context.Context, key string, old uint64, ttl, within time.Duration) (lease *lockv1.Lease, heldUntil time.Time, err error) {
	const inFlight = 8
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	type answer struct {
		sent time.Time
		res  *lockv1.AcquireResponse
		err  error
	}
	answers := make(chan answer, inFlight)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	running := 0
	send := func() {
		running++
		go func() {
			sent := time.Now()
			res, err := sc.Acquire(ctx, sc.RPC, key, ttl, 0)
			answers <- answer{sent, res, err}
		}()
	}
	send()
	for running > 0 || (lease == nil && err == nil) {
		select {
		case <-tick.C:
			if lease == nil && err == nil && running < inFlight {
				send()
			}
		case a := <-answers:
			running--
			switch {
			case a.err != nil:
				if lease == nil && err == nil {
					err = a.err // the rest are cancelled; drain them
					cancel()
				}
			case a.res.GetAcquired():
				lease = a.res.GetLease()
			case a.res.GetCurrent().GetFencingToken() == old && a.sent.After(heldUntil):
				heldUntil = a.sent
			}
		}
	}
	if lease != nil {
		err = nil // an attempt cancelled after the grant does not matter
	} else if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%q not granted to a new holder within %s: %w", key, within, err)
	}
	return lease, heldUntil, err
}

// codeOf is the Connect code of err (connect.CodeUnknown for non-Connect
// errors, 0 for nil).
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}
