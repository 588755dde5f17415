package holdfasttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	holdfast "github.com/holdfast/holdfast/sdk-go"
	"github.com/holdfast/holdfast/sdk-go/holdfasttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExpireLeaseWakesWaitersAndPoisonsTheHolder(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	holder, waiter := srv.Client(), srv.Client()
	g, err := holder.Lock("k").TTL(time.Minute).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := g.FencingToken()
	got := make(chan *holdfast.Guard, 1)
	go func() {
		w, err := waiter.Lock("k").TTL(time.Minute).Wait(10 * time.Second).Lock(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	for {
		st, held, err := waiter.Inspect(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if held && st.Waiters == 1 {
			break
		}
		time.Sleep(2 * time.Millisecond) // poll until the waiter is queued
	}
	if !srv.ExpireLease("k") {
		t.Fatal("ExpireLease found no lease")
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if next, _ := w.FencingToken(); next <= tok {
		t.Fatalf("the waiter's token %d, not above the expired lease's %d", next, tok)
	}
	// The holder learns at its next renewal (TTL/3 = 20s here), or at once
	// when it asks the server.
	err = g.Extend(t.Context(), 0)
	var lost *holdfast.LeaseLostError
	if !errors.As(err, &lost) || lost.Reason != holdfast.LossRejected {
		t.Fatalf("Extend after ExpireLease: %v, want a rejected loss", err)
	}
	if err := w.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if srv.ExpireLease("k") {
		t.Fatal("ExpireLease of a free key reported a lease")
	}
}

// The in-process server keeps semaphores and read-write locks as the real
// one does; ExpireLease ends every grant on a key.
func TestSemaphoreAndExpireLease(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	a, b := srv.Client(), srv.Client()
	ga, err := a.Semaphore("s", 2).TTL(time.Minute).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Semaphore("s", 2).TTL(time.Minute).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Semaphore("s", 2).TryLock(t.Context()); !errors.Is(err, holdfast.ErrNotAcquired) {
		t.Fatalf("a third permit of a limit-2 semaphore: %v", err)
	}
	if !srv.ExpireLease("s") {
		t.Fatal("ExpireLease found no lease")
	}
	for _, g := range []*holdfast.Guard{ga, gb} {
		var lost *holdfast.LeaseLostError
		if err := g.Extend(t.Context(), 0); !errors.As(err, &lost) || lost.Reason != holdfast.LossRejected {
			t.Fatalf("Extend of a grant after ExpireLease: %v, want a rejected loss", err)
		}
	}
	r, err := a.RWLock("s2").Read().TryLock(t.Context())
	if err != nil || r.Mode() != holdfast.ModeShared {
		t.Fatalf("a reader: %v %v", r, err)
	}
	if err := r.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestUnavailableAndUnreachable(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	c := srv.Client(holdfast.WithRetryBudget(300 * time.Millisecond))
	g, err := c.Lock("k").TTL(time.Minute).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]func(bool){"unavailable": srv.SetUnavailable, "unreachable": srv.SetUnreachable} {
		set(true)
		if _, err := c.ServerInfo(t.Context()); !errors.Is(err, holdfast.ErrUnavailable) {
			t.Fatalf("%s: ServerInfo: %v, want ErrUnavailable", name, err)
		}
		if _, err := c.Lock("k2").TryLock(t.Context()); !errors.Is(err, holdfast.ErrUnavailable) {
			t.Fatalf("%s: TryLock: %v, want ErrUnavailable", name, err)
		}
		if err := g.Err(); err != nil {
			t.Fatalf("%s: a transient outage poisoned a guard whose lease is valid: %v", name, err)
		}
		set(false)
		if _, err := c.ServerInfo(t.Context()); err != nil {
			t.Fatalf("%s, then back: %v", name, err)
		}
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// An outage longer than the lease: the guard is poisoned at its local
// expiry, with the outage as the cause.
func TestUnreachableUntilTheLeaseEnds(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	c := srv.Client()
	g, err := c.Lock("k").TTL(300 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.SetUnreachable(true)
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("guard still held 5s into an outage of a 300ms lease")
	}
	var lost *holdfast.LeaseLostError
	if !errors.As(context.Cause(g.Context()), &lost) || lost.Reason != holdfast.LossExpired || !errors.Is(lost, holdfast.ErrUnavailable) {
		t.Fatalf("cause %v, want an expired loss caused by unavailable", context.Cause(g.Context()))
	}
	srv.SetUnreachable(false)
}

func TestEveryProtocol(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	for _, p := range []holdfast.Protocol{holdfast.ProtocolConnect, holdfast.ProtocolGRPC, holdfast.ProtocolGRPCWeb} {
		c := srv.Client(holdfast.WithProtocol(p))
		g, err := c.Lock("k").TryLock(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

// How long a user's test pays: start the server, take the lock, lose it,
// take it again. (The servers stop when the benchmark ends.)
func BenchmarkTakeLoseRetake(b *testing.B) {
	for b.Loop() {
		func() {
			srv := holdfasttest.NewServer(b)
			c, err := holdfast.Dial(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			g, err := c.Lock("k").TTL(300 * time.Millisecond).TryLock(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			srv.ExpireLease("k")
			<-g.Done()
			g2, err := c.Lock("k").TryLock(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			_ = g2.Unlock(context.Background())
		}()
	}
}
