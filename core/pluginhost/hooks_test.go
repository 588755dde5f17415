package pluginhost

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
)

// The hooks a server uses for metrics and tracing: OnCall sees every unary
// call, DialOptions reach go-plugin's gRPC connection, Env reaches the
// plugin process.
func TestHooks(t *testing.T) {
	var (
		mu    sync.Mutex
		calls []string
		dials atomic.Int64
	)
	log, logs := testLogger(t)
	h := start(t, Config{
		Logger: log,
		Name:   "hooked",
		OnCall: func(method string, took time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil && took > 0 {
				calls = append(calls, method)
			} else {
				calls = append(calls, method+"!")
			}
		},
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				dials.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			})},
		LogLevel: "debug",
	})
	ctx := ctxT(t)
	if _, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), calls...)
	mu.Unlock()
	if len(got) != 2 || got[0] != "Acquire" || got[1] != "Get" {
		t.Fatalf("OnCall saw %v, want [Acquire Get]", got)
	}
	// Info at launch, Acquire, Get.
	if n := dials.Load(); n < 3 {
		t.Fatalf("the dial option's interceptor saw %d calls", n)
	}
	if logs.find(map[string]string{"msg": "plugin address", "level": "DEBUG", "plugin": "hooked"}) == nil {
		t.Fatal("LogLevel did not reach the plugin: no debug line from it")
	}
}

// PprofAddr makes the plugin serve its profiles on a port of its own, which
// it logs; nothing is served there unless asked for.
func TestPprofAddr(t *testing.T) {
	log, logs := testLogger(t)
	start(t, Config{Logger: log, Name: "profiled", PprofAddr: "127.0.0.1:0"})
	var rec map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for rec == nil {
		if rec = logs.find(map[string]string{"msg": "pprof serving", "plugin": "profiled"}); rec == nil {
			if time.Now().After(deadline) {
				t.Fatal(`the plugin did not log "pprof serving"`)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	addr, _ := rec["addr"].(string)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("the plugin's goroutine profile: %s %.200s", resp.Status, body)
	}

	// Without PprofAddr the plugin serves no profiles.
	log2, logs2 := testLogger(t)
	start(t, Config{Logger: log2, Name: "plain"})
	if logs2.find(map[string]string{"msg": "pprof serving"}) != nil {
		t.Fatal("a plugin serves its profiles unasked")
	}
}
