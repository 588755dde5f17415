package holdfast

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

func TestDialRejectsBadTargets(t *testing.T) {
	for _, target := range []string{"", "ftp://x", "http://", "://bad", "http://u@h:1", "h:1?x=1"} {
		if _, err := Dial(target); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("%q", target)) {
			t.Errorf("Dial(%q): %v, want ErrInvalidArgument naming the address", target, err)
		}
	}
	// A bare host:port is http://host:port.
	for _, target := range []string{"127.0.0.1:7410", "localhost:7410"} {
		c, err := Dial(target)
		if err != nil {
			t.Fatalf("Dial(%q): %v", target, err)
		}
		if want := "http://" + target; c.target != want {
			t.Errorf("Dial(%q) talks to %q, want %q", target, c.target, want)
		}
		_ = c.Close()
	}
	if _, err := Dial("http://127.0.0.1:1", WithProtocol(Protocol(9))); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad protocol: %v", err)
	}
}

func TestEveryProtocolReachesThePeer(t *testing.T) {
	for _, p := range []Protocol{ProtocolConnect, ProtocolGRPC, ProtocolGRPCWeb} {
		t.Run(p.String(), func(t *testing.T) {
			peer, url := newFakePeerServer(t, true)
			c := dialPeer(t, url, WithProtocol(p))
			info, err := c.ServerInfo(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.Backend.Name != "fake-peer" || info.MaxClockOffset != hlc.DefaultMaxOffset {
				t.Fatalf("info %+v", info)
			}
			g, err := c.Lock("k").TTL(time.Second).TryLock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := peer.snapshot().releases; n != 1 {
				t.Fatalf("%d releases", n)
			}
		})
	}
}

func TestHeadersBearerTokenAndHolder(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url, WithBearerToken("s3cret"), WithHeader("X-Team", "ops"), WithHolder("worker-3"))
	l := c.Lock("k")
	if l.holder != "worker-3" {
		t.Fatalf("holder %q", l.holder)
	}
	g, err := l.TTL(time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if g.Holder() != "worker-3" {
		t.Fatalf("guard holder %q", g.Holder())
	}
	_ = g.Unlock(t.Context())
	peer.mu.Lock()
	defer peer.mu.Unlock()
	for _, h := range peer.headers {
		if h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Team") != "ops" {
			t.Fatalf("headers %v", h)
		}
	}
}

func TestDefaultHolderIsHostAndPid(t *testing.T) {
	_, url := newFakePeer(t)
	c := dialPeer(t, url)
	if h := c.Lock("k").holder; h != defaultHolder() || h == "" {
		t.Fatalf("holder %q", h)
	}
}

func TestClientStampsIncreaseAndServerStampsAreMerged(t *testing.T) {
	peer, url := newFakePeer(t)
	// The peer's clock runs 200ms ahead (within the max offset).
	peer.clock = hlc.NewClock(func() int64 { return time.Now().Add(200 * time.Millisecond).UnixNano() }, -1)
	c := dialPeer(t, url)
	var last hlc.Timestamp
	for range 3 {
		g, err := c.Lock("k").TTL(time.Second).TryLock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !c.Now().After(g.Stamp()) {
			t.Fatalf("client clock %s not after the lease stamp %s", c.Now(), g.Stamp())
		}
		if !g.Stamp().After(last) {
			t.Fatalf("stamp %s not after %s", g.Stamp(), last)
		}
		last = g.Stamp()
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	peer.mu.Lock()
	stamps := append([]hlc.Timestamp(nil), peer.clientStamps...)
	peer.mu.Unlock()
	for i := 1; i < len(stamps); i++ {
		if !stamps[i].After(stamps[i-1]) {
			t.Fatalf("client stamp %d (%s) not after %d (%s)", i, stamps[i], i-1, stamps[i-1])
		}
	}
	// Every request after the first carries a stamp past the server's
	// previous answer, which was 200ms ahead of our physical clock.
	if stamps[1].WallTime < stamps[0].WallTime+int64(100*time.Millisecond) {
		t.Fatalf("server stamp not merged: %s then %s", stamps[0], stamps[1])
	}
}

func TestServerStampTooFarAheadIsNotMerged(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.clock = hlc.NewClock(func() int64 { return time.Now().Add(time.Hour).UnixNano() }, -1)
	c := dialPeer(t, url)
	if _, err := c.ServerInfo(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c.Now().WallTime > time.Now().Add(time.Minute).UnixNano() {
		t.Fatal("a stamp an hour ahead moved the client's clock")
	}
}

func TestSharedClock(t *testing.T) {
	_, url := newFakePeer(t)
	clk := hlc.NewClock(nil, 0)
	c := dialPeer(t, url, WithClock(clk))
	if c.Clock() != clk {
		t.Fatal("WithClock ignored")
	}
}

func TestTryLockContentionCarriesTheHolder(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) {
		p.acquireMode = modeReject
		p.current = &lockv1.LockState{Key: "k", FencingToken: 7, Holder: "other:1", Stamp: &lockv1.HlcTimestamp{WallTimeNs: 5}}
	})
	c := dialPeer(t, url)
	_, err := c.Lock("k").TryLock(t.Context())
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("%v, want ErrNotAcquired", err)
	}
	var na *NotAcquiredError
	if !errors.As(err, &na) || na.Current == nil || na.Current.Holder != "other:1" || na.Current.FencingToken != 7 {
		t.Fatalf("%#v", err)
	}
}

