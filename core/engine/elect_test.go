package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

func campaign(key, value string) *lockv1.AcquireRequest {
	return &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute), Kind: lockv1.Kind_KIND_ELECTION, Value: value, Holder: "test"}
}

func mustLead(t *testing.T, e *engine.Engine, key, value string) *lockv1.Lease {
	t.Helper()
	resp, err := e.Acquire(context.Background(), campaign(key, value))
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("campaign %q: %v %v", key, resp, err)
	}
	return resp.GetLease()
}

// Campaigns outside an election's bounds, and values outside elections,
// are invalid_argument naming the field and its limit.
func TestElectionShapesRefused(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	ttl := durationpb.New(time.Minute)
	with := func(f func(*lockv1.AcquireRequest)) *lockv1.AcquireRequest {
		r := campaign("k", "")
		f(r)
		return r
	}
	for _, c := range []struct {
		req  *lockv1.AcquireRequest
		want string
	}{
		{with(func(r *lockv1.AcquireRequest) { r.Limit = 2 }), "limit: an election has limit 1"},
		{with(func(r *lockv1.AcquireRequest) { r.Permits = 2 }), "permits: a campaign takes 1 permit"},
		{with(func(r *lockv1.AcquireRequest) { r.Mode = lockv1.Mode_MODE_SHARED }), "mode: MODE_SHARED is for KIND_RWLOCK only"},
		{with(func(r *lockv1.AcquireRequest) { r.Value = strings.Repeat("v", backend.MaxValueBytes+1) }), "value: 4097 bytes exceeds the maximum 4096 bytes"},
		{with(func(r *lockv1.AcquireRequest) { r.Value = "\xff" }), "value: must be valid UTF-8"},
		{with(func(r *lockv1.AcquireRequest) { r.Value = "a\x00b" }), "value: must not contain NUL"},
		{with(func(r *lockv1.AcquireRequest) { r.LockDelay = durationpb.New(time.Second) }), "lock_delay: applies to mutexes only, not to an election"},
		{&lockv1.AcquireRequest{Claims: []*lockv1.Claim{{Key: "a"}, {Key: "b"}}, Ttl: ttl, Kind: lockv1.Kind_KIND_ELECTION}, "kind: sets of keys (claims) take mutexes only"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Value: "v"}, "value: applies to elections only (KIND_ELECTION), not to a mutex"},
		{&lockv1.AcquireRequest{Key: "k", Ttl: ttl, Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 2, Value: "v"}, "value: applies to elections only (KIND_ELECTION), not to a semaphore"},
	} {
		_, err := e.Acquire(context.Background(), c.req)
		if !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want invalid_argument %q", c.req, err, c.want)
		}
	}
}

// A backend without elections answers campaigns, Proclaim and Observe
// with unimplemented naming it.
func TestElectionNotKeptIsUnimplemented(t *testing.T) {
	e, _ := newEngine(t, engine.Config{})
	ctx := context.Background()
	if _, err := e.Acquire(ctx, campaign("k", "v")); !errors.Is(err, engine.ErrUnimplemented) || !strings.Contains(err.Error(), `"fake"`) {
		t.Errorf("campaign: %v, want unimplemented naming the backend", err)
	}
	if _, err := e.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "k", OwnerToken: "t", Value: "v"}); !errors.Is(err, engine.ErrUnimplemented) || !strings.Contains(err.Error(), `"fake"`) {
		t.Errorf("proclaim: %v, want unimplemented naming the backend", err)
	}
	err := e.Observe(ctx, &lockv1.ObserveRequest{Key: "k"}, func(*lockv1.ObserveResponse) error { return nil })
	if !errors.Is(err, engine.ErrUnimplemented) {
		t.Errorf("observe: %v, want unimplemented", err)
	}
}

// The leader's lease and everyone's view of it carry the value; the term
// is the fencing token; a second campaigner is told who leads.
func TestElectionLeaseCarriesValue(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	ctx := context.Background()
	l := mustLead(t, e, "svc", "10.0.0.1:80")
	if l.GetKind() != lockv1.Kind_KIND_ELECTION || l.GetLimit() != 1 || l.GetPermits() != 1 || l.GetValue() != "10.0.0.1:80" {
		t.Fatalf("lease %v", l)
	}
	resp, err := e.Acquire(ctx, campaign("svc", "other"))
	if err != nil || resp.GetAcquired() {
		t.Fatalf("second campaign: %v %v", resp, err)
	}
	if h := resp.GetCurrent().GetHolders(); len(h) != 1 || h[0].GetValue() != "10.0.0.1:80" || h[0].GetFencingToken() != l.GetFencingToken() {
		t.Fatalf("current holders %v, want the leader with its value", h)
	}
	in, err := e.Inspect(ctx, &lockv1.InspectRequest{Key: "svc"})
	if err != nil || in.GetState().GetKind() != lockv1.Kind_KIND_ELECTION || in.GetState().GetHolders()[0].GetValue() != "10.0.0.1:80" {
		t.Fatalf("inspect: %v %v", in, err)
	}
	// A mutex on an election key, and a campaign on a mutex key, are
	// failed_precondition naming both kinds.
	if _, err := e.Acquire(ctx, acq("svc", time.Minute, 0)); !errors.Is(err, engine.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), `key "svc" is an election; the request asks for a mutex`) {
		t.Errorf("mutex on an election: %v", err)
	}
	mustAcquire(t, e, "m", time.Minute)
	if _, err := e.Acquire(ctx, campaign("m", "")); !errors.Is(err, engine.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), `key "m" is a mutex; the request asks for an election`) {
		t.Errorf("campaign on a mutex: %v", err)
	}
}

