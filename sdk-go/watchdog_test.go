package holdfast

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// The watchdog's failure paths, against a scripted peer (fakepeer_test.go).
// Timing bounds: a lower bound is exact (poisoning before the local expiry is
// a bug however the machine is loaded); upper bounds carry slack for a
// loaded 2-core machine under -race.

const slack = 500 * time.Millisecond

func dialPeer(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(url, append([]Option{WithBackoff(Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitDone waits for the guard to end and returns when it noticed.
func waitDone(t *testing.T, g *Guard, within time.Duration) time.Time {
	t.Helper()
	select {
	case <-g.Done():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("guard still held after %s", within)
	}
	return time.Time{}
}

func lossOf(t *testing.T, g *Guard) *LeaseLostError {
	t.Helper()
	cause := context.Cause(g.Context())
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("cause %v: want ErrLeaseLost", cause)
	}
	var lost *LeaseLostError
	if !errors.As(cause, &lost) {
		t.Fatalf("cause %T: want *LeaseLostError", cause)
	}
	if _, err := g.FencingToken(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("FencingToken after loss: %v, want ErrLeaseLost", err)
	}
	if !errors.Is(g.Err(), ErrLeaseLost) {
		t.Fatalf("Err after loss: %v", g.Err())
	}
	return lost
}

func TestWatchdogRenewsAtAboutATTLThird(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	const ttl = 600 * time.Millisecond
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := g.FencingToken()
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if _, err := g.FencingToken(); err != nil {
			t.Fatalf("guard lost while renewals succeed: %v", err)
		}
		select {
		case <-g.Done():
			t.Fatalf("guard ended: %v", context.Cause(g.Context()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got, _ := g.FencingToken(); got != tok {
		t.Fatalf("fencing token changed %d -> %d", tok, got)
	}
	s := peer.snapshot()
	// Three TTLs at a renewal per TTL/3 is about 9; at least 6 even when
	// the machine is slow, and never a spin.
	if n := len(s.extendOK); n < 6 || n > 14 {
		t.Fatalf("%d renewals in 3 TTLs, want about 9", n)
	}
	prev := s.acquireRecv[0]
	for i, at := range s.extendOK {
		// The first renewal comes up to TTL/6 early (the client's phase,
		// TestWatchdogFirstRenewalFollowsTheClientsPhase); later ones
		// TTL/3 after the one before.
		least := ttl / 4
		if i == 0 {
			least = ttl / 8
		}
		if gap := at.Sub(prev); gap < least {
			t.Fatalf("renewal %d came %s after the previous one: sooner than TTL/3 (%s, the first one TTL/6)", i, gap, ttl/3)
		}
		prev = at
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(g.Context()), ErrReleased) {
		t.Fatalf("cause after Unlock: %v", context.Cause(g.Context()))
	}
	if _, err := g.FencingToken(); !errors.Is(err, ErrReleased) {
		t.Fatalf("FencingToken after Unlock: %v", err)
	}
	// The watchdog has stopped: no renewal after Unlock.
	n := len(peer.snapshot().extendRecv)
	time.Sleep(ttl / 2) // observing that nothing happens needs a span of time
	if m := len(peer.snapshot().extendRecv); m != n {
		t.Fatalf("%d renewals after Unlock", m-n)
	}
}

func TestRenewalAnsweredExtendedFalsePoisonsWithinTTL(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.extendMode = modeReject })
	c := dialPeer(t, url)
	// An Acquire answered after TTL/3 is confirmed by an Extend before
	// TryLock returns (Guard.confirm), which this peer rejects too: a TTL
	// long enough that a loaded machine's answer comes well before that.
	const ttl = 1500 * time.Millisecond
	start := time.Now()
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	at := waitDone(t, g, ttl+slack)
	// Lost at the first renewal, about TTL/3 in, well within the TTL.
	if d := at.Sub(start); d > ttl {
		t.Fatalf("poisoned %s after acquire; want within the TTL %s", d, ttl)
	}
	lost := lossOf(t, g)
	if lost.Reason != LossRejected || lost.Key != "k" || lost.FencingToken != 1 {
		t.Fatalf("loss %+v", lost)
	}
	releasesBefore := peer.snapshot().releases
	if err := g.Unlock(t.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock after loss: %v, want ErrLeaseLost", err)
	}
	if err := g.Extend(t.Context(), 0); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Extend after loss: %v, want ErrLeaseLost", err)
	}
	// The server already said the token does not hold: nothing to release.
	if r := peer.snapshot().releases; r != releasesBefore {
		t.Fatalf("Unlock sent %d releases after a rejected renewal", r-releasesBefore)
	}
}

// A renewal that never returns must not keep the guard alive: the guard is
// poisoned at the local expiry (TTL after the acquire was sent), not before,
// and not much after.
func TestHungRenewalPoisonsAtLocalMonotonicExpiry(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.extendMode = modeHang })
	c := dialPeer(t, url)
	// Not 600ms: an Acquire answered after TTL/3 is confirmed by an Extend
	// before TryLock returns (Guard.confirm), and that Extend hangs here
	// too, failing TryLock; a loaded machine took over 200ms to answer.
	const ttl = 1500 * time.Millisecond
	before := time.Now()
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	acquired := peer.snapshot().acquireRecv[0]
	at := waitDone(t, g, ttl+slack)
	if d, local := at.Sub(before), ttl-DefaultExpiryMargin.For(ttl); d < local {
		t.Fatalf("poisoned %s after the acquire was sent: before the local expiry (TTL %s - margin) %s", d, ttl, local)
	}
	if d := at.Sub(acquired); d > ttl+slack {
		t.Fatalf("poisoned %s after the acquire: later than TTL+%s", d, slack)
	}
	lost := lossOf(t, g)
	if lost.Reason != LossExpired {
		t.Fatalf("reason %v, want LossExpired", lost.Reason)
	}
	if !errors.Is(lost, context.DeadlineExceeded) {
		t.Fatalf("last renewal error %v: want the per-attempt deadline", lost.LastErr)
	}
	// Each attempt is bounded (TTL/3), so a hung connection did not stop
	// the watchdog from trying again.
	if n := len(peer.snapshot().extendRecv); n < 2 {
		t.Fatalf("%d renewal attempts; want retries after a hung attempt", n)
	}
	if err := g.Unlock(t.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock after loss: %v", err)
	}
}

// consul#912: a transient error must not drop a lease that is still valid.
func TestTransientRenewalErrorsAreRetriedWhileTheLeaseIsValid(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.extendMode, p.failN = modeFailN, 4 })
	c := dialPeer(t, url)
	const ttl = 900 * time.Millisecond
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Wait for a renewal that succeeded after the failures.
	deadline := time.Now().Add(ttl)
	for len(peer.snapshot().extendOK) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no successful renewal within the TTL; guard err %v", g.Err())
		}
		time.Sleep(5 * time.Millisecond) // poll with a deadline
	}
	if err := g.Err(); err != nil {
		t.Fatalf("guard lost despite a successful retry: %v", err)
	}
	if n := len(peer.snapshot().extendRecv); n < 5 {
		t.Fatalf("%d renewal attempts, want the 4 failures then a success", n)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableUntilExpiryPoisonsWithLastError(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.extendMode = modeUnavailable })
	c := dialPeer(t, url)
	// Long enough for several renewal attempts to be answered (unavailable)
	// before the expiry even when a loaded machine starves this process;
	// with 400ms, runs where none was answered in time poisoned the guard
	// with no last error at all.
	const ttl = time.Second
	before := time.Now()
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	at := waitDone(t, g, ttl+slack)
	if d, local := at.Sub(before), ttl-DefaultExpiryMargin.For(ttl); d < local {
		t.Fatalf("poisoned after %s: before the local expiry %s", d, local)
	}
	lost := lossOf(t, g)
	if lost.Reason != LossExpired || !errors.Is(lost, ErrUnavailable) {
		t.Fatalf("loss %v: want LossExpired with ErrUnavailable", lost)
	}
}

