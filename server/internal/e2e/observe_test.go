package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// span is what the test receiver keeps of an exported span.
type span struct {
	service, name string
	kind          tracepb.Span_SpanKind
	trace, id     string
	parent        string
}

// otlpReceiver is a minimal OTLP/HTTP traces endpoint (protobuf bodies).
type otlpReceiver struct {
	mu    sync.Mutex
	spans []span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, span{
					service: service, name: s.GetName(), kind: s.GetKind(),
					trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()),
				})
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (r *otlpReceiver) find(service, name string, kind tracepb.Span_SpanKind) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []span
	for _, s := range r.spans {
		if s.service == service && s.name == name && s.kind == kind {
			out = append(out, s)
		}
	}
	return out
}

// One Acquire, traced through the server into the plugin process: the
// server's RPC span, its client span of the plugin call, and the plugin's
// own server span (another process, another exporter) share one trace.
func TestTraceCrossesThePluginBoundary(t *testing.T) {
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	s := startServer(t, []string{"OTEL_BSP_SCHEDULE_DELAY=50"}, "--addr", "127.0.0.1:0", "--otlp-endpoint", collector.URL)
	s.waitStderr(t, "tracing on")

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "traced", Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetAcquired() {
		t.Fatalf("acquire: %v %v", r, err)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		rpcs := recv.find("holdfast", "holdfast.lock.v1.LockService/Acquire", tracepb.Span_SPAN_KIND_SERVER)
		calls := recv.find("holdfast", "holdfast.backend.v1.BackendService/Acquire", tracepb.Span_SPAN_KIND_CLIENT)
		served := recv.find("holdfast-backend-memory", "holdfast.backend.v1.BackendService/Acquire", tracepb.Span_SPAN_KIND_SERVER)
		if len(rpcs) == 1 && len(calls) == 1 && len(served) == 1 {
			rpc, call, srv := rpcs[0], calls[0], served[0]
			if call.trace != rpc.trace || srv.trace != rpc.trace {
				t.Fatalf("traces differ: rpc %s, call %s, plugin %s", rpc.trace, call.trace, srv.trace)
			}
			if call.parent != rpc.id || srv.parent != call.id {
				t.Fatalf("parents: call's %s (rpc %s), plugin's %s (call %s)", call.parent, rpc.id, srv.parent, call.id)
			}
			break
		}
		if time.Now().After(deadline) {
			recv.mu.Lock()
			t.Fatalf("spans not exported; got %+v", recv.spans)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// JSON logs on stderr, every line an object; the plugin's own lines are
// folded in at their level with plugin=NAME, and --log-level reaches the
// plugin.
func TestJSONLogsWithPluginLines(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug")
	s.waitStderr(t, `"plugin address"`)
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(s.Logs()))
	var fromPlugin, serving bool
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", sc.Text(), err)
		}
		if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Fatalf("line without time/level/msg: %v", rec)
		}
		// go-plugin's "plugin address" is logged by the plugin process at
		// debug, written to its stderr as hclog JSON, and re-levelled here.
		if rec["msg"] == "plugin address" && rec["plugin"] == "memory" && rec["level"] == "DEBUG" {
			fromPlugin = true
		}
		if rec["msg"] == "holdfast serving" {
			serving = true
		}
	}
	if !fromPlugin || !serving {
		t.Fatalf("want the plugin's debug line (plugin=memory) and the serving line:\n%s", s.Logs())
	}
}