func TestBuilderRejectsBadInputBeforeSending(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	for _, l := range []Lock{c.Lock("k").TTL(0), c.Lock("k").TTL(-time.Second), c.Lock("k").Wait(-1), {}} {
		if _, err := l.TryLock(t.Context()); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v", l, err)
		}
		if _, err := l.Lock(t.Context()); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v", l, err)
		}
	}
	if n := len(peer.snapshot().acquireRecv); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	// The builder is a value: setters do not change the template.
	base := c.Lock("k").TTL(time.Second)
	_ = base.TTL(time.Hour).Wait(time.Minute).Holder("x")
	if base.ttl != time.Second || base.wait != 0 || base.holder != c.opts.holder {
		t.Fatalf("template changed: %+v", base)
	}
}

func TestCloseReleasesHeldGuardsAndRefusesCalls(t *testing.T) {
	peer, url := newFakePeer(t)
	c, err := Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Lock("k").TTL(5 * time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if peer.snapshot().releases != 1 {
		t.Fatal("Close did not release the held lease")
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("guard still open after Close")
	}
	if _, err := c.Lock("k").TryLock(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := c.ServerInfo(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestWithLockReportsALossDuringFn(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	peer.set(func(p *fakePeer) { p.extendMode = modeReject })
	var cause error
	err := WithLock(t.Context(), c.Lock("k").TTL(300*time.Millisecond), func(ctx context.Context) error {
		<-ctx.Done() // the work notices the loss
		cause = context.Cause(ctx)
		return nil
	})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("WithLock: %v, want ErrLeaseLost even though fn returned nil", err)
	}
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("fn's context cause %v", cause)
	}
}

func TestWithLockRunsFnAndReleases(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	boom := errors.New("boom")
	var token uint64
	err := WithLock(t.Context(), c.Lock("k").TTL(time.Second), func(ctx context.Context) error {
		if ctx.Err() != nil {
			t.Error("fn's context already done")
		}
		token = 1
		return boom
	})
	if !errors.Is(err, boom) || errors.Is(err, ErrLeaseLost) {
		t.Fatalf("%v: want fn's error alone", err)
	}
	if token != 1 || peer.snapshot().releases != 1 {
		t.Fatal("fn not run or lock not released")
	}
	// Cancelling the caller's context cancels fn's and still releases.
	ctx, cancel := context.WithCancel(t.Context())
	err = WithLock(ctx, c.Lock("k").TTL(time.Second), func(fctx context.Context) error {
		cancel()
		<-fctx.Done()
		return context.Cause(fctx)
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if peer.snapshot().releases != 2 {
		t.Fatal("not released after the caller's context ended")
	}
}

func TestGuardIsSafeForConcurrentUse(t *testing.T) {
	_, url := newFakePeer(t)
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(300 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				_, _ = g.FencingToken()
				_ = g.Extend(t.Context(), 0)
				_ = g.Err()
			}
		})
	}
	wg.Go(func() { _ = g.Unlock(t.Context()) })
	wg.Wait()
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestFenceAndValidateWrite(t *testing.T) {
	for _, c := range []struct{ token, watermark, want uint64 }{{5, 5, 5}, {6, 5, 6}, {1, 0, 1}} {
		if w, err := ValidateWrite(c.token, c.watermark); err != nil || w != c.want {
			t.Fatalf("ValidateWrite(%d, %d) = %d, %v; want the new watermark %d", c.token, c.watermark, w, err, c.want)
		}
	}
	w, err := ValidateWrite(4, 5)
	var st *StaleTokenError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &st) || st.Token != 4 || st.Watermark != 5 || w != 5 {
		t.Fatalf("%d, %v", w, err)
	}
	var f Fence
	for _, tok := range []uint64{1, 3, 3} {
		if err := f.Admit(tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Admit(2); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("%v", err)
	}
	if f.Watermark() != 3 {
		t.Fatal(f.Watermark())
	}
}

func TestCloseEndsAWaitInFlight(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.acquireMode = modeHang }) // a long server-side wait
	c, err := Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock("k").Wait(time.Minute).Lock(context.Background())
		got <- err
	}()
	for len(peer.snapshot().acquireRecv) == 0 {
		time.Sleep(2 * time.Millisecond) // poll until the wait is on the server
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Lock after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
}
