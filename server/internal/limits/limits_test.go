package limits_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	"github.com/holdfast/holdfast/server/internal/auth"
	"github.com/holdfast/holdfast/server/internal/httpserver"
	"github.com/holdfast/holdfast/server/internal/limits"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves a real engine on the memory backend behind the interceptors
// (auth, when given, then lim); each client(from) is its own HTTP/2
// connection, dialed from the local address from ("" for 127.0.0.1: other
// 127/8 addresses stand for other clients).
func start(t *testing.T, lim *limits.Interceptor, cfgs ...engine.Config) (client func(from string) lockv1connect.LockServiceClient) {
	c := startWith(t, []connect.Interceptor{lim}, cfgs...)
	return func(from string) lockv1connect.LockServiceClient { return c(from, "") }
}

// startWith is start with any interceptors; its clients send bearer (when
// not empty) as their token.
func startWith(t *testing.T, icpt []connect.Interceptor, cfgs ...engine.Config) (client func(from, bearer string) lockv1connect.LockServiceClient) {
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
	srv, err := httpserver.Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), httpserver.WithInterceptors(icpt...))
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
	return func(from, bearer string) lockv1connect.LockServiceClient {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		d := &net.Dialer{}
		if from != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		tr := &http.Transport{Protocols: p, DialContext: d.DialContext}
		transports = append(transports, tr)
		var opts []connect.ClientOption
		if bearer != "" {
			opts = append(opts, connect.WithInterceptors(withBearer(bearer)))
		}
		return lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+srv.Addr().String(), append(opts, connect.WithGRPC())...)
	}
}

// withBearer sends a bearer token with every call.
type withBearer string

