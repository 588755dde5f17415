package holdfast

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// The rows of docs/sdk-behaviour.md that are the Go SDK's own business
// (the conformance suite checks the shared ones in every SDK).

func TestBackoffIsEqualJitterCappedAtOneSecond(t *testing.T) {
	b := DefaultBackoff.normalized()
	for n, ms := range []int{50, 100, 200, 400, 800, 1000, 1000, 1000} {
		d := time.Duration(ms) * time.Millisecond
		lo, hi := d, time.Duration(0)
		for range 200 {
			got := b.delay(n)
			lo, hi = min(lo, got), max(hi, got)
		}
		if lo < d/2 || hi > d {
			t.Fatalf("retry %d: delays in [%s, %s], want within [%s, %s]", n, lo, hi, d/2, d)
		}
		if hi-lo < d/4 {
			t.Fatalf("retry %d: delays in [%s, %s]: no jitter", n, lo, hi)
		}
	}
}

// A wrong port with context.Background() used to hang forever.
func TestUnreachableServerFailsWithUnavailableAfterTheRetryBudget(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := Dial(addr) // a bare host:port, and every default
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	calls := map[string]func() error{
		"Lock":       func() error { _, err := c.Lock("k").Lock(ctx); return err },
		"TryLock":    func() error { _, err := c.Lock("k").TryLock(ctx); return err },
		"Inspect":    func() error { _, _, err := c.Inspect(ctx, "k"); return err },
		"ServerInfo": func() error { _, err := c.ServerInfo(ctx); return err },
	}
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			start := time.Now()
			err := call()
			took := time.Since(start)
			if !errors.Is(err, ErrUnavailable) || ErrorCode(err) != CodeUnavailable {
				t.Errorf("%s: %v (code %q), want ErrUnavailable", name, err, ErrorCode(err))
			}
			if took < DefaultRetryBudget || took > DefaultRetryBudget+slack {
				t.Errorf("%s gave up after %s, want the retry budget %s", name, took, DefaultRetryBudget)
			}
			if !strings.Contains(err.Error(), "retry budget") {
				t.Errorf("%s: %q does not say it ran out of retry budget", name, err)
			}
		})
	}
	wg.Wait()
}

func TestTTLAndWaitAreCheckedBeforeSending(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	for _, tc := range []struct {
		l    Lock
		want string
	}{
		{c.Lock("k").TTL(3), "ttl: 3ns is below the SDK minimum 100ms (Go durations are time.Duration"},
		{c.Lock("k").TTL(99 * time.Millisecond), "ttl: 99ms is below the SDK minimum 100ms"},
		{c.Lock("k").Wait(-time.Second), "wait: -1s is negative"},
	} {
		_, err := tc.l.Lock(t.Context())
		if !errors.Is(err, ErrInvalidArgument) || ErrorCode(err) != CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want ErrInvalidArgument saying %q", err, tc.want)
		}
	}
	if _, err := Dial(url, WithExpiryMargin(ExpiryMargin{DriftFactor: 0.6})); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("drift factor 0.6: %v", err)
	}
	if _, err := dialPeer(t, url, WithExpiryMargin(ExpiryMargin{Fixed: 60 * time.Millisecond})).Lock("k").TTL(100 * time.Millisecond).TryLock(t.Context()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a margin of more than half the TTL: %v", err)
	}
	if n := len(peer.snapshot().acquireRecv); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// Wait(0) is one attempt; TryLock ignores a Wait; without a Wait, Lock
