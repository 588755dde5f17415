package holdfast

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// A value the server would refuse is refused before anything is sent,
// naming the field and the limit.
func TestElectionValidation(t *testing.T) {
	p, url := newFakePeer(t)
	c := dialPeer(t, url)
	for _, tc := range []struct {
		name, value, want string
	}{
		{"4097 bytes", strings.Repeat("v", MaxValueBytes+1), "value: 4097 bytes exceeds the maximum 4096 bytes"},
		{"not UTF-8", "\xff\xfe", "value: must be valid UTF-8"},
		{"NUL", "a\x00b", "value: must not contain NUL (found at byte 1)"},
	} {
		for name, e := range map[string]Election{"Campaign": c.Election("e"), "Campaign with Wait(0)": c.Election("e").Wait(0)} {
			_, err := e.Campaign(t.Context(), tc.value)
			if !errors.Is(err, ErrInvalidArgument) || ErrorCode(err) != CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, %s: %v, want invalid_argument %q", tc.name, name, err, tc.want)
			}
		}
	}
	if _, _, err := (Election{}).Leader(t.Context()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Leader of the zero Election: %v, want invalid_argument", err)
	}
	if n := len(p.snapshot().acquireRecv); n != 0 {
		t.Fatalf("%d Acquires sent for campaigns refused before sending", n)
	}
}

// A campaign is an Acquire of KIND_ELECTION carrying the value; the
// largest value fits.
func TestElectionRequest(t *testing.T) {
	c := dialPeer(t, "http://127.0.0.1:1")
	l := c.Election("k").l
	l.value = strings.Repeat("é", MaxValueBytes/2)
	if err := l.check(); err != nil {
		t.Fatalf("a value of exactly %d bytes: %v", MaxValueBytes, err)
	}
	req := &lockv1.AcquireRequest{Key: "k"}
	l.fill(req)
	want := &lockv1.AcquireRequest{Key: "k", Kind: lockv1.Kind_KIND_ELECTION, Value: l.value}
	if !proto.Equal(req, want) {
		t.Fatalf("request %v, want %v", req, want)
	}
}

