// Package metrics is holdfast's Prometheus instrumentation: counters and
// histograms fed by the engine's Observer hook, the plugin host's OnCall
// hook and a Connect interceptor, gauges read at scrape time, and the Go
// runtime and process collectors, all in one registry of its own, served on
// a listen address of its own (`holdfast serve --metrics-addr`).
//
// No series has a per-key label: keys are unbounded. The series:
//
//	holdfast_info{version,backend}                     1, labels say what runs
//	holdfast_acquisitions_total{outcome}               acquired | contended
//	holdfast_acquire_wait_seconds{outcome}             histogram, queued Acquires (wait > 0): request to answer
//	holdfast_releases_total{outcome}                   released | stale (the token no longer held)
//	holdfast_extends_total{outcome}                    extended | lost
//	holdfast_lease_expirations_total                   leases that ran out (the backend's expired events)
//	holdfast_multi_key_acquisitions_keys               histogram, keys of multi-key Acquires (claims) that acquired
//	holdfast_replays_total{op}                         repeats (same request_id) answered with the first attempt's lease
//	holdfast_lock_delay_refusals_total                 Acquires answered not acquired because a key was in its lock-delay
//	holdfast_grants_total{kind,mode}                   leases granted, by kind (mutex | semaphore | rwlock | election) and rwlock mode (shared | exclusive; "" otherwise)
//	holdfast_proclaims_total{outcome}                  Proclaims answered: proclaimed | stale (the token did not lead the election)
//	holdfast_waiters                                   callers queued on this server (all keys)
//	holdfast_locks_held                                leases held in the backend (Count, or List, at scrape; each holder of a semaphore or rwlock counts)
//	holdfast_rpc_duration_seconds{method,code}         histogram, unary RPCs (Acquire includes its wait)
//	holdfast_rpc_streams{method}                       open server streams (Watch, Observe)
//	holdfast_backend_up                                1 while the plugin runs and answers its liveness ping
//	holdfast_backend_restarts_total                    plugin relaunches after a crash
//	holdfast_backend_call_duration_seconds{method,outcome}  histogram, calls into the plugin (ok | error)
//	go_*, process_*                                    the standard collectors
//
// holdfast_locks_held is a count, not an event tally: at scrape time (at
// most once per HeldRefresh) it asks the backend, so it is exact after a
// plugin restart or a missed event and, on a shared backend, counts the
// locks taken through every server. A backend that counts its leases
// (backend.CountBackend) answers in one call, whatever it holds; the
// others are listed page by page, up to MaxHeldCount leases, which costs
// the plugin a walk of every lock beside the Acquires it serves.
// holdfast_lease_expirations_total and the other event-based series count
// what this server saw.
//
// Scrapes closer together than ScrapeReuse share one rendering of the
// registry (per format and compression), so that a scraper in a loop
// costs the server one rendering per ScrapeReuse, not a processor. Even
// served from that rendering, a scrape in a loop would keep a processor
// busy with HTTP: scrapes take turns with List pages (package turns), so
// that together they leave the lock calls a processor.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/server/internal/turns"
)

// Bounds of holdfast_locks_held's count.
const (
	HeldRefresh  = 5 * time.Second
	MaxHeldCount = 100000
	heldTimeout  = 2 * time.Second
)

// Metrics is the registry and every series. It implements engine.Observer.
type Metrics struct {
	reg *prometheus.Registry

	acquisitions *prometheus.CounterVec
	acquireWait  *prometheus.HistogramVec
	releases     *prometheus.CounterVec
	extends      *prometheus.CounterVec
	proclaims    *prometheus.CounterVec
	expirations  prometheus.Counter
	setKeys      prometheus.Histogram
	replays      *prometheus.CounterVec
	delayed      prometheus.Counter
	grants       *prometheus.CounterVec
	rpc          *prometheus.HistogramVec
	streams      *prometheus.GaugeVec
	pluginCalls  *prometheus.HistogramVec
}

var _ engine.Observer = (*Metrics)(nil)

