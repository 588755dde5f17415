package lockservice_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/lockservice"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The handler serves the engine with the server's error codes.
func TestHandlerServesTheEngine(t *testing.T) {
	b := memory.New()
	defer b.Close()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	mux := http.NewServeMux()
	mux.Handle(lockservice.NewHandler(e))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	c := lockv1connect.NewLockServiceClient(ts.Client(), ts.URL)
	res, err := c.Acquire(t.Context(), &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("Acquire: %v %v", res, err)
	}
	_, err = c.Acquire(t.Context(), &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(100 * time.Hour)})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a TTL over the maximum: %v, want invalid_argument", err)
	}
}
