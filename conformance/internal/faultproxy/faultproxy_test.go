package faultproxy_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/conformance/internal/faultproxy"
	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each mode against a real server: what the client sees, what the server
// got, and what the proxy recorded.
func TestModes(t *testing.T) {
	s := harness.StartT(t, harness.Options{})
	p, err := faultproxy.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	viaProxy := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, p.URL)
	direct := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, s.URL)
	ctx := t.Context()
	acquire := func(c lockv1connect.LockServiceClient, key string) (*lockv1.AcquireResponse, error) {
		return c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
	}

	// Pass: forwarded, and the lease's owner token is recorded.
	res, err := acquire(viaProxy, "k")
	if err != nil || !res.GetAcquired() {
		t.Fatalf("through the proxy: %v %v", res, err)
	}
	l, ok := p.Lease(res.GetLease().GetFencingToken())
	if !ok || l.OwnerToken != res.GetLease().GetOwnerToken() || l.Key != "k" {
		t.Fatalf("recorded lease %+v, %v", l, ok)
	}
	if r := p.Requests("Acquire"); len(r) != 1 || r[0].Outcome != faultproxy.Forwarded || r[0].Status != http.StatusOK {
		t.Fatalf("requests %+v", r)
	}

	// Unavailable: the client is told so; the server sees nothing.
	p.SetMode(faultproxy.Unavailable)
	if _, err := acquire(viaProxy, "k2"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("unavailable mode: %v", err)
	}
	if ins, _ := direct.Inspect(ctx, &lockv1.InspectRequest{Key: "k2"}); ins.GetHeld() {
		t.Fatal("unavailable mode forwarded the request")
	}

	// Blackhole: no answer until the client gives up.
	p.SetMode(faultproxy.Blackhole)
	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := viaProxy.Inspect(hctx, &lockv1.InspectRequest{Key: "k"}); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("blackhole mode: %v", err)
	}

	// A lost answer: the server released, the client heard unavailable.
	p.SetMode(faultproxy.Pass)
	p.LoseNextAnswer("Release")
	_, err = viaProxy.Release(ctx, &lockv1.ReleaseRequest{Key: "k", OwnerToken: l.OwnerToken})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("lost answer: %v", err)
	}
	if ins, _ := direct.Inspect(ctx, &lockv1.InspectRequest{Key: "k"}); ins.GetHeld() {
		t.Fatal("the Release whose answer was lost did not reach the server")
	}
	rel, err := viaProxy.Release(ctx, &lockv1.ReleaseRequest{Key: "k", OwnerToken: l.OwnerToken})
	if err != nil || rel.GetReleased() {
		t.Fatalf("the retry: %v %v, want released=false", rel, err)
	}
	var outcomes []faultproxy.Outcome
	for _, r := range p.Requests("") {
		outcomes = append(outcomes, r.Outcome)
	}
	want := []faultproxy.Outcome{faultproxy.Forwarded, faultproxy.Refused, faultproxy.Held, faultproxy.Lost, faultproxy.Forwarded}
	if len(outcomes) != len(want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	for i := range want {
		if outcomes[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", outcomes, want)
		}
	}
}
