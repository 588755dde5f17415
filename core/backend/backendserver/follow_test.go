package backendserver

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	"github.com/holdfast/holdfast/core/internal/wire"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// Follow through a real gRPC connection, on a backend that does not follow
// natively: the ack of a change comes once it is in force, then only the
// followed key's events, and every goroutine of the stream, the request
// reader's included, is gone once the host ends the stream.
func TestFollowServedForAnyBackend(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := fakebackend.New()
	defer b.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	backendv1.RegisterBackendServiceServer(srv, &grpcServer{b: b})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := backendv1.NewBackendServiceClient(conn).Follow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := func() (backend.Event, uint64) {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		ev, applied, err := wire.FromFollowResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		return ev, applied
	}
	if ev, _ := recv(); ev.Type != backend.EventSynced {
		t.Fatalf("first message %+v, want synced", ev)
	}
	if err := stream.Send(wire.ToFollowRequest(backend.FollowChange{Keys: []string{"k"}}, 1)); err != nil {
		t.Fatal(err)
	}
	if _, applied := recv(); applied != 1 {
		t.Fatalf("answer to the change = applied %d, want 1", applied)
	}
	// No more changes: the feed goes on.
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"other", "k"} {
		if res, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "t", TTL: time.Minute, Limit: 1, Permits: 1}); err != nil || !res.Acquired {
			t.Fatalf("acquire %q: %+v, %v", key, res, err)
		}
	}
	if ev, applied := recv(); applied != 0 || ev.Type != backend.EventAcquired || ev.Record.Key != "k" {
		t.Fatalf("got %+v (applied %d), want only the acquired event of the followed k", ev, applied)
	}
	cancel()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("the stream went on after its context ended")
	}
}