// latencyBuckets span a fast in-memory call to a long queued wait.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// New makes the registry with the Go and process collectors and the
// event-fed series. Track adds the gauges read from a running server.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_acquisitions_total",
		Help: "Acquire requests answered, by outcome: acquired, or contended (held by someone else for the whole wait).",
	}, []string{"outcome"})
	m.acquireWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_acquire_wait_seconds",
		Help:    "Time queued Acquires (wait > 0) took from request to answer, by outcome.",
		Buckets: latencyBuckets,
	}, []string{"outcome"})
	m.releases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_releases_total",
		Help: "Release requests answered, by outcome: released, or stale (the owner token no longer held the lock).",
	}, []string{"outcome"})
	m.extends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_extends_total",
		Help: "Extends answered (each item of an ExtendBatch counts as one), by outcome: extended, or lost (the owner token no longer held the lock).",
	}, []string{"outcome"})
	m.proclaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_proclaims_total",
		Help: "Proclaims answered, by outcome: proclaimed, or stale (the owner token did not hold the election's leadership).",
	}, []string{"outcome"})
	m.expirations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "holdfast_lease_expirations_total",
		Help: "Leases that ran out of TTL while held (the backend's expired events seen by this server).",
	})
	m.setKeys = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "holdfast_multi_key_acquisitions_keys",
		Help:    "Keys of each multi-key Acquire (claims) that acquired.",
		Buckets: []float64{2, 3, 4, 8, 16, 32, 64},
	})
	m.replays = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_replays_total",
		Help: "Repeats of a request (same request_id) answered as its first attempt was, by operation: a lost answer recovered.",
	}, []string{"op"})
	m.delayed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "holdfast_lock_delay_refusals_total",
		Help: "Acquires answered not acquired because a key was in its lock-delay (its last lease expired).",
	})
	m.grants = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_grants_total",
		Help: "Leases granted by Acquire, by the kind of the key (mutex, semaphore, rwlock, election) and, for an rwlock, the mode (shared, exclusive).",
	}, []string{"kind", "mode"})
	m.rpc = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_rpc_duration_seconds",
		Help:    "Unary RPC latency by method and Connect code (ok on success); a queued Acquire includes its wait.",
		Buckets: latencyBuckets,
	}, []string{"method", "code"})
	m.streams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_rpc_streams",
		Help: "Open server streams by method (Watch, Observe).",
	}, []string{"method"})
	m.pluginCalls = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "holdfast_backend_call_duration_seconds",
		Help:    "Latency of calls into the backend plugin by method and outcome (ok or error).",
		Buckets: latencyBuckets,
	}, []string{"method", "outcome"})
	// Zero series for the known outcomes, so that rates exist from the
	// first scrape.
	for _, o := range []string{"acquired", "contended"} {
		m.acquisitions.WithLabelValues(o)
	}
	for _, o := range []string{"released", "stale"} {
		m.releases.WithLabelValues(o)
	}
	for _, o := range []string{"extended", "lost"} {
		m.extends.WithLabelValues(o)
	}
	for _, o := range []string{"proclaimed", "stale"} {
		m.proclaims.WithLabelValues(o)
	}
	m.streams.WithLabelValues("Watch")
	m.streams.WithLabelValues("Observe")
	m.grants.WithLabelValues("mutex", "")
	m.grants.WithLabelValues("semaphore", "")
	m.grants.WithLabelValues("rwlock", "shared")
	m.grants.WithLabelValues("rwlock", "exclusive")
	m.grants.WithLabelValues("election", "")
	m.replays.WithLabelValues("acquire")
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.acquisitions, m.acquireWait, m.releases, m.extends, m.proclaims, m.expirations,
		m.setKeys, m.replays, m.delayed, m.grants,
		m.rpc, m.streams, m.pluginCalls,
	)
	return m
}

// Registry is the registry every series is in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// AcquireDone implements engine.Observer.
func (m *Metrics) AcquireDone(acquired, queued bool, waited time.Duration) {
	outcome := "contended"
	if acquired {
		outcome = "acquired"
	}
	m.acquisitions.WithLabelValues(outcome).Inc()
	if queued {
		m.acquireWait.WithLabelValues(outcome).Observe(waited.Seconds())
	}
}

// ReleaseDone implements engine.Observer.
func (m *Metrics) ReleaseDone(released bool) {
	if released {
		m.releases.WithLabelValues("released").Inc()
	} else {
		m.releases.WithLabelValues("stale").Inc()
	}
}

// ExtendDone implements engine.Observer.
func (m *Metrics) ExtendDone(extended bool) {
	if extended {
		m.extends.WithLabelValues("extended").Inc()
	} else {
		m.extends.WithLabelValues("lost").Inc()
	}
}

// ProclaimDone implements engine.Observer.
func (m *Metrics) ProclaimDone(proclaimed bool) {
	if proclaimed {
		m.proclaims.WithLabelValues("proclaimed").Inc()
	} else {
		m.proclaims.WithLabelValues("stale").Inc()
	}
}

// BackendEvent implements engine.Observer.
func (m *Metrics) BackendEvent(t backend.EventType) {
	if t == backend.EventExpired {
		m.expirations.Inc()
	}
}

// SetAcquired implements engine.Observer.
func (m *Metrics) SetAcquired(keys int) { m.setKeys.Observe(float64(keys)) }

// Replayed implements engine.Observer.
func (m *Metrics) Replayed(op string) { m.replays.WithLabelValues(op).Inc() }

// LockDelayed implements engine.Observer.
func (m *Metrics) LockDelayed() { m.delayed.Inc() }

// Granted implements engine.Observer.
func (m *Metrics) Granted(kind backend.Kind, mode lockv1.Mode) {
	label := ""
	switch mode {
	case lockv1.Mode_MODE_SHARED:
		label = "shared"
	case lockv1.Mode_MODE_EXCLUSIVE:
		label = "exclusive"
	}
	m.grants.WithLabelValues(kind.String(), label).Inc()
}

