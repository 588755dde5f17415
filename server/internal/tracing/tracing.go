// Package tracing is holdfast's OpenTelemetry tracing: a span for each RPC
// of LockService (connectrpc.com/otelconnect) and for each call into the
// backend plugin (otelgrpc's client stats handler on go-plugin's gRPC
// connection), exported by OTLP over HTTP.
//
// Tracing is off unless configured: `holdfast serve --otlp-endpoint URL`
// (or HOLDFAST_OTLP_ENDPOINT), or the standard OTEL_EXPORTER_OTLP_ENDPOINT /
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables. Off means a no-op tracer
// provider: no span is made, nothing is sent, nothing is propagated.
//
// The trace context crosses the plugin boundary as W3C traceparent gRPC
// metadata, injected by the host's stats handler. A plugin makes spans of
// its own only if it opts in: core/backend stays free of OpenTelemetry, and
// a plugin that wants spans serves with backendserver.WithGRPCServerOptions
// and a server stats handler (the embedded memory plugin does, through Plugin,
// when the host turned tracing on: the host hands it PluginEnv).
//
// Incoming trace context from clients is trusted: an RPC's span is a child
// of the caller's span, so a client's trace shows the lock calls it made.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// Environment variables read to decide whether tracing is on.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	// EnvPlugin tells a plugin process that its host traces (PluginEnv).
	EnvPlugin = "HOLDFAST_PLUGIN_TRACING"
)

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP base URL (http://collector:4318) or full
	// traces URL (.../v1/traces). Empty: the OTEL_* environment decides.
	Endpoint string
	// ServiceName is the resource's service.name ("holdfast").
	ServiceName string
	// Version is the resource's service.version.
	Version string
	// Logger receives export errors (nil: slog.Default()). OpenTelemetry
	// reports them through a process-wide handler, which Setup sets when
	// tracing is on.
	Logger *slog.Logger
}

// Tracing is the tracer provider and the instrumentation built on it.
type Tracing struct {
	tp       trace.TracerProvider
	shutdown func(context.Context) error
	enabled  bool
	endpoint string
}

// Off is tracing turned off: no spans, nothing propagated.
func Off() *Tracing {
	return &Tracing{tp: tracenoop.NewTracerProvider(), shutdown: func(context.Context) error { return nil }}
}

// Setup turns tracing on when cfg.Endpoint or the OTEL_* environment names
// an endpoint, with a batching OTLP/HTTP exporter; otherwise it is Off.
// Nothing is contacted until the first spans are exported.
func Setup(ctx context.Context, cfg Config) (*Tracing, error) {
	var opts []otlptracehttp.Option
	switch {
	case cfg.Endpoint != "":
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--otlp-endpoint: %q is not a URL like http://127.0.0.1:4318", cfg.Endpoint)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != "":
		// otlptracehttp reads the OTEL_EXPORTER_OTLP_* variables itself.
	default:
		return Off(), nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv(EnvTracesEndpoint)
		if endpoint == "" {
			endpoint = os.Getenv(EnvEndpoint)
		}
	}
	// Otherwise they go to the standard log package, unstructured. Without
	// a Logger, slog's default is read when an error comes (a plugin's is
	// set by backendserver.Serve, after this).
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("tracing: " + err.Error())
	}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(Resource(cfg.ServiceName, cfg.Version)),
	)
	return &Tracing{tp: tp, shutdown: tp.Shutdown, enabled: true, endpoint: endpoint}, nil
}

// Resource names the process in its spans.
func Resource(service, version string) *resource.Resource {
	if service == "" {
		service = "holdfast"
	}
	return resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version))
}

// WithProvider is tracing on tp (tests use an in-memory exporter).
func WithProvider(tp trace.TracerProvider) *Tracing {
	return &Tracing{tp: tp, shutdown: func(context.Context) error { return nil }, enabled: true}
}

// Enabled reports whether spans are made.
func (t *Tracing) Enabled() bool { return t.enabled }

// Endpoint is where spans go ("" when off or configured by environment
// only through OTEL_* variables that were not read).
func (t *Tracing) Endpoint() string { return t.endpoint }

// Provider is the tracer provider (a no-op one when off).
func (t *Tracing) Provider() trace.TracerProvider { return t.tp }

// Propagator is W3C trace context and baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Interceptors are the Connect interceptors for LockService: one span per
// RPC. None when off.
func (t *Tracing) Interceptors() ([]connect.Interceptor, error) {
	if !t.enabled {
		return nil, nil
	}
	i, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(t.tp),
		otelconnect.WithPropagator(Propagator()),
		otelconnect.WithoutMetrics(),
		otelconnect.WithTrustRemote(),
	)
	if err != nil {
		return nil, err
	}
	return []connect.Interceptor{i}, nil
}

// DialOptions are the plugin host's gRPC dial options: a client span per
// plugin call, its context injected into the call's metadata. None when
// off.
func (t *Tracing) DialOptions() []grpc.DialOption {
	if !t.enabled {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
	))}
}

// PluginEnv is the environment the host hands the plugin process so that
// a plugin that opts in can export its own spans to the same place.
func (t *Tracing) PluginEnv() []string {
	if !t.enabled {
		return nil
	}
	env := []string{EnvPlugin + "=1"}
	if t.endpoint != "" {
		env = append(env, EnvTracesEndpoint+"="+tracesURL(t.endpoint))
	}
	return env
}

func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return endpoint
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String()
}

// Shutdown flushes spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Plugin is tracing for a plugin process started by a host that traces
// (EnvPlugin set): spans for each call served, children of the host's
// spans, exported to the host's endpoint. Off otherwise.
func Plugin(ctx context.Context, name, version string) (*Tracing, error) {
	if os.Getenv(EnvPlugin) != "1" {
		return Off(), nil
	}
	return Setup(ctx, Config{ServiceName: "holdfast-backend-" + name, Version: version})
}

// ServerOptions are a plugin's gRPC server options: a server span per call
// served, continuing the host's trace. None when off.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if !t.enabled {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
	))}
}