// waits on the server.
func TestWaitZeroTryAndNoWait(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	held := &lockv1.LockState{Key: "k", Holder: "other:1", FencingToken: 7}
	peer.set(func(p *fakePeer) { p.acquireMode, p.current = modeReject, held })
	for name, l := range map[string]func() (*Guard, error){
		"Wait(0)":          func() (*Guard, error) { return c.Lock("k").Wait(0).Lock(t.Context()) },
		"TryLock+Wait(1m)": func() (*Guard, error) { return c.Lock("k").Wait(time.Minute).TryLock(t.Context()) },
	} {
		before := len(peer.snapshot().acquireRecv)
		start := time.Now()
		_, err := l()
		var na *NotAcquiredError
		if !errors.As(err, &na) || na.Current == nil || na.Current.FencingToken != 7 || ErrorCode(err) != CodeNotAcquired {
			t.Fatalf("%s: %v, want *NotAcquiredError with the holder", name, err)
		}
		if n := len(peer.snapshot().acquireRecv) - before; n != 1 {
			t.Fatalf("%s: %d attempts, want 1", name, n)
		}
		if d := time.Since(start); d > slack {
			t.Fatalf("%s took %s", name, d)
		}
	}
	// No wait set: the Acquire asks the server to wait, until ctx ends.
	peer.set(func(p *fakePeer) { p.acquireMode = modeHang })
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Lock("k").Lock(ctx)
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock without Wait, ctx deadline: %v", err)
	}
}

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&NotAcquiredError{Key: "k", cause: context.Canceled}, CodeNotAcquired},
		{&LeaseLostError{Key: "k", Reason: LossExpired, LastErr: &rpcError{code: CodeUnavailable, kind: ErrUnavailable}}, CodeLeaseLost},
		{ErrReleased, CodeLockReleased},
		{ErrClosed, CodeClientClosed},
		{&StaleTokenError{Token: 1, Watermark: 2}, CodeStaleToken},
		{hlc.ErrTooFarAhead, CodeClockOffset},
		{invalidArgument("ttl: x"), CodeInvalidArgument},
		{&rpcError{code: "permission_denied", kind: ErrPermissionDenied}, "permission_denied"},
		{outOfBudget(&rpcError{code: CodeUnavailable, kind: ErrUnavailable}, time.Second), CodeUnavailable},
		{context.Canceled, CodeCanceled},
		{errors.New("not ours"), CodeUnknown},
	} {
		if got := ErrorCode(tc.err); got != tc.want {
			t.Errorf("ErrorCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	for r, want := range map[LossReason]string{LossRejected: "rejected", LossExpired: "expired", LossClientClosed: "client_closed", LossReleaseUnconfirmed: "release_unconfirmed"} {
		if r.String() != want {
			t.Errorf("%d: %q, want %q", r, r.String(), want)
		}
	}
}

// recorder is a slog handler that keeps what it is given.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) levels() map[string]slog.Level {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]slog.Level{}
	for _, rec := range r.records {
		out[rec.Message] = rec.Level
	}
	return out
}

