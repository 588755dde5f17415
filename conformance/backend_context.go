package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/proto/hlc"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// BackendContext is what backend-level specs share: the plugin under test,
// started once for the run through the plugin host, and helpers.
type BackendContext struct {
	Config Config
	// Backend is the plugin under test, behind the plugin host.
	Backend backend.Backend
	// Info is what the plugin declared at start-up.
	Info backend.Info

	plugin   PluginProcess
	path     string // resolved plugin executable
	buildDir string
	runID    string
	seq      atomic.Uint64
	clock    *hlc.Clock
}

func newBackendContext(cfg Config) *BackendContext {
	return &BackendContext{Config: cfg, runID: randomHex(4), clock: hlc.NewClock(nil, 0)}
}

func (sc *BackendContext) setup(ctx ginkgo.SpecContext) {
	path := sc.Config.Plugin
	gomega.Expect(path).NotTo(gomega.BeEmpty(), "Config.Plugin (--plugin) names the backend executable to test")
	if isInTreeName(path) {
		dir, err := os.MkdirTemp("", "holdfast-conformance-")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		sc.buildDir = dir
		path, err = harness.Binary(ctx, dir, "holdfast-backend-"+path)
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
	}
	sc.path = path
	p, err := sc.StartPlugin(ctx)
	if err != nil {
		// The reason on the first line: the summary prints only that.
		ginkgo.Fail(fmt.Sprintf("starting plugin %s: %s", path, strings.Join(strings.Fields(err.Error()), " ")))
	}
	sc.plugin = p
	sc.Backend = p
	sc.Info, err = p.Info(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "Info")
	ginkgo.GinkgoWriter.Printf("backend %q version %q: shared=%v durable=%v fair=%v ttl_granularity=%s min_ttl=%s max_ttl=%s; specs use TTL %s\n",
		sc.Info.Name, sc.Info.Version, sc.Info.Shared, sc.Info.Durable, sc.Info.Fair,
		sc.Info.TTLGranularity, sc.Info.MinTTL, sc.Info.MaxTTL, sc.TTL())
	if sc.Config.SingleInstance && sc.Info.Shared {
		ginkgo.Fail("Config.SingleInstance (--single-instance) with a backend that declares shared=true: a store that allows one owner cannot be shared by several servers")
	}
}

func (sc *BackendContext) teardown() {
	if sc.plugin != nil {
		_ = sc.plugin.Close()
	}
	if sc.buildDir != "" {
		_ = os.RemoveAll(sc.buildDir)
	}
}

// StartPlugin starts another instance of the plugin under test, with the same
// options (specs about sharing use it). The caller closes it.
func (sc *BackendContext) StartPlugin(ctx context.Context) (PluginProcess, error) {
	return startPlugin(ctx, sc.path, sc.Config.PluginArgs, sc.Config.PluginOptions)
}

// PluginPID is the process id of the running plugin instance.
func (sc *BackendContext) PluginPID() int { return sc.plugin.PID() }

// Key returns a key no other spec of any run uses, ending in name.
func (sc *BackendContext) Key(name string) string {
	return fmt.Sprintf("conformance/%s/%d/%s", sc.runID, sc.seq.Add(1), name)
}

// Token mints a fresh owner token (128 random bits), as the engine does.
func (sc *BackendContext) Token() string { return randomHex(16) }

// Stamp is a fresh HLC reading to propose on Acquire.
func (sc *BackendContext) Stamp() hlc.Timestamp { return sc.clock.Now() }

// TTL is the short lease the timing specs use: Config.TTL within the
// backend's bounds.
func (sc *BackendContext) TTL() time.Duration {
	return clampTTL(sc.Config.TTL, sc.Info.MinTTL, sc.Info.MaxTTL)
}

// LongTTL is a lease that outlives any spec.
func (sc *BackendContext) LongTTL() time.Duration {
	return clampTTL(time.Minute, sc.Info.MinTTL, sc.Info.MaxTTL)
}

// FreeWithin is how soon after an acquisition a lease of TTL() must be free:
// TTL + the backend's granularity + the configured slack.
func (sc *BackendContext) FreeWithin() time.Duration {
	return sc.TTL() + sc.Info.TTLGranularity + sc.Config.Slack
}

// Acquire is a helper that acquires key with a fresh token and stamp and
// returns the request it sent along with the result.
func (sc *BackendContext) Acquire(ctx context.Context, key string, ttl time.Duration) (backend.AcquireRequest, backend.AcquireResult, error) {
	req := backend.AcquireRequest{Key: key, OwnerToken: sc.Token(), TTL: ttl, Holder: "conformance", Stamp: sc.Stamp()}
	res, err := sc.Backend.Acquire(ctx, req)
	return req, res, err
}

// MustAcquire acquires key and fails the spec unless it was free.
func (sc *BackendContext) MustAcquire(ctx context.Context, key string, ttl time.Duration) (backend.AcquireRequest, backend.Record) {
	ginkgo.GinkgoHelper()
	req, res, err := sc.Acquire(ctx, key, ttl)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "Acquire %q", key)
	gomega.Expect(res.Acquired).To(gomega.BeTrue(), "Acquire of free key %q: acquired=false, held by %+v", key, res.Record)
	return req, res.Record
}

// AwaitFree tries to acquire key with a fresh token every few milliseconds
// until it succeeds or within elapses. It returns the winning request and
// result, when the successful answer came, and when the last refused attempt
// was sent.
func (sc *BackendContext) AwaitFree(ctx context.Context, key string, ttl, within time.Duration) (req backend.AcquireRequest, rec backend.Record, freeAt, lastRefusedSent time.Time, err error) {
	deadline := time.Now().Add(within)
	for {
		sent := time.Now()
		req, res, aerr := sc.Acquire(ctx, key, ttl)
		if aerr != nil {
			return req, rec, time.Time{}, lastRefusedSent, aerr
		}
		if res.Acquired {
			return req, res.Record, time.Now(), lastRefusedSent, nil
		}
		lastRefusedSent = sent
		if time.Now().After(deadline) {
			return req, rec, time.Time{}, lastRefusedSent,
				fmt.Errorf("%q still held after %s (holder %+v)", key, within, res.Record)
		}
		select {
		case <-ctx.Done():
			return req, rec, time.Time{}, lastRefusedSent, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func clampTTL(ttl, lo, hi time.Duration) time.Duration {
	if ttl < lo {
		ttl = lo
	}
	if hi > 0 && ttl > hi {
		ttl = hi
	}
	return ttl
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// isUnavailable reports whether err says the backend cannot answer now (as
// while the plugin host restarts a plugin).
func isUnavailable(err error) bool { return errors.Is(err, backend.ErrUnavailable) }

// isInvalidArgument reports whether err says the request is outside what the
// backend accepts.
func isInvalidArgument(err error) bool { return errors.Is(err, backend.ErrInvalidArgument) }
