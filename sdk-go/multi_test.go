package holdfast

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Several keys: one guard, a fencing token per key, released together;
// a set blocked by a held key is not acquired and says by whom.
func TestMultiKeyLock(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx := t.Context()
	other, err := c.Lock("m/b").TTL(time.Minute).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lock("m/a", "m/b").TTL(time.Minute).TryLock(ctx)
	var na *NotAcquiredError
	if !errors.As(err, &na) || na.Current == nil || na.Current.Key != "m/b" || len(na.Keys) != 2 {
		t.Fatalf("a set with a held key: %v, want not acquired naming m/b's holder", err)
	}
	if _, held := inspect(t, c, "m/a"); held {
		t.Fatal("m/a was taken by a set that did not acquire")
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := c.Lock("m/b", "m/a").TTL(time.Minute).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Keys(); len(got) != 2 || got[0] != "m/b" || got[1] != "m/a" {
		t.Fatalf("Keys() = %v, want the order given", got)
	}
	if _, err := g.FencingToken(); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "FencingTokenFor") {
		t.Fatalf("FencingToken of a set: %v, want an error pointing at FencingTokenFor", err)
	}
	for _, k := range g.Keys() {
		tok, err := g.FencingTokenFor(k)
		st, held := inspect(t, c, k)
		if err != nil || !held || st.FencingToken != tok {
			t.Fatalf("%s: token %d %v, server says %v %v", k, tok, err, st, held)
		}
	}
	if err := g.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"m/a", "m/b"} {
		if _, held := inspect(t, c, k); held {
			t.Fatalf("%s still held after the set's Unlock", k)
		}
	}
}

// A lease that expires with a lock-delay keeps its key from the next
// holder for the delay; the error and InspectDelay say so; a waiter gets
// the key once it has passed.
func TestLockDelay(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx := t.Context()
	const delay = time.Second
	g, err := c.Lock("d/k").TTL(200 * time.Millisecond).LockDelay(delay).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.stop()   // its holder stalls: nobody renews it
	<-g.Done() // lost at its TTL
	expired := time.Now()
	var delayed *KeyDelay
	for delayed == nil && time.Since(expired) < delay {
		_, _, delayed, err = c.InspectDelay(ctx, "d/k")
		if err != nil {
			t.Fatal(err)
		}
	}
	if delayed == nil || delayed.Remaining <= 0 {
		t.Fatalf("InspectDelay did not report the lock-delay: %v", delayed)
	}
	_, err = c.Lock("d/k").TryLock(ctx)
	var na *NotAcquiredError
	if !errors.As(err, &na) || na.Delay == nil || !strings.Contains(err.Error(), "lock-delay") {
		t.Fatalf("a try in the lock-delay: %v, want not acquired with the delay", err)
	}
	next, err := c.Lock("d/k").Wait(10 * time.Second).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(expired); waited < delay-100*time.Millisecond {
		t.Fatalf("acquired %s after the local expiry, within the delay %s", waited, delay)
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// loseOne is an http.RoundTripper that forwards every request and, for the
// first request of method, throws the server's answer away and fails as a
// broken connection would: the server acted on it, the client never knows.
type loseOne struct {
	method string
	lost   atomic.Bool
	mu     sync.Mutex
	bodies []string // of method's requests
}

func (l *loseOne) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/"+l.method) {
		body, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.bodies = append(l.bodies, string(body))
		l.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/"+l.method) && l.lost.CompareAndSwap(false, true) {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset (the answer was lost in transit)")
	}
	return resp, err
}

// An Acquire whose answer is lost is retried with the same request id and
// answered with the lease the first attempt took: no wait for an orphan.
func TestLostAcquireAnswerIsRetriedIntoTheSameLease(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	lose := &loseOne{method: "Acquire"}
	c := dialServer(t, s, WithProtocol(ProtocolConnect), WithHTTPClient(&http.Client{Transport: lose}))
	ctx := t.Context()
	start := time.Now()
	g, err := c.Lock("r/k", "r/j").TTL(time.Minute).Wait(5 * time.Second).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Unlock(ctx) }()
	if !lose.lost.Load() {
		t.Fatal("no answer was lost")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the retry took %s: it waited instead of being answered with its lease", took)
	}
	lose.mu.Lock()
	bodies := lose.bodies
	lose.mu.Unlock()
	if len(bodies) < 2 {
		t.Fatalf("%d Acquire requests, want the lost one and its retry", len(bodies))
	}
	id := func(body string) string {
		var req lockv1.AcquireRequest
		if err := proto.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("an Acquire body that is not a protobuf message: %v", err)
		}
		return req.GetRequestId()
	}
	if id(bodies[0]) == "" || id(bodies[0]) != id(bodies[1]) {
		t.Fatalf("request ids %q and %q: want one id, sent on the retry too", id(bodies[0]), id(bodies[1]))
	}
	// The lease the server holds is the guard's: it renews.
	if err := g.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("the retried lease does not renew: %v", err)
	}
}

// A Release whose answer is lost is retried with the same request id and
// confirmed: Unlock succeeds instead of reporting release_unconfirmed.
func TestLostReleaseAnswerIsConfirmedOnRetry(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	lose := &loseOne{method: "Release"}
	c := dialServer(t, s, WithHTTPClient(&http.Client{Transport: lose}))
	ctx := t.Context()
	g, err := c.Lock("r/release").TTL(time.Minute).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after a lost answer: %v, want the retry confirmed", err)
	}
	if !lose.lost.Load() {
		t.Fatal("no answer was lost")
	}
	if _, held := inspect(t, c, "r/release"); held {
		t.Fatal("still held after Unlock")
	}
}
