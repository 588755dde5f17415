package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/pluginhost"
	"github.com/holdfast/holdfast/server/internal/httpserver"
	"github.com/holdfast/holdfast/server/internal/metrics"
	"github.com/holdfast/holdfast/server/internal/tracing"
	"github.com/holdfast/holdfast/server/internal/turns"
)

// observability is what `holdfast serve` measures and traces: Prometheus
// metrics on --metrics-addr (off when empty) and OpenTelemetry spans to
// --otlp-endpoint or the OTEL_* environment (off when neither is set).
type observability struct {
	tr       *tracing.Tracing
	met      *metrics.Metrics // nil: metrics off
	msrv     *metrics.Server
	log      *slog.Logger
	logLevel string
}

func setupObservability(ctx context.Context, o serveOptions, version string, log *slog.Logger) (*observability, error) {
	tr, err := tracing.Setup(ctx, tracing.Config{Endpoint: o.otlpEndpoint, ServiceName: "holdfast", Version: version, Logger: log.With("component", "tracing")})
	if err != nil {
		return nil, err
	}
	ob := &observability{tr: tr, log: log, logLevel: o.logLevel}
	if o.metricsAddr != "" {
		ob.met = metrics.New()
	}
	if tr.Enabled() {
		log.Info("tracing on: exporting spans by OTLP/HTTP", "endpoint", tr.Endpoint())
	}
	return ob, nil
}

// plugin adds the plugin host's hooks: call latency, trace propagation,
// and the log level (the plugin logs at --log-level too, unless
// HOLDFAST_BACKEND_LOG_LEVEL says otherwise; the host filters again).
func (ob *observability) plugin(cfg *pluginhost.Config) {
	cfg.LogLevel = ob.logLevel
	if ob.met != nil {
		cfg.OnCall = ob.met.PluginCall
	}
	cfg.DialOptions = append(cfg.DialOptions, ob.tr.DialOptions()...)
	cfg.Env = append(cfg.Env, ob.tr.PluginEnv()...)
}

// observer is the engine's Observer (nil when metrics are off).
func (ob *observability) observer() engine.Observer {
	if ob.met == nil {
		return nil
	}
	return ob.met
}

// serverOptions are the outermost interceptors of LockService: the RPC's
// span first, then its latency (so that a refused request is measured
// too).
func (ob *observability) serverOptions() ([]httpserver.Option, error) {
	icpt, err := ob.tr.Interceptors()
	if err != nil {
		return nil, err
	}
	if ob.met != nil {
		icpt = append(icpt, ob.met.Interceptor())
	}
	if len(icpt) == 0 {
		return nil, nil
	}
	return []httpserver.Option{httpserver.WithInterceptors(icpt...)}, nil
}

// start serves the metrics once the server runs.
func (ob *observability) start(addr, version string, eng *engine.Engine, host *pluginhost.Host, background *turns.Turns) error {
	if ob.met == nil {
		return nil
	}
	ob.met.Track(metrics.Sources{
		Version: version, BackendName: eng.Info().Name,
		Engine: eng, Backend: host, Plugin: host,
	})
	srv, err := metrics.Serve(addr, ob.met, ob.log, background)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	ob.msrv = srv
	ob.log.Info("metrics serving", "url", "http://"+srv.Addr().String()+"/metrics")
	return nil
}

// close stops the metrics server and flushes spans not yet exported.
func (ob *observability) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ob.msrv != nil {
		if err := ob.msrv.Shutdown(ctx); err != nil {
			ob.log.Warn("stopping metrics server", "err", err)
		}
	}
	if err := ob.tr.Shutdown(ctx); err != nil {
		ob.log.Warn("flushing spans", "err", err)
	}
}
