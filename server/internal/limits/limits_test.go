package limits_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/httpserver"
	"github.com/holdfast/holdfast/server/internal/limits"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves a real engine on the memory backend behind lim; each
// client() is its own HTTP/2 connection.
func start(t *testing.T, lim *limits.Interceptor, cfgs ...engine.Config) (client func() lockv1connect.LockServiceClient) {
	t.Helper()
	b := memory.New()
	cfg := engine.Config{MaxWait: time.Minute}
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	e, err := engine.New(context.Background(), b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpserver.Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), httpserver.WithInterceptors(lim))
	if err != nil {
		t.Fatal(err)
	}
	var transports []*http.Transport
	t.Cleanup(func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
		e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		b.Close()
	})
	return func() lockv1connect.LockServiceClient {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: p}
		transports = append(transports, tr)
		return lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+srv.Addr().String(), connect.WithGRPC())
	}
}

func TestMaxRequestDuration(t *testing.T) {
	client := start(t, limits.New(limits.Config{MaxRequestDuration: 200 * time.Millisecond}))
	c := client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetAcquired() {
		t.Fatal(r, err)
	}
	began := time.Now()
	_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(30 * time.Second)})
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("a wait past the server's deadline: %v, want deadline_exceeded", err)
	}
	if took := time.Since(began); took > 5*time.Second || took < 200*time.Millisecond {
		t.Fatalf("answered after %s, want about 200ms", took)
	}
	// The waiter left its queue.
	ins, err := c.Inspect(ctx, &lockv1.InspectRequest{Key: "k"})
	if err != nil || ins.GetState().GetWaiters() != 0 {
		t.Fatalf("inspect: %v %v", ins, err)
	}
}

// watch opens a Watch and waits for its SYNCED message, or returns the
// error it ended with.
func watch(ctx context.Context, c lockv1connect.LockServiceClient) (*connect.ServerStreamForClient[lockv1.WatchResponse], error) {
	s, err := c.Watch(ctx, &lockv1.WatchRequest{})
	if err != nil {
		return nil, err
	}
	if !s.Receive() {
		err := s.Err()
		s.Close()
		if err == nil {
			err = errors.New("watch ended without an error")
		}
		return nil, err
	}
	return s, nil
}

func TestWatchStreamLimits(t *testing.T) {
	lim := limits.New(limits.Config{MaxStreams: 3, MaxStreamsPerConn: 2})
	client := start(t, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	one, two := client(), client()
	var open []*connect.ServerStreamForClient[lockv1.WatchResponse]
	defer func() {
		for _, s := range open {
			s.Close()
		}
	}()
	for range 2 {
		s, err := watch(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	_, err := watch(ctx, one)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "per connection") {
		t.Fatalf("third watch on one connection: %v, want resource_exhausted per connection", err)
	}
	s, err := watch(ctx, two)
	if err != nil {
		t.Fatalf("a watch on another connection: %v", err)
	}
	open = append(open, s)
	_, err = watch(ctx, two)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "on this server") {
		t.Fatalf("fourth watch on the server: %v, want resource_exhausted on this server", err)
	}
	// Unary calls are not streams: they still work.
	if _, err := two.Inspect(ctx, &lockv1.InspectRequest{Key: "k"}); err != nil {
		t.Fatal(err)
	}

	// A closed stream gives its place back.
	open[0].Close()
	open = open[1:]
	eventually(t, func() bool { return lim.Streams() == 2 })
	if s, err = watch(ctx, two); err != nil {
		t.Fatalf("a watch after one closed: %v", err)
	}
	open = append(open, s)
	for _, s := range open {
		s.Close()
	}
	open = nil
	eventually(t, func() bool { return lim.Streams() == 0 })
}

// eventually polls cond until it holds, for at most 5s.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
	}
}

func TestCheck(t *testing.T) {
	if err := limits.Check(limits.Config{MaxRequestDuration: time.Minute}, time.Minute); !errors.Is(err, limits.ErrWaitTooLong) ||
		!strings.Contains(err.Error(), "--max-request-duration 1m0s is not above --max-wait 1m0s") {
		t.Fatalf("equal to max wait: %v", err)
	}
	if err := limits.Check(limits.Config{MaxRequestDuration: 2 * time.Minute}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := limits.Check(limits.Config{MaxStreams: -1}, time.Minute); err == nil {
		t.Fatal("negative stream limit accepted")
	}
}

// The limits that live elsewhere, through the same real handlers, with
// their exact codes.
func TestOtherLimits(t *testing.T) {
	client := start(t, limits.New(limits.Config{}), engine.Config{MaxWait: time.Minute, MaxTTL: time.Hour, MaxWaiters: 1})
	c := client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A message over 1 MiB is refused before it is decoded.
	_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Second), Holder: strings.Repeat("h", httpserver.MaxMessageBytes)})
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a message over %d bytes: %v, want resource_exhausted", httpserver.MaxMessageBytes, err)
	}
	for _, tc := range []struct {
		req  *lockv1.AcquireRequest
		want string
	}{
		{&lockv1.AcquireRequest{Key: strings.Repeat("k", engine.MaxKeyBytes+1), Ttl: durationpb.New(time.Second)}, "key: 513 bytes exceeds the maximum 512 bytes"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(2 * time.Hour)}, "ttl: 2h exceeds the maximum 1h"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Second), Wait: durationpb.New(2 * time.Minute)}, "wait: 2m exceeds the maximum 1m"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Second), Holder: strings.Repeat("h", engine.MaxHolderBytes+1)}, "holder: 257 bytes exceeds the maximum 256 bytes"},
	} {
		_, err := c.Acquire(ctx, tc.req)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || ce.Message() != tc.want {
			t.Fatalf("%v, want invalid_argument %q", err, tc.want)
		}
	}

	// Waiters on the whole server (MaxWaiters 1): the second is refused.
	if r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "a", Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetAcquired() {
		t.Fatal(r, err)
	}
	if r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "b", Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetAcquired() {
		t.Fatal(r, err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(waitCtx, &lockv1.AcquireRequest{Key: "a", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
		waited <- err
	}()
	eventually(t, func() bool {
		ins, err := c.Inspect(ctx, &lockv1.InspectRequest{Key: "a"})
		return err == nil && ins.GetState().GetWaiters() == 1
	})
	_, err = client().Acquire(ctx, &lockv1.AcquireRequest{Key: "b", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a waiter over the server's bound: %v, want resource_exhausted", err)
	}
	stopWaiting()
	if err := <-waited; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("the canceled waiter: %v", err)
	}
}