func TestLeaseEventsAndLogs(t *testing.T) {
	peer, url := newFakePeer(t)
	var mu sync.Mutex
	var events []LeaseEvent
	panicked := false
	logs := &recorder{}
	c := dialPeer(t, url, WithLogger(slog.New(logs)), WithLeaseEvents(func(ev LeaseEvent) {
		mu.Lock()
		events = append(events, ev)
		first := !panicked
		panicked = true
		mu.Unlock()
		if first {
			panic("a listener's bug") // must not stop the watchdog
		}
	}))
	seen := func(typ LeaseEventType) (LeaseEvent, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range events {
			if ev.Type == typ {
				return ev, true
			}
		}
		return LeaseEvent{}, false
	}
	await := func(typ LeaseEventType) LeaseEvent {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if ev, ok := seen(typ); ok {
				return ev
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s event", typ)
			}
			time.Sleep(5 * time.Millisecond) // poll with a deadline
		}
	}
	const ttl = 300 * time.Millisecond
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for g.Renewals() < 2 {
		if err := g.Err(); err != nil {
			t.Fatalf("the listener's panic stopped the watchdog: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // poll: renewals come every TTL/3
	}
	ev := await(LeaseRenewed)
	if ev.Key != "k" || ev.FencingToken != 1 || ev.TTL != ttl || ev.Renewals < 1 {
		t.Fatalf("renewed event %+v", ev)
	}
	if r := g.Remaining(); r <= 0 || r > ttl-DefaultExpiryMargin.For(ttl) {
		t.Fatalf("Remaining %s, want in (0, TTL - margin]", r)
	}
	peer.set(func(p *fakePeer) { p.extendMode = modeUnavailable })
	if ev := await(LeaseRenewalFailed); !errors.Is(ev.Err, ErrUnavailable) || ev.Remaining <= 0 {
		t.Fatalf("renewal_failed event %+v", ev)
	}
	waitDone(t, g, ttl+slack)
	ev = await(LeaseLost)
	if ev.Reason != LossExpired || !errors.Is(ev.Err, ErrLeaseLost) || !errors.Is(ev.Err, ErrUnavailable) {
		t.Fatalf("lost event %+v", ev)
	}
	if g.Remaining() != 0 {
		t.Fatalf("Remaining after loss: %s", g.Remaining())
	}
	peer.set(func(p *fakePeer) { p.extendMode = modeOK })
	g2, err := c.Lock("k2").TTL(time.Minute).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ev := await(LeaseReleased); ev.Key != "k2" {
		t.Fatalf("released event %+v", ev)
	}
	want := map[string]slog.Level{
		"holdfast: lease renewed":                     slog.LevelDebug,
		"holdfast: lease renewal failed; retrying":    slog.LevelWarn,
		"holdfast: lease lost":                        slog.LevelWarn,
		"holdfast: lease released":                    slog.LevelDebug,
		"holdfast: the lease event listener panicked": slog.LevelError,
	}
	got := logs.levels()
	for msg, level := range want {
		if l, ok := got[msg]; !ok || l != level {
			t.Errorf("log %q at %v (logged: %v), want %v", msg, l, ok, level)
		}
	}
}

func TestTryWithLock(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	called := false
	ran, err := TryWithLock(t.Context(), c.Lock("k").TTL(time.Second), func(ctx context.Context) error {
		called = true
		g, ok := GuardFromContext(ctx)
		if !ok || g.Err() != nil {
			t.Error("fn runs without its guard")
		}
		return nil
	})
	if !ran || err != nil || !called || peer.snapshot().releases != 1 {
		t.Fatalf("free key: ran=%v err=%v called=%v releases=%d", ran, err, called, peer.snapshot().releases)
	}
	peer.set(func(p *fakePeer) { p.acquireMode = modeReject })
	ran, err = TryWithLock(t.Context(), c.Lock("k").Wait(time.Minute), func(context.Context) error {
		t.Error("fn called on a held key")
		return nil
	})
	if ran || err != nil {
		t.Fatalf("held key: ran=%v err=%v, want false, nil", ran, err)
	}
	peer.set(func(p *fakePeer) { p.acquireMode, p.errCode = modeError, connect.CodeInternal })
	if ran, err := TryWithLock(t.Context(), c.Lock("k"), func(context.Context) error { return nil }); ran || !errors.Is(err, ErrServer) {
		t.Fatalf("failed acquire: ran=%v err=%v", ran, err)
	}
}

func TestRunScheduled(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	var gotToken uint64
	var deadline time.Time
	start := time.Now()
	ran, err := c.RunScheduled(t.Context(), ScheduledJob{
		Key:        "jobs/report",
		MaxRuntime: time.Second,
		Run: func(ctx context.Context, fencingToken uint64) error {
			gotToken = fencingToken
			deadline, _ = ctx.Deadline()
			g, _ := GuardFromContext(ctx)
			if g.TTL() != 1500*time.Millisecond {
				t.Errorf("lease TTL %s, want 1.5 x the max runtime", g.TTL())
			}
			return nil
		},
	})
	if !ran || err != nil || gotToken != 1 {
		t.Fatalf("ran=%v err=%v token=%d", ran, err, gotToken)
	}
	if d := deadline.Sub(start); d < time.Second || d > time.Second+slack {
		t.Fatalf("the job's context ends %s after the start, want the max runtime 1s", d)
	}
	if _, err := c.RunScheduled(t.Context(), ScheduledJob{Key: "j", MaxRuntime: time.Minute, TTL: time.Minute, Run: func(context.Context, uint64) error { return nil }}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("TTL not longer than the max runtime: %v", err)
	}
	peer.set(func(p *fakePeer) { p.acquireMode = modeReject })
	ran, err = c.RunScheduled(t.Context(), ScheduledJob{Key: "jobs/report", MaxRuntime: time.Second, Run: func(context.Context, uint64) error {
		t.Error("the job ran on a held key")
		return nil
	}})
	if ran || err != nil {
		t.Fatalf("held: ran=%v err=%v", ran, err)
	}
	// A lease lost during the run is the run's error.
	peer.set(func(p *fakePeer) { p.acquireMode, p.extendMode = modeOK, modeReject })
	_, err = c.RunScheduled(t.Context(), ScheduledJob{Key: "jobs/report", MaxRuntime: time.Second, TTL: 2 * time.Second, Run: func(ctx context.Context, _ uint64) error {
		<-ctx.Done()
		return nil
	}})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("lease lost during the run: %v", err)
	}
}

