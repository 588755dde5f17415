// A user's test of their loss handling, in a module of their own: the
// release's holdfasttest runs the server in the test's process.
package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	holdfast "github.com/holdfast/holdfast/sdk-go"
	"github.com/holdfast/holdfast/sdk-go/holdfasttest"
)

func TestTakeLoseRetake(t *testing.T) {
	srv := holdfasttest.NewServer(t)
	client := srv.Client()
	g, err := client.Lock("jobs/nightly").TTL(300 * time.Millisecond).TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.ExpireLease("jobs/nightly")
	<-g.Done()
	if !errors.Is(context.Cause(g.Context()), holdfast.ErrLeaseLost) {
		t.Fatalf("guard ended with %v", context.Cause(g.Context()))
	}
	g2, err := client.Lock("jobs/nightly").TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}