func (b withBearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b withBearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (withBearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func TestMaxRequestDuration(t *testing.T) {
	client := start(t, limits.New(limits.Config{MaxRequestDuration: 200 * time.Millisecond}))
	c := client("")
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

// Streams count per client, over all its connections.
func TestWatchStreamLimits(t *testing.T) {
	lim := limits.New(limits.Config{MaxStreams: 3, MaxStreamsPerClient: 2})
	client := start(t, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	one, oneAgain, two := client(""), client(""), client("127.0.0.2")
	var open []*connect.ServerStreamForClient[lockv1.WatchResponse]
	defer func() {
		for _, s := range open {
			s.Close()
		}
	}()
	for _, c := range []lockv1connect.LockServiceClient{one, oneAgain} {
		s, err := watch(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	_, err := watch(ctx, oneAgain)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "2 streams already open for this client address (127.0.0.1) (the server's --max-watch-streams-per-client)") {
		t.Fatalf("a third watch of one client on another connection: %v, want resource_exhausted per client", err)
	}
	s, err := watch(ctx, two)
	if err != nil {
		t.Fatalf("a watch of another client: %v", err)
	}
	open = append(open, s)
	_, err = watch(ctx, two)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "3 streams already open on this server (the server's --max-watch-streams)") {
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
	if s, err = watch(ctx, one); err != nil {
		t.Fatalf("a watch after one closed: %v", err)
	}
	open = append(open, s)
	for _, s := range open {
		s.Close()
	}
	open = nil
	eventually(t, func() bool { return lim.Streams() == 0 })
}

func acquire(ctx context.Context, c lockv1connect.LockServiceClient, key string, ttl time.Duration) (*lockv1.AcquireResponse, error) {
	return c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl)})
}

// shortTTL is a lease the tests let run out. It must outlast the calls
// made while the test still counts on it being held (on a loaded machine
// 200 ms did not: the lease ended before the Extend that was to keep it).
const shortTTL = time.Second

func mustAcquire(ctx context.Context, t *testing.T, c lockv1connect.LockServiceClient, key string, ttl time.Duration) *lockv1.Lease {
	t.Helper()
	r, err := acquire(ctx, c, key, ttl)
	if err != nil || !r.GetAcquired() {
		t.Fatalf("acquire %s: %v %v", key, r, err)
	}
	return r.GetLease()
}

func wantExhausted(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s: %v, want resource_exhausted saying %q", what, err, msg)
	}
}

// Locks count per client and in total, and leave the count when released,
// taken over, or past their TTL.
func TestLockLimits(t *testing.T) {
	lim := limits.New(limits.Config{MaxLocks: 5, MaxLocksPerClient: 3})
	client := start(t, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, aAgain, b := client(""), client(""), client("127.0.0.2")
	mustAcquire(ctx, t, a, "a/1", time.Minute)
	mustAcquire(ctx, t, aAgain, "a/2", time.Minute)
	third := mustAcquire(ctx, t, a, "a/3", time.Minute)
	_, err := acquire(ctx, aAgain, "a/4", time.Minute)
	wantExhausted(t, "a fourth lock of one client", err, "acquire: 3 locks held or being acquired by this client address (127.0.0.1) (the server's --max-locks-per-client)")
	// Contention is not counted: a busy key answers acquired=false.
	if r, err := acquire(ctx, b, "a/1", time.Minute); err != nil || r.GetAcquired() {
		t.Fatalf("a held key: %v %v", r, err)
	}
	if _, err := a.Release(ctx, &lockv1.ReleaseRequest{Key: "a/3", OwnerToken: third.GetOwnerToken()}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(ctx, t, a, "a/3", shortTTL)
	if lim.Locks() != 3 {
		t.Fatalf("%d locks counted, want 3", lim.Locks())
	}
	mustAcquire(ctx, t, b, "b/1", time.Minute)
	mustAcquire(ctx, t, b, "b/2", time.Minute)
	_, err = acquire(ctx, b, "b/3", time.Minute)
	wantExhausted(t, "a sixth lock on the server", err, "acquire: 5 locks held or being acquired through this server (the server's --max-locks)")
	// a/3's TTL runs out: its place is free again.
	eventually(t, func() bool { return lim.Locks() == 4 })
	b3 := mustAcquire(ctx, t, b, "b/3", time.Minute)
	if _, err := b.Release(ctx, &lockv1.ReleaseRequest{Key: "b/3", OwnerToken: b3.GetOwnerToken()}); err != nil {
		t.Fatal(err)
	}
	// Extended leases stay counted past their first TTL.
	short := mustAcquire(ctx, t, a, "a/3", shortTTL)
	_, err = acquire(ctx, a, "a/5", time.Minute)
	wantExhausted(t, "over the limit again", err, "(the server's --max-locks)")
	if r, err := a.Extend(ctx, &lockv1.ExtendRequest{Key: "a/3", OwnerToken: short.GetOwnerToken(), Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetExtended() {
		t.Fatalf("extend: %v %v", r, err)
	}
	time.Sleep(shortTTL + 200*time.Millisecond) // past the first TTL: nothing to poll for, the count must not change
	if n := lim.Locks(); n != 5 {
		t.Fatalf("%d locks counted after the extended lease's first TTL, want 5", n)
	}
}

// Leases renewed by ExtendBatch (the SDKs' watchdogs) stay counted past
// their first TTL, as Extend's do; an item that did not renew leaves its
// lease to run out.
func TestExtendBatchKeepsLeasesCounted(t *testing.T) {
	lim := limits.New(limits.Config{MaxLocks: 3})
	client := start(t, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := client("")
	one := mustAcquire(ctx, t, a, "x/1", shortTTL)
	two := mustAcquire(ctx, t, a, "x/2", shortTTL)
	mustAcquire(ctx, t, a, "x/3", shortTTL)
	r, err := a.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{
		{Key: "x/1", OwnerToken: one.GetOwnerToken(), Ttl: durationpb.New(time.Minute)},
		{Key: "x/2", OwnerToken: two.GetOwnerToken(), Ttl: durationpb.New(time.Minute)},
		{Key: "x/3", OwnerToken: "not-the-owner", Ttl: durationpb.New(time.Minute)},
	}})
	if err != nil || len(r.GetResults()) != 3 || !r.GetResults()[0].GetExtended() || !r.GetResults()[1].GetExtended() || r.GetResults()[2].GetExtended() {
		t.Fatalf("ExtendBatch: %v %v", r, err)
	}
	// x/3 was not renewed: its place frees when its TTL runs out, while the
	// two renewed leases stay counted. (Were they not, the count would pass
	// 2 on its way to 0 when x/1's first TTL ran out.)
	eventually(t, func() bool { return lim.Locks() <= 2 })
	time.Sleep(shortTTL + 200*time.Millisecond) // past every first TTL: nothing to poll for, the count must not change
	if n := lim.Locks(); n != 2 {
		t.Fatalf("%d locks counted after the renewed leases' first TTL, want 2", n)
	}
}

// Waiters count per client, over all its connections: the bound an HTTP/2
// client cannot get around by opening more.
func TestWaitersPerClient(t *testing.T) {
	client := start(t, limits.New(limits.Config{MaxWaitersPerClient: 2}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder := client("127.0.0.3")
	mustAcquire(ctx, t, holder, "busy", time.Minute)
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, 2)
	for range 2 {
		c := client("")
		go func() {
			_, err := c.Acquire(waitCtx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
			errs <- err
		}()
	}
	eventually(t, func() bool {
		ins, err := holder.Inspect(ctx, &lockv1.InspectRequest{Key: "busy"})
		return err == nil && ins.GetState().GetWaiters() == 2
	})
	_, err := client("").Acquire(ctx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
	wantExhausted(t, "a third waiter of one client on a third connection", err,
		"wait: 2 waiting Acquires already in progress for this client address (127.0.0.1) (the server's --max-waiters-per-client)")
	// Try-once Acquires are not waiters.
	if r, err := acquire(ctx, client(""), "busy", time.Minute); err != nil || r.GetAcquired() {
		t.Fatalf("try once: %v %v", r, err)
	}
	// The server ends the wait (50ms); the client's own deadline is the
	// test's, not a tight one that a loaded machine can beat it to.
	r, err := client("127.0.0.2").Acquire(ctx, &lockv1.AcquireRequest{Key: "busy", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(50 * time.Millisecond)})
	if err != nil || r.GetAcquired() {
		t.Fatalf("another client's waiter: %v %v, want it to wait and time out", r, err)
	}
	stop()
	for range 2 {
		if err := <-errs; connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("a canceled waiter: %v", err)
		}
	}
}

// A token's quotas replace the per-client defaults; tokens count apart
// even from one address.
func TestTokenQuotas(t *testing.T) {
	sum := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	body := "- name: small\n  sha256: " + sum("small-token-0123456789") + "\n  prefixes: [\"\"]\n  max_locks: 1\n  max_watch_streams: 1\n" +
		"- name: default\n  sha256: " + sum("default-token-0123456789") + "\n  prefixes: [\"\"]\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := startWith(t, []connect.Interceptor{auth.NewInterceptor(store, nil), limits.New(limits.Config{MaxLocksPerClient: 2, MaxStreamsPerClient: 2})})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	small, dflt := client("", "small-token-0123456789"), client("", "default-token-0123456789")
	mustAcquire(ctx, t, small, "s/1", time.Minute)
	_, err = acquire(ctx, small, "s/2", time.Minute)
	wantExhausted(t, "the small token's second lock", err, "acquire: 1 locks held or being acquired by this token (its max_locks in the tokens file)")
	mustAcquire(ctx, t, dflt, "d/1", time.Minute)
	mustAcquire(ctx, t, dflt, "d/2", time.Minute)
	_, err = acquire(ctx, dflt, "d/3", time.Minute)
	wantExhausted(t, "the default token's third lock", err, "by this token (the server's --max-locks-per-client)")
	s, err := watch(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = watch(ctx, small)
	wantExhausted(t, "the small token's second watch", err, "watch: 1 streams already open for this token (its max_watch_streams in the tokens file)")
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
	if err := limits.Check(limits.Config{MaxStreams: -1}, time.Minute); err == nil || !strings.Contains(err.Error(), "--max-watch-streams: -1 is negative") {
		t.Fatalf("negative stream limit: %v", err)
	}
}

// The limits that live elsewhere, through the same real handlers, with
// their exact codes.
func TestOtherLimits(t *testing.T) {
	client := start(t, limits.New(limits.Config{}), engine.Config{MaxWait: time.Minute, MaxTTL: time.Hour, MaxWaiters: 1})
	c := client("")
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
	_, err = client("").Acquire(ctx, &lockv1.AcquireRequest{Key: "b", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a waiter over the server's bound: %v, want resource_exhausted", err)
	}
	stopWaiting()
	if err := <-waited; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("the canceled waiter: %v", err)
	}
}

// Each key of a multi-key lease counts as a lock; a set that would pass the
// bound is refused whole, and its release frees every key's place.
func TestSetsCountEveryKey(t *testing.T) {
	lim := limits.New(limits.Config{MaxLocksPerClient: 3})
	client := start(t, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := client("")
	set := func(keys ...string) *lockv1.AcquireRequest {
		r := &lockv1.AcquireRequest{Ttl: durationpb.New(time.Minute)}
		for _, k := range keys {
			r.Claims = append(r.Claims, &lockv1.Claim{Key: k})
		}
		return r
	}
	r, err := a.Acquire(ctx, set("s/1", "s/2"))
	if err != nil || !r.GetAcquired() {
		t.Fatal(r, err)
	}
	if lim.Locks() != 2 {
		t.Fatalf("%d locks counted for a set of 2, want 2", lim.Locks())
	}
	_, err = a.Acquire(ctx, set("s/3", "s/4"))
	wantExhausted(t, "a set that passes the bound", err, "acquire: 2 locks held or being acquired by this client address (127.0.0.1)")
	if lim.Locks() != 2 {
		t.Fatalf("%d locks counted after a refused set, want 2", lim.Locks())
	}
	if _, err := a.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{"s/1", "s/2"}, OwnerToken: r.GetLease().GetOwnerToken()}); err != nil {
		t.Fatal(err)
	}
	if lim.Locks() != 0 {
		t.Fatalf("%d locks counted after the set's release, want 0", lim.Locks())
	}
	if r, err := a.Acquire(ctx, set("s/3", "s/4", "s/5")); err != nil || !r.GetAcquired() {
		t.Fatalf("a set of 3 within the bound: %v %v", r, err)
	}
}

// Each lease of a semaphore counts as a lock, and leaves the count with its
// own release: several leases on one key are not one lock.
func TestSemaphoreLeasesCountEach(t *testing.T) {
	lim := limits.New(limits.Config{MaxLocksPerClient: 3})
	client := start(t, lim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := client("")
	sem := func() *lockv1.AcquireRequest {
		return &lockv1.AcquireRequest{Key: "sem", Ttl: durationpb.New(time.Minute), Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 5}
	}
	var leases []*lockv1.Lease
	for range 3 {
		r, err := a.Acquire(ctx, sem())
		if err != nil || !r.GetAcquired() {
			t.Fatal(r, err)
		}
		leases = append(leases, r.GetLease())
	}
	if n := lim.Locks(); n != 3 {
		t.Fatalf("%d locks counted for 3 leases of one semaphore, want 3", n)
	}
	_, err := a.Acquire(ctx, sem())
	wantExhausted(t, "a fourth lease of the semaphore", err, "acquire: 3 locks held or being acquired by this client address (127.0.0.1)")
	if r, err := a.Extend(ctx, &lockv1.ExtendRequest{Key: "sem", OwnerToken: leases[1].GetOwnerToken(), Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetExtended() {
		t.Fatalf("extend: %v %v", r, err)
	}
	if _, err := a.Release(ctx, &lockv1.ReleaseRequest{Key: "sem", OwnerToken: leases[0].GetOwnerToken()}); err != nil {
		t.Fatal(err)
	}
	if n := lim.Locks(); n != 2 {
		t.Fatalf("%d locks counted after one lease's release, want 2", n)
	}
}