func TestUnlockAnsweredReleasedFalseIsLeaseLost(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.releaseMode = modeReject })
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(5 * time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = g.Unlock(t.Context())
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock answered released=false: %v, want ErrLeaseLost (etcd#22082)", err)
	}
	var lost *LeaseLostError
	if !errors.As(err, &lost) || lost.Reason != LossRejected {
		t.Fatalf("%v: want LossRejected", err)
	}
	if !errors.Is(context.Cause(g.Context()), ErrLeaseLost) {
		t.Fatal("context not cancelled with the loss")
	}
}

// A release whose first attempt failed in transit may have released the
// lease; a retry answered released=false then says the token no longer
// holds, not that the lease was lost while held (found by the chaos run: a
// server killed right after it applied a Release).
func TestUnlockRetryAnsweredReleasedFalseIsUnconfirmed(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.releaseMode, p.failN = modeFailNThenReject, 1 })
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(5 * time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = g.Unlock(t.Context())
	var lost *LeaseLostError
	if !errors.As(err, &lost) || lost.Reason != LossReleaseUnconfirmed {
		t.Fatalf("Unlock: %v, want a LeaseLostError with LossReleaseUnconfirmed", err)
	}
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("%v: the token no longer holds, so ErrLeaseLost must match", err)
	}
	if r := peer.snapshot().releases; r != 2 {
		t.Fatalf("%d release attempts, want 2", r)
	}
}