// Against the real server: one leader at a time, a campaigner queued
// behind it leads after it resigns with a larger term, Proclaim changes
// the value everyone reads and observes, and Observe reports each change
// in order.
func TestElection(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	a, b := dialServer(t, s), dialServer(t, s)
	ctx := t.Context()
	info, err := a.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Backend.Keeps(KindElection) {
		t.Fatalf("the memory backend says %+v: want elections", info.Backend)
	}
	octx, stopObserving := context.WithCancel(ctx)
	observed := make(chan Observation, 16)
	observeDone := make(chan error, 1)
	go func() {
		defer close(observed)
		for o, err := range b.Election("svc").Observe(octx) {
			if err != nil {
				observeDone <- err
				return
			}
			observed <- o
		}
		observeDone <- nil
	}()
	next := func(what string) Observation {
		t.Helper()
		select {
		case o, ok := <-observed:
			if !ok {
				t.Fatalf("%s: the observation ended: %v", what, <-observeDone)
			}
			return o
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no observation within 10s", what)
		}
		return Observation{}
	}
	if o := next("the first message"); o.Leader != nil {
		t.Fatalf("the first observation of a free election: %+v, want no leader", o.Leader)
	}

	lead, err := a.Election("svc").TTL(time.Minute).Holder("node-a").Campaign(ctx, "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	term1, err := lead.Term()
	if err != nil || lead.Kind() != KindElection || lead.Value() != "10.0.0.1:80" {
		t.Fatalf("leadership: term %d %v, kind %v, value %q", term1, err, lead.Kind(), lead.Value())
	}
	if got := lead.String(); !strings.Contains(got, "Leadership") || strings.Contains(got, lead.owner) {
		t.Fatalf("String() = %q", got)
	}
	if o := next("the first leader"); o.Leader == nil || o.Leader.Term != term1 || o.Leader.Value != "10.0.0.1:80" || o.Leader.Holder != "node-a" {
		t.Fatalf("observed %+v, want term %d", o.Leader, term1)
	}
	ld, ok, err := b.Election("svc").Leader(ctx)
	if err != nil || !ok || ld.Term != term1 || ld.Value != "10.0.0.1:80" || ld.Holder != "node-a" {
		t.Fatalf("Leader: %+v %v %v", ld, ok, err)
	}
	var na *NotAcquiredError
	if _, err := b.Election("svc").Wait(0).Campaign(ctx, "b"); !errors.As(err, &na) || !strings.Contains(err.Error(), `led by "node-a"`) {
		t.Fatalf("a second campaign with Wait(0): %v, want not acquired, led by node-a", err)
	}

	if err := lead.Proclaim(ctx, "10.0.0.1:81"); err != nil {
		t.Fatal(err)
	}
	if lead.Value() != "10.0.0.1:81" {
		t.Fatalf("Value after Proclaim: %q", lead.Value())
	}
	if o := next("the proclaimed value"); o.Leader == nil || o.Leader.Term != term1 || o.Leader.Value != "10.0.0.1:81" {
		t.Fatalf("observed %+v after Proclaim, want term %d, the new value", o.Leader, term1)
	}
	if ld, _, _ := b.Election("svc").Leader(ctx); ld.Value != "10.0.0.1:81" || ld.Term != term1 {
		t.Fatalf("Leader after Proclaim: %+v", ld)
	}

	won := make(chan *Leadership, 1)
	go func() {
		l, err := b.Election("svc").TTL(time.Minute).Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	awaitWaiters(t, a, "svc", 1)
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lead.Proclaim(ctx, "late"); !errors.Is(err, ErrReleased) {
		t.Fatalf("Proclaim after Resign: %v, want ErrReleased", err)
	}
	second := <-won
	if second == nil {
		t.FailNow()
	}
	term2, _ := second.Term()
	if term2 <= term1 {
		t.Fatalf("the next leader's term %d, want above %d", term2, term1)
	}
	// The resignation may be seen as no leader before the next one.
	o := next("after the resignation")
	if o.Leader == nil {
		o = next("the next leader")
	}
	if o.Leader == nil || o.Leader.Term != term2 || o.Leader.Value != "b" {
		t.Fatalf("observed %+v, want the next leader, term %d", o.Leader, term2)
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if o := next("the last resignation"); o.Leader != nil {
		t.Fatalf("observed %+v after the last resignation, want no leader", o.Leader)
	}
	stopObserving()
	for range observed {
	}
	if err := <-observeDone; err != nil {
		t.Fatalf("Observe ended with %v, want nil when its context ends", err)
	}
}

// A leadership ended behind the leader's back (here released by its owner
// token, as an expiry would) answers Proclaim with proclaimed=false: the
// guard is poisoned (rejected) and its term accessor fails.
func TestProclaimAfterLossPoisons(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx := t.Context()
	lead, err := c.Election("deposed").TTL(time.Minute).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.rpc.Release(ctx, lead.releaseRequest(newRequestID())); err != nil {
		t.Fatal(err)
	}
	err = lead.Proclaim(ctx, "w")
	var lost *LeaseLostError
	if !errors.As(err, &lost) || lost.Reason != LossRejected {
		t.Fatalf("Proclaim of a deposed leader: %v, want a rejected lease loss", err)
	}
	if _, err := lead.Term(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Term after the loss: %v", err)
	}
	if !errors.Is(context.Cause(lead.Context()), ErrLeaseLost) {
		t.Fatalf("the leadership's context: %v, want cancelled with the loss", context.Cause(lead.Context()))
	}
	if lead.Value() != "v" {
		t.Fatalf("Value after a refused Proclaim: %q, want the old value", lead.Value())
	}
	if err := lead.Resign(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Resign after the loss: %v, want ErrLeaseLost", err)
	}
}

// holdAnswer is an http.RoundTripper that forwards every request and holds
// the answer to the first request of method until release is closed,
// counting method's requests as they are sent.
type holdAnswer struct {
	method  string
	sent    atomic.Int32
	arrived chan struct{} // closed when the first one's answer is held
	release chan struct{}
}

func (h *holdAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	ours := strings.HasSuffix(r.URL.Path, "/"+h.method)
	n := int32(0)
	if ours {
		n = h.sent.Add(1)
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if ours && n == 1 {
		close(h.arrived)
		<-h.release
	}
	return resp, err
}

// Two Proclaims of one leadership go one after the other (the guard's
// lease-call slot, as for Extend): two in flight together could be
// answered in either order, and Value would then show the value the server
// replaced. The TypeScript and Python SDKs have the same test.
func TestProclaimsOfOneLeadershipGoOneAfterTheOther(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	hold := &holdAnswer{method: "Proclaim", arrived: make(chan struct{}), release: make(chan struct{})}
	c := dialServer(t, s, WithProtocol(ProtocolConnect), WithHTTPClient(&http.Client{Transport: hold}))
	ctx := t.Context()
	e := c.Election("proclaims").TTL(time.Minute)
	lead, err := e.Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- lead.Proclaim(ctx, "a") }()
	<-hold.arrived
	second := make(chan error, 1)
	go func() { second <- lead.Proclaim(ctx, "b") }()
	time.Sleep(200 * time.Millisecond) // observing an absence needs a span of time
	if n := hold.sent.Load(); n != 1 {
		t.Fatalf("%d Proclaims sent while the first was unanswered, want 1", n)
	}
	close(hold.release)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if got := lead.Value(); got != "b" {
		t.Fatalf("Value %q after Proclaim(a) then Proclaim(b)", got)
	}
	if ld, ok, err := e.Leader(ctx); err != nil || !ok || ld.Value != "b" {
		t.Fatalf("Leader: %+v, %v, %v; want the value b", ld, ok, err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
