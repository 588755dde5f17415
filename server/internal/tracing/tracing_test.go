package tracing_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/pluginhost"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/httpserver"
	"github.com/holdfast/holdfast/server/internal/tracing"
)

// memoryPlugin is holdfast-backend-memory, from $HOLDFAST_BIN_DIR or built.
var memoryPlugin string

func TestMain(m *testing.M) {
	cleanup := func() {}
	if dir := os.Getenv("HOLDFAST_BIN_DIR"); dir != "" {
		if p := filepath.Join(dir, "holdfast-backend-memory"); exists(p) {
			memoryPlugin = p
		}
	}
	if memoryPlugin == "" {
		dir, err := os.MkdirTemp("", "tracing-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cleanup = func() { os.RemoveAll(dir) }
		memoryPlugin = filepath.Join(dir, "holdfast-backend-memory")
		cmd := exec.Command("go", "build", "-o", memoryPlugin, "github.com/holdfast/holdfast/plugins/memory/cmd/holdfast-backend-memory")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			cleanup()
			os.Exit(1)
		}
	}
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func exists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// An RPC's span and the span of the plugin call it made share one trace,
// the plugin call a child of the RPC, and the RPC a child of the caller's
// span (its traceparent header is trusted).
func TestRPCSpanParentsPluginCallSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() {
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	tr := tracing.WithProvider(tp)

	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := pluginhost.Start(ctx, pluginhost.Config{Path: memoryPlugin, Name: "memory", Logger: log, DialOptions: tr.DialOptions()})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	eng, err := engine.New(ctx, host, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	icpt, err := tr.Interceptors()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpserver.Start("127.0.0.1:0", eng, log, httpserver.WithInterceptors(icpt...))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		eng.Close()
		_ = srv.Shutdown(context.Background())
	}()
	hcTr := &http.Transport{}
	defer hcTr.CloseIdleConnections()
	c := lockv1connect.NewLockServiceClient(&http.Client{Transport: injecting{hcTr}}, "http://"+srv.Addr().String())

	// The caller's own span, sent as a traceparent header.
	callerCtx, caller := tp.Tracer("test").Start(ctx, "caller")
	resp, err := c.Acquire(callerCtx, &lockv1.AcquireRequest{Key: "traced", Ttl: durationpb.New(time.Minute)})
	caller.End()
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("acquire: %v %v", resp, err)
	}

	var rpc, call *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		s := &spans[i]
		switch {
		case s.Name == "holdfast.lock.v1.LockService/Acquire" && s.SpanKind == trace.SpanKindServer:
			rpc = s
		case s.Name == "holdfast.backend.v1.BackendService/Acquire" && s.SpanKind == trace.SpanKindClient:
			call = s
		}
	}
	if rpc == nil || call == nil {
		names := []string{}
		for _, s := range spans {
			names = append(names, s.Name+"/"+s.SpanKind.String())
		}
		t.Fatalf("want an RPC span and a plugin call span; got %v", names)
	}
	if call.SpanContext.TraceID() != rpc.SpanContext.TraceID() {
		t.Fatalf("plugin call trace %s, RPC trace %s", call.SpanContext.TraceID(), rpc.SpanContext.TraceID())
	}
	if call.Parent.SpanID() != rpc.SpanContext.SpanID() {
		t.Fatalf("plugin call's parent %s is not the RPC span %s", call.Parent.SpanID(), rpc.SpanContext.SpanID())
	}
	if rpc.SpanContext.TraceID() != caller.SpanContext().TraceID() || rpc.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Fatalf("RPC span %s (parent %s) is not a child of the caller's %s", rpc.SpanContext.TraceID(), rpc.Parent.SpanID(), caller.SpanContext().SpanID())
	}
}

// injecting sends the request context's span as a traceparent header, as
// an instrumented client does.
type injecting struct{ rt http.RoundTripper }

func (i injecting) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return i.rt.RoundTrip(r)
}

// Off makes no spans and adds no options.
func TestOff(t *testing.T) {
	t.Setenv(tracing.EnvEndpoint, "")
	t.Setenv(tracing.EnvTracesEndpoint, "")
	tr, err := tracing.Setup(context.Background(), tracing.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() || len(tr.DialOptions()) != 0 || len(tr.PluginEnv()) != 0 {
		t.Fatal("tracing on without an endpoint")
	}
	if i, err := tr.Interceptors(); err != nil || len(i) != 0 {
		t.Fatalf("interceptors when off: %v %v", i, err)
	}
	if _, err := tracing.Setup(context.Background(), tracing.Config{Endpoint: "collector:4318"}); err == nil {
		t.Fatal("an endpoint without a scheme was accepted")
	}
}
