package holdfasttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	holdfast "github.com/holdfast/holdfast/sdk-go"
	"github.com/holdfast/holdfast/sdk-go/holdfasttest"
)

// A user's test of their own loss handling: take the lock, lose it behind
// the holder's back, take it again. The sdk-go README quotes this test.
func TestTakeLoseRetake(t *testing.T) {
	start := time.Now()
	srv := holdfasttest.NewServer(t) // engine + memory backend in process
	client := srv.Client()

	g, err := client.Lock("jobs/nightly").TTL(300 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.ExpireLease("jobs/nightly") // the lease ends behind the holder's back
	<-g.Done()                      // its next renewal is refused: the guard is poisoned
	if !errors.Is(context.Cause(g.Context()), holdfast.ErrLeaseLost) {
		t.Fatalf("guard ended with %v", context.Cause(g.Context()))
	}

	g2, err := client.Lock("jobs/nightly").TryLock(t.Context()) // free again
	if err != nil {
		t.Fatal(err)
	}
	t1, _ := g2.FencingToken()
	if err := g2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.FencingToken(); !errors.Is(err, holdfast.ErrLeaseLost) || t1 == 0 {
		t.Fatalf("the lost guard's token: %v", err)
	}
	t.Logf("started, took, lost and re-took a lock in %s", time.Since(start))
}