// Proclaim replaces the value only for the leader's token, and changes
// nothing else of the leadership.
func TestProclaim(t *testing.T) {
	rec := &recorder{events: map[backend.EventType]int{}}
	k := &kinded{}
	e := kindedEngine(t, k)
	e2, err := engine.New(context.Background(), k, engine.Config{Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e2.Close() })
	ctx := context.Background()
	l := mustLead(t, e, "svc", "a")

	resp, err := e2.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "svc", OwnerToken: l.GetOwnerToken(), Value: "b"})
	if err != nil || !resp.GetProclaimed() {
		t.Fatalf("leader's proclaim: %v %v", resp, err)
	}
	pl := resp.GetLease()
	if pl.GetValue() != "b" || pl.GetFencingToken() != l.GetFencingToken() || pl.GetStamp().GetWallTimeNs() != l.GetStamp().GetWallTimeNs() ||
		pl.GetStamp().GetLogical() != l.GetStamp().GetLogical() || pl.GetOwnerToken() != l.GetOwnerToken() || pl.GetTtl() != nil || pl.GetKind() != lockv1.Kind_KIND_ELECTION {
		t.Fatalf("proclaimed lease %v, want the leadership %v with value b, no ttl", pl, l)
	}
	if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: "svc"}); in.GetState().GetHolders()[0].GetValue() != "b" {
		t.Fatalf("inspect after proclaim: %v", in)
	}

	for name, req := range map[string]*lockv1.ProclaimRequest{
		"another token":   {Key: "svc", OwnerToken: "not-the-leader", Value: "c"},
		"another key":     {Key: "svc2", OwnerToken: l.GetOwnerToken(), Value: "c"},
		"a mutex's token": {Key: "m", OwnerToken: mustAcquire(t, e, "m", time.Minute).GetOwnerToken(), Value: "c"},
	} {
		resp, err := e.Proclaim(ctx, req)
		if err != nil || resp.GetProclaimed() || resp.GetLease() != nil {
			t.Errorf("%s: %v %v, want proclaimed=false", name, resp, err)
		}
	}
	if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: "svc"}); in.GetState().GetHolders()[0].GetValue() != "b" {
		t.Fatalf("a refused proclaim changed the value: %v", in)
	}

	// A resigned leader's token proclaims nothing, even once the key leads
	// again under another term.
	if r, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: "svc", OwnerToken: l.GetOwnerToken()}); err != nil || !r.GetReleased() {
		t.Fatal(r, err)
	}
	next := mustLead(t, e, "svc", "n")
	if next.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("term %d after %d: terms must increase", next.GetFencingToken(), l.GetFencingToken())
	}
	if resp, err := e2.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "svc", OwnerToken: l.GetOwnerToken(), Value: "stale"}); err != nil || resp.GetProclaimed() {
		t.Fatalf("stale leader's proclaim: %v %v", resp, err)
	}
	if in, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: "svc"}); in.GetState().GetHolders()[0].GetValue() != "n" {
		t.Fatalf("the stale proclaim changed the new leader's value: %v", in)
	}
	rec.mu.Lock()
	got := append([]bool(nil), rec.proclaims...)
	rec.mu.Unlock()
	if len(got) != 2 || !got[0] || got[1] {
		t.Errorf("observer saw proclaims %v, want [true false]", got)
	}

	for _, c := range []struct {
		req  *lockv1.ProclaimRequest
		want string
	}{
		{&lockv1.ProclaimRequest{Key: "", OwnerToken: "t"}, "key: must not be empty"},
		{&lockv1.ProclaimRequest{Key: "svc"}, "owner_token: must not be empty"},
		{&lockv1.ProclaimRequest{Key: "svc", OwnerToken: "t", Value: strings.Repeat("é", 2049)}, "value: 4098 bytes exceeds the maximum 4096 bytes"},
	} {
		if _, err := e.Proclaim(ctx, c.req); !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want invalid_argument %q", c.req, err, c.want)
		}
	}
}

// observation is one Observe message, or the end of the stream.
type observation struct {
	msg *lockv1.ObserveResponse
	err error
}

func observe(t *testing.T, e *engine.Engine, key string) (<-chan observation, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan observation, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := e.Observe(ctx, &lockv1.ObserveRequest{Key: key}, func(m *lockv1.ObserveResponse) error {
			out <- observation{msg: m}
			return nil
		})
		out <- observation{err: err}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out, cancel
}

