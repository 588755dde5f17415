package httpserver

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/turns"
)

// While every turn is taken (a List page or a scrape in progress), List
// waits for one and lock calls do not.
func TestListTakesTurnsLockCallsDoNot(t *testing.T) {
	b := memory.New()
	defer b.Close()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tu := turns.New(1, time.Hour)
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), WithTurns(tu))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, "http://"+srv.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	release, err := tu.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Acquire(ctx, &lockv1.AcquireRequest{Key: "turns/a", Ttl: durationpb.New(time.Minute)})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("Acquire while the turn is taken: %v %v", resp, err)
	}
	if _, err := client.Inspect(ctx, &lockv1.InspectRequest{Key: "turns/a"}); err != nil {
		t.Fatalf("Inspect while the turn is taken: %v", err)
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if page, err := client.List(waitCtx, &lockv1.ListRequest{}); err == nil {
		t.Fatalf("List answered while the only turn was taken: %v", page)
	}
	waitCancel()
	release()
	page, err := client.List(ctx, &lockv1.ListRequest{})
	if err != nil || len(page.GetLocks()) != 1 || page.GetLocks()[0].GetKey() != "turns/a" {
		t.Fatalf("List after the turn came back: %v %v", page, err)
	}
	if _, err := client.Release(ctx, &lockv1.ReleaseRequest{Key: "turns/a", OwnerToken: resp.GetLease().GetOwnerToken()}); err != nil {
		t.Fatal(err)
	}
}