func TestUnlockRetriesUnavailable(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.releaseMode, p.failN = modeFailN, 2 })
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(5 * time.Second).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if r := peer.snapshot().releases; r != 3 {
		t.Fatalf("%d release attempts, want 3", r)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
}

func TestExtendChangesTheRenewalTTL(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(300 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Extend(t.Context(), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if g.TTL() != 3*time.Second {
		t.Fatalf("TTL %s", g.TTL())
	}
	n := len(peer.snapshot().extendOK)
	// The old schedule (every 100ms) would renew several times in 500ms;
	// the new one (every 1s) must not.
	time.Sleep(500 * time.Millisecond) // observing an absence needs a span of time
	s := peer.snapshot()
	if len(s.extendOK) != n {
		t.Fatalf("%d renewals within 500ms of extending to 3s", len(s.extendOK)-n)
	}
	if got := s.extendTTLs[len(s.extendTTLs)-1]; got != 3*time.Second {
		t.Fatalf("renewed with %s", got)
	}
	if err := g.Extend(t.Context(), -time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative ttl: %v", err)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.Extend(t.Context(), 0); !errors.Is(err, ErrReleased) {
		t.Fatalf("Extend after Unlock: %v", err)
	}
}

// After a long server-side wait the lease started late; counting from the
// send, little of it may be left, so the SDK renews once before handing the
// guard out, and the guard is valid from that renewal.
func TestLateAcquireAnswerIsConfirmedBeforeUse(t *testing.T) {
	peer, url := newFakePeer(t)
	const ttl = 300 * time.Millisecond
	peer.set(func(p *fakePeer) { p.acquireDelay = ttl + 100*time.Millisecond })
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(ttl).Wait(5 * time.Second).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.FencingToken(); err != nil {
		t.Fatalf("guard handed out already lost: %v", err)
	}
	if n := len(peer.snapshot().extendOK); n < 1 {
		t.Fatal("no confirming renewal after a late answer")
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestLockRetriesUnavailableWithinItsWait(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.acquireMode, p.failN = modeFailN, 3 })
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(time.Second).Wait(5 * time.Second).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(peer.snapshot().acquireRecv); n != 4 {
		t.Fatalf("%d attempts, want 4", n)
	}
	_ = g.Unlock(t.Context())

	// Unavailable for longer than the wait: the last error comes back,
	// within the wait.
	peer.set(func(p *fakePeer) { p.acquireMode = modeUnavailable })
	start := time.Now()
	_, err = c.Lock("k").TTL(time.Second).Wait(300 * time.Millisecond).Lock(t.Context())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 300*time.Millisecond+slack {
		t.Fatalf("gave up after %s, wait was 300ms", d)
	}
	// TryLock and Wait(0), one attempt each, retry unavailable within the
	// retry budget, and not longer.
	const budget = 300 * time.Millisecond
	cb := dialPeer(t, url, WithRetryBudget(budget))
	for name, try := range map[string]func() error{
		"TryLock": func() error { _, err := cb.Lock("k").TryLock(t.Context()); return err },
		"Wait(0)": func() error { _, err := cb.Lock("k").Wait(0).Lock(t.Context()); return err },
	} {
		before := len(peer.snapshot().acquireRecv)
		start := time.Now()
		err := try()
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) || ErrorCode(err) != CodeUnavailable {
			t.Fatalf("%s: %v (code %q), want ErrUnavailable", name, err, ErrorCode(err))
		}
		if took < budget || took > budget+slack {
			t.Fatalf("%s gave up after %s, want the retry budget %s", name, took, budget)
		}
		if n := len(peer.snapshot().acquireRecv) - before; n < 2 {
			t.Fatalf("%s made %d attempts within its retry budget", name, n)
		}
	}
}

func TestErrorCodesMapToSentinels(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	for code, want := range map[connect.Code]error{
		connect.CodeInvalidArgument:   ErrInvalidArgument,
		connect.CodeUnavailable:       ErrUnavailable,
		connect.CodePermissionDenied:  ErrPermissionDenied,
		connect.CodeUnauthenticated:   ErrUnauthenticated,
		connect.CodeResourceExhausted: ErrResourceExhausted,
		connect.CodeInternal:          ErrServer,
	} {
		peer.set(func(p *fakePeer) { p.acquireMode, p.errCode = modeError, code })
		_, err := c.Lock("k").TryLock(t.Context())
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", code, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "key: scripted failure") {
			t.Errorf("%s: %q lost the server's message", code, err)
		}
	}
	// A call cut by the caller's context matches the context's error.
	peer.set(func(p *fakePeer) { p.acquireMode = modeHang })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Lock("k").TryLock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want context.DeadlineExceeded", err)
	}
}