// PluginCall is pluginhost.Config.OnCall.
func (m *Metrics) PluginCall(method string, took time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.pluginCalls.WithLabelValues(method, outcome).Observe(took.Seconds())
}

// Plugin is what Track reads from the plugin host (pluginhost.Host).
type Plugin interface {
	Up() bool
	Restarts() uint64
}

// Sources are what the scrape-time series read.
type Sources struct {
	Version     string
	BackendName string
	Engine      *engine.Engine
	Backend     backend.Backend // listed for holdfast_locks_held
	Plugin      Plugin
}

// Track registers the series read at scrape time from a running server.
func (m *Metrics) Track(s Sources) {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "holdfast_info",
		Help:        "Always 1; the labels say which version serves which backend.",
		ConstLabels: prometheus.Labels{"version": s.Version, "backend": s.BackendName},
	})
	info.Set(1)
	m.reg.MustRegister(
		info,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "holdfast_waiters",
			Help: "Callers queued on this server for a lock (all keys).",
		}, func() float64 { return float64(s.Engine.QueueDepth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "holdfast_backend_up",
			Help: "1 while the backend plugin runs and answers its liveness ping, 0 while it is down (restarting) or does not answer (frozen).",
		}, func() float64 {
			if s.Plugin.Up() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "holdfast_backend_restarts_total",
			Help: "Times the backend plugin was relaunched after it exited.",
		}, func() float64 { return float64(s.Plugin.Restarts()) }),
		&heldCollector{b: s.Backend, desc: prometheus.NewDesc("holdfast_locks_held",
			"Leases held in the backend (each semaphore or rwlock lease once), counted at scrape time (at most every 5s; up to 100000 when the backend must be listed to count; with a shared backend, every server's locks).",
			nil, nil)},
	)
}

// heldCollector counts the backend's locks at scrape time, caching the
// count for HeldRefresh so that frequent scrapes cost one count.
type heldCollector struct {
	b    backend.Backend
	desc *prometheus.Desc

	mu    sync.Mutex
	at    time.Time
	count int
	ok    bool
}

func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= HeldRefresh {
		c.count, c.ok = c.countLocks()
		c.at = time.Now()
	}
	if c.ok { // no series while the backend cannot be listed
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.count))
	}
}

// countLocks asks a counting backend for its count and lists any other
// (or one whose plugin does not serve Count).
func (c *heldCollector) countLocks() (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), heldTimeout)
	defer cancel()
	if cb, ok := c.b.(backend.CountBackend); ok {
		n, err := cb.Count(ctx)
		if err == nil {
			return int(n), true
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return 0, false
		}
	}
	return c.listLocks(ctx)
}

// listLocks counts by paging through the backend, up to MaxHeldCount.
func (c *heldCollector) listLocks(ctx context.Context) (int, bool) {
	n, token := 0, ""
	for n < MaxHeldCount {
		page, err := c.b.List(ctx, backend.ListRequest{PageSize: engine.MaxPageSize, PageToken: token})
		if err != nil {
			return 0, false
		}
		for _, r := range page.Records {
			n += max(len(r.Holders), 1) // each lease of a semaphore or rwlock
		}
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	return min(n, MaxHeldCount), true
}

// Interceptor measures LockService's RPCs: unary latency by method and
// code, and open streams by method.
func (m *Metrics) Interceptor() connect.Interceptor { return interceptor{m} }

type interceptor struct{ m *Metrics }

// method is the last part of a procedure ("/holdfast.lock.v1.LockService/Acquire").
func method(procedure string) string {
	return procedure[strings.LastIndexByte(procedure, '/')+1:]
}

func code(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		i.m.rpc.WithLabelValues(method(req.Spec().Procedure), code(err)).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		g := i.m.streams.WithLabelValues(method(conn.Spec().Procedure))
		g.Inc()
		defer g.Dec()
		return next(ctx, conn)
	}
}

// Server serves /metrics on its own listener.
type Server struct {
	srv    *http.Server
	ln     net.Listener
	served chan error

	once    sync.Once
	stopErr error
}

// Serve listens on addr and serves m's registry at /metrics in the
// background. Scrapes run in t's turns (package turns: shared with List
// pages, so that together they leave lock calls a processor); nil gives
// them turns of their own.
func Serve(addr string, m *Metrics, log *slog.Logger, t *turns.Turns) (*Server, error) {
	if t == nil {
		t = turns.ForProcessors()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", t.Handler(newReuse(m.Handler(), ScrapeReuse)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("holdfast metrics: see /metrics\n"))
	})
	s := &Server{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		ln:     ln,
		served: make(chan error, 1),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the metrics server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops the metrics server; later calls return the first's
// result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		err := s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
		}
		if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
		s.stopErr = err
	})
	return s.stopErr
}
