package pluginhost

import (
	"context"
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
		// The plugin reads its log level from the environment.
		Env: []string{backend.LogLevelEnv + "=debug"},
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
		t.Fatal("Env did not reach the plugin: no debug line from it")
	}
}