// A process paused past its lease (GC, SIGSTOP) may resume before the loss
// timer has run: the accessors read the clock themselves.
func TestAccessorsReportExpiryEvenBeforeTheTimerRuns(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.extendMode = modeHang })
	c := dialPeer(t, url)
	// Not 200ms: an Acquire answered after TTL/3 is confirmed by an Extend
	// before TryLock returns (Guard.confirm), and that Extend hangs here
	// too, failing TryLock; a loaded machine took over 67ms to answer.
	const ttl = 900 * time.Millisecond
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.lossTimer.Stop() // as if the timer had not had its turn yet
	expiry := g.expiry
	g.mu.Unlock()
	for time.Now().Before(expiry) {
		if _, err := g.FencingToken(); err != nil {
			t.Fatalf("lost before the local expiry: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // poll up to the expiry
	}
	if _, err := g.FencingToken(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("FencingToken after the expiry: %v", err)
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("the accessor's check did not poison the guard")
	}
}

// A renewal that fails transiently is retried after the backoff, cut to the
// time left: with a backoff longer than the lease, the retry is due exactly
// at the local expiry. Then the lease has ended on our clock, so the
// watchdog sends nothing at or after it and the guard is lost, once, even
// when its loss timer has not run yet (a busy machine): stopped here, so
// that only the watchdog can notice the expiry. The TS and Python SDKs have
// the same test.
func TestRenewalRetryDueAtTheLocalExpiryIsNotSent(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.extendMode = modeUnavailable })
	var (
		mu   sync.Mutex
		lost []LeaseEvent
	)
	gone := make(chan struct{})
	c := dialPeer(t, url, WithBackoff(Backoff{Initial: time.Hour, Max: time.Hour}), WithLeaseEvents(func(e LeaseEvent) {
		if e.Type != LeaseLost {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if lost = append(lost, e); len(lost) == 1 {
			close(gone)
		}
	}))
	c.renewer.phase = 0 // the first renewal at TTL/3, long before the expiry
	const ttl = 600 * time.Millisecond
	g, err := c.Lock("k").TTL(ttl).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// An Acquire answered after TTL/3 (a loaded machine) is confirmed by an
	// Extend before TryLock returns (Guard.confirm); a failed confirmation
	// leaves the guard held and due at once. Count the renewals after it.
	confirms := len(peer.snapshot().extendRecv)
	g.mu.Lock()
	g.lossTimer.Stop() // as if the timer had not had its turn yet
	expiry := g.expiry
	g.mu.Unlock()
	select {
	case <-gone:
	case <-time.After(ttl + slack):
		t.Fatalf("guard not lost %s after the acquire; %d renewals sent (want 1: the retry is due at the expiry)", ttl+slack, len(peer.snapshot().extendRecv)-confirms)
	}
	if now := time.Now(); now.Before(expiry) {
		t.Fatalf("lost %s before the local expiry", expiry.Sub(now))
	}
	if l := lossOf(t, g); l.Reason != LossExpired || !errors.Is(l, ErrUnavailable) {
		t.Fatalf("loss %v: want LossExpired with the failed renewal's ErrUnavailable", l)
	}
	if err := g.Unlock(t.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Unlock after the loss: %v, want ErrLeaseLost", err)
	}
	// Close waits for every renewal in flight and every event: what was
	// sent and reported by now is all there is.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(peer.snapshot().extendRecv) - confirms; n != 1 {
		t.Fatalf("%d renewals sent, want 1: the failed one, and no retry at the local expiry", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lost) != 1 || lost[0].Reason != LossExpired {
		t.Fatalf("lost events %+v, want one, LossExpired", lost)
	}
}

