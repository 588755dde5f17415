package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// switchable is a Supervised whose state the test flips, standing in for a
// plugin process going down and up (the backend itself stays real).
type switchable struct {
	mu      sync.Mutex
	up      bool
	changed chan struct{}
}

func (s *switchable) Up() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.up }

func (s *switchable) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *switchable) set(up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = up
	close(s.changed)
	s.changed = make(chan struct{})
}

func TestHealthFollowsBackend(t *testing.T) {
	b := memory.New()
	defer b.Close()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sup := &switchable{up: true, changed: make(chan struct{})}
	srv.TrackBackend(sup)

	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	eventually := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); status() != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("health never became %s", want)
			}
		}
		// List (which reflection advertises) says the same of both
		// services.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list, err := hc.List(ctx, &healthpb.HealthListRequest{})
		if err != nil {
			t.Fatalf("health List: %v", err)
		}
		for _, name := range []string{"", "holdfast.lock.v1.LockService"} {
			if got := list.GetStatuses()[name].GetStatus(); got != want {
				t.Fatalf("List says %q is %s, Check says %s", name, got, want)
			}
		}
	}
	eventually(healthpb.HealthCheckResponse_SERVING)
	sup.set(false)
	eventually(healthpb.HealthCheckResponse_NOT_SERVING)
	sup.set(true)
	eventually(healthpb.HealthCheckResponse_SERVING)
	srv.SetNotServing()
	sup.set(true) // no effect once shutting down
	if got := status(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after SetNotServing: %s", got)
	}
	conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// encodingRecorder records the Content-Encoding of every response.
type encodingRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *encodingRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.seen = append(r.seen, resp.Header.Get("Content-Encoding"))
		r.mu.Unlock()
	}
	return resp, err
}

// Large responses (an ExtendBatch of a watchdog's leases) are sent as
// --compression says: uncompressed by default, gzip-compressed with
// CompressGzip for a client that accepts it; small ones never are. Either
// way the answer decodes whole, and a gzip-compressed request is read.
func TestResponseCompression(t *testing.T) {
	for name, tc := range map[string]struct {
		opts  []Option
		large string // Content-Encoding of the ExtendBatch answer
	}{
		"default": {nil, ""},
		"none":    {[]Option{WithCompression(CompressNone)}, ""},
		"gzip":    {[]Option{WithCompression(CompressGzip)}, "gzip"},
	} {
		t.Run(name, func(t *testing.T) {
			for _, sendGzip := range []bool{false, true} {
				checkCompression(t, tc.opts, sendGzip, tc.large)
			}
		})
	}
}

func checkCompression(t *testing.T, opts []Option, sendGzip bool, wantLarge string) {
	t.Helper()
	b := memory.New()
	defer b.Close()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	rec := &encodingRecorder{}
	httpClient := &http.Client{Transport: rec}
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var copts []connect.ClientOption
	if sendGzip {
		copts = append(copts, connect.WithSendGzip())
	}
	client := lockv1connect.NewLockServiceClient(httpClient, "http://"+srv.Addr().String(), copts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const n = 200
	items := make([]*lockv1.ExtendBatchItem, n)
	for i := range items {
		key := fmt.Sprintf("compressed/%03d", i)
		resp, err := client.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("acquire %s: %v %v", key, resp, err)
		}
		items[i] = &lockv1.ExtendBatchItem{Key: key, OwnerToken: resp.GetLease().GetOwnerToken(), Ttl: durationpb.New(time.Minute)}
	}
	if got := rec.seen[len(rec.seen)-1]; got != "" {
		t.Fatalf("an Acquire's answer was sent with Content-Encoding %q, want none", got)
	}
	out, err := client.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: items})
	if err != nil {
		t.Fatalf("ExtendBatch (request gzipped: %v): %v", sendGzip, err)
	}
	if got := rec.seen[len(rec.seen)-1]; got != wantLarge {
		t.Fatalf("ExtendBatch of %d leases (request gzipped: %v) answered with Content-Encoding %q, want %q", n, sendGzip, got, wantLarge)
	}
	if len(out.GetResults()) != n {
		t.Fatalf("%d results for %d items", len(out.GetResults()), n)
	}
	for i, r := range out.GetResults() {
		if !r.GetExtended() || r.GetLease().GetKey() != items[i].GetKey() {
			t.Fatalf("result %d: %v", i, r)
		}
	}
}

func TestParseCompression(t *testing.T) {
	for _, s := range []string{"none", "gzip"} {
		if c, err := ParseCompression(s); err != nil || string(c) != s {
			t.Errorf("ParseCompression(%q) = %q, %v", s, c, err)
		}
	}
	if _, err := ParseCompression("zstd"); err == nil || !strings.Contains(err.Error(), `"zstd" is not none or gzip`) {
		t.Errorf("ParseCompression(zstd): %v, want it refused naming the choices", err)
	}
}