func next(t *testing.T, ch <-chan observation) observation {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no Observe message within 10s")
	}
	return observation{}
}

// nextLeader is the next message, which must be a leader (term, value) or,
// with term 0, no leader.
func nextLeader(t *testing.T, ch <-chan observation, term uint64, value string) {
	t.Helper()
	o := next(t, ch)
	if o.err != nil {
		t.Fatalf("observe ended: %v", o.err)
	}
	l := o.msg.GetLeader()
	switch {
	case term == 0 && l != nil:
		t.Fatalf("observe: leader %v, want no leader", l)
	case term != 0 && (l.GetTerm() != term || l.GetValue() != value || l.GetKey() == "" || l.GetHolder() != "test" || l.GetExpiresAt() == nil):
		t.Fatalf("observe: leader %v, want term %d value %q", l, term, value)
	}
}

// Observe sends the current leader first, then every change in order,
// never the same thing twice in a row.
func TestObserve(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	ctx := context.Background()
	ch, _ := observe(t, e, "svc")
	nextLeader(t, ch, 0, "") // nobody leads yet

	a := mustLead(t, e, "svc", "a1")
	nextLeader(t, ch, a.GetFencingToken(), "a1")
	// A renewal and a proclaim of the same value are no news; the next
	// message is the new value.
	if r, err := e.Extend(ctx, &lockv1.ExtendRequest{Key: "svc", OwnerToken: a.GetOwnerToken(), Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetExtended() {
		t.Fatal(r, err)
	}
	for _, v := range []string{"a1", "a2"} {
		if r, err := e.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "svc", OwnerToken: a.GetOwnerToken(), Value: v}); err != nil || !r.GetProclaimed() {
			t.Fatal(r, err)
		}
	}
	nextLeader(t, ch, a.GetFencingToken(), "a2")
	if r, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: "svc", OwnerToken: a.GetOwnerToken()}); err != nil || !r.GetReleased() {
		t.Fatal(r, err)
	}
	nextLeader(t, ch, 0, "")
	b := mustLead(t, e, "svc", "b1")
	nextLeader(t, ch, b.GetFencingToken(), "b1")
	if b.GetFencingToken() <= a.GetFencingToken() {
		t.Fatalf("term %d after %d", b.GetFencingToken(), a.GetFencingToken())
	}

	// A second observer joining now starts with the current leader.
	ch2, _ := observe(t, e, "svc")
	nextLeader(t, ch2, b.GetFencingToken(), "b1")

	// An expiry is no leader.
	short := campaign("svc2", "s")
	short.Ttl = durationpb.New(20 * time.Millisecond)
	ch3, _ := observe(t, e, "svc2")
	nextLeader(t, ch3, 0, "")
	resp, err := e.Acquire(ctx, short)
	if err != nil || !resp.GetAcquired() {
		t.Fatal(resp, err)
	}
	nextLeader(t, ch3, resp.GetLease().GetFencingToken(), "s")
	nextLeader(t, ch3, 0, "")
}

// Observe of a key held as another kind is failed_precondition, at once
// or when the key is taken as one later.
func TestObserveOtherKind(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	mustAcquire(t, e, "m", time.Minute)
	ch, _ := observe(t, e, "m")
	if o := next(t, ch); !errors.Is(o.err, engine.ErrFailedPrecondition) || !strings.Contains(o.err.Error(), `key "m" is a mutex; Observe follows elections only`) {
		t.Fatalf("observe of a mutex: %v, want failed_precondition", o)
	}

	ch2, _ := observe(t, e, "later")
	nextLeader(t, ch2, 0, "")
	if _, err := e.Acquire(context.Background(), semaphore("later", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if o := next(t, ch2); !errors.Is(o.err, engine.ErrFailedPrecondition) || !strings.Contains(o.err.Error(), "is a semaphore of limit 2") {
		t.Fatalf("observe of a key taken as a semaphore: %v, want failed_precondition", o)
	}
}

// Every campaigner waits its turn: leadership passes in arrival order,
// each term above the last.
func TestCampaignersQueue(t *testing.T) {
	e := kindedEngine(t, &kinded{})
	first := mustLead(t, e, "q", "0")
	waiting := make([]<-chan *lockv1.AcquireResponse, 3)
	for i := range waiting {
		waiting[i] = waitFor(e, campaign("q", string(rune('1'+i))), time.Minute)
		eventually(t, "campaigner queued", func() bool { return e.Waiters("q") == i+1 })
	}
	prev := first
	for i, ch := range waiting {
		if r, err := e.Release(context.Background(), &lockv1.ReleaseRequest{Key: "q", OwnerToken: prev.GetOwnerToken()}); err != nil || !r.GetReleased() {
			t.Fatal(r, err)
		}
		l := granted(t, "campaigner", ch)
		if l.GetValue() != string(rune('1'+i)) || l.GetFencingToken() <= prev.GetFencingToken() {
			t.Fatalf("campaigner %d: %v after term %d", i, l, prev.GetFencingToken())
		}
		prev = l
	}
}