// WithTLSConfig: a server whose certificate a private CA signed, and that
// requires a client certificate.
func TestTLSWithCustomCAAndClientCertificate(t *testing.T) {
	p := &fakePeer{clock: hlc.NewClock(nil, -1), unhang: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(lockv1connect.NewLockServiceHandler(p))
	pki := harness.WriteMutualTLS(t, t.TempDir())
	serverPair, err := tls.LoadX509KeyPair(pki.ServerCertFile, pki.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.LoadX509KeyPair(pki.ClientCertFile, pki.ClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	cas := x509.NewCertPool()
	cas.AppendCertsFromPEM(caPEM)
	ts := httptest.NewUnstartedServer(mux)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: cas}
	ts.StartTLS()
	t.Cleanup(func() {
		close(p.unhang)
		ts.Close()
	})
	roots := cas // the CA signed both the server's certificate and the client's
	for _, proto := range []Protocol{ProtocolConnect, ProtocolGRPC} {
		c := dialPeer(t, ts.URL, WithProtocol(proto), WithTLSConfig(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}}))
		if _, err := c.ServerInfo(t.Context()); err != nil {
			t.Fatalf("%s over TLS with the CA and a client certificate: %v", proto, err)
		}
	}
	noCert := dialPeer(t, ts.URL, WithRetryBudget(200*time.Millisecond), WithTLSConfig(&tls.Config{RootCAs: roots}))
	if _, err := noCert.ServerInfo(t.Context()); err == nil {
		t.Fatal("a server requiring client certificates answered a client without one")
	}
	noCA := dialPeer(t, ts.URL, WithRetryBudget(200*time.Millisecond), WithTLSConfig(&tls.Config{Certificates: []tls.Certificate{clientCert}}))
	if _, err := noCA.ServerInfo(t.Context()); err == nil {
		t.Fatal("a server certificate from an unknown CA was accepted")
	}
}

// A server refuses a wait above its --max-wait: an unbounded Lock learns
// the server's max_wait and keeps queuing in waits it accepts.
func TestUnboundedWaitFollowsTheServersMaxWait(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", "--max-wait", "1s")
	holder, waiter := dialServer(t, s), dialServer(t, s)
	g, err := holder.Lock("max-wait").TTL(time.Minute).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var g2 *Guard
	go func() {
		var err error
		g2, err = waiter.Lock("max-wait").TTL(time.Minute).Lock(t.Context())
		got <- err
	}()
	// Past two of the server's 1s waits, still queued.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		select {
		case err := <-got:
			t.Fatalf("Lock without a wait answered while the key was held: %v", err)
		case <-time.After(50 * time.Millisecond): // the wait itself is the subject
		}
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock after the release")
	}
	if err := g2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Guards taken while the client closes: Close waits for every lease event
// it owes and nothing is left running (goleak in TestMain), whatever the
// interleaving.
func TestCloseWhileLocking(t *testing.T) {
	_, url := newFakePeer(t)
	for range 20 {
		c, err := Dial(url, WithLogger(slog.New(slog.DiscardHandler)), WithLeaseEvents(func(LeaseEvent) {}))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				g, err := c.Lock(fmt.Sprint("k", i)).TTL(time.Minute).TryLock(context.Background())
				if err == nil {
					_ = g.Unlock(context.Background())
				} else if !errors.Is(err, ErrClosed) {
					t.Errorf("TryLock as the client closes: %v", err)
				}
			})
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