// An explicit Extend sent while a renewal's answer is being applied goes
// after it, so the older renewal never overwrites the newer Extend: the
// guard keeps the Extend's TTL and expiry (had the Extend shortened the
// lease, the guard would otherwise believe in a lease the server had cut),
// and the watchdog renews with it.
func TestExtendDuringARenewalAnswerIsAppliedAfterIt(t *testing.T) {
	peer, url := newFakePeer(t)
	c := dialPeer(t, url)
	g, err := c.Lock("k").TTL(1500 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	extended := make(chan error, 1)
	var once sync.Once
	hook := func(h *Guard) {
		if h != g {
			return
		}
		once.Do(func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				extended <- g.Extend(t.Context(), 6*time.Second)
			}()
			// The Extend must wait for this renewal to be applied; give it
			// the time it would need to overtake it if it could.
			select {
			case <-done:
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
	testHookRenewalAnswered.Store(&hook)
	t.Cleanup(func() { testHookRenewalAnswered.Store(nil) })

	if err := <-extended; err != nil {
		t.Fatal(err)
	}
	// Both applied: the renewal and the Extend, in whichever order.
	for deadline := time.Now().Add(5 * time.Second); g.Renewals() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals applied, want the watchdog's and the Extend", g.Renewals())
		}
	}
	if got := g.TTL(); got != 6*time.Second {
		t.Fatalf("TTL %s after Extend(6s) during a renewal's answer: the renewal's older answer won", got)
	}
	if left := g.Remaining(); left < 4*time.Second {
		t.Fatalf("%s left after Extend(6s): the renewal's older expiry won", left)
	}
	n := len(peer.snapshot().extendOK)
	// The renewal's schedule (TTL/3 of 1.5s after it was sent) would renew
	// within 600ms; the Extend's (2s after it) must not.
	time.Sleep(600 * time.Millisecond) // observing an absence needs a span of time
	if s := peer.snapshot(); len(s.extendOK) != n {
		t.Fatalf("%d renewals within 600ms of extending to 6s: the watchdog kept the old schedule", len(s.extendOK)-n)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
