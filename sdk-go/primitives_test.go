package holdfast

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// A semaphore or read-write lock the SDK cannot ask for is refused before
// anything is sent, naming the field.
func TestPrimitiveValidation(t *testing.T) {
	p, url := newFakePeer(t)
	c := dialPeer(t, url)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		lock  Lock
		field string
	}{
		{"limit 0", c.Semaphore("s", 0), "limit: 0"},
		{"limit -2", c.Semaphore("s", -2), "limit: -2"},
		{"permits 0", c.Semaphore("s", 3).Permits(0), "permits: 0"},
		{"permits above the limit", c.Semaphore("s", 3).Permits(4), "permits: 4 is above the semaphore's limit 3"},
		{"permits on a lock", c.Lock("l").Permits(1), "permits: only a semaphore"},
		{"permits on a reader", c.RWLock("rw").Read().Permits(2), "permits: only a semaphore"},
		{"lock-delay on a semaphore", c.Semaphore("s", 3).LockDelay(time.Second), "lock_delay: only a lock"},
		{"lock-delay on a writer", c.RWLock("rw").Write().LockDelay(time.Second), "lock_delay: only a lock"},
		{"no client", RWLock{key: "rw"}.Read(), "no client"},
	} {
		for name, take := range map[string]func(context.Context) (*Guard, error){"Lock": tc.lock.Lock, "TryLock": tc.lock.TryLock} {
			_, err := take(ctx)
			if !errors.Is(err, ErrInvalidArgument) || ErrorCode(err) != CodeInvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s, %s: %v, want invalid_argument naming %q", tc.name, name, err, tc.field)
			}
		}
	}
	if n := len(p.snapshot().acquireRecv); n != 0 {
		t.Fatalf("%d Acquires sent for locks refused before sending", n)
	}
}

// The builder puts a grant's kind on the wire; a lock leaves the request
// exactly as before kinds.
func TestPrimitiveRequests(t *testing.T) {
	c := dialPeer(t, "http://127.0.0.1:1")
	for _, tc := range []struct {
		name string
		lock Lock
		want *lockv1.AcquireRequest
	}{
		{"lock", c.Lock("k"), &lockv1.AcquireRequest{Key: "k"}},
		{"semaphore, default permits", c.Semaphore("k", 3), &lockv1.AcquireRequest{Key: "k", Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3, Permits: 1}},
		{"semaphore, 2 permits", c.Semaphore("k", 3).Permits(2), &lockv1.AcquireRequest{Key: "k", Kind: lockv1.Kind_KIND_SEMAPHORE, Limit: 3, Permits: 2}},
		{"reader", c.RWLock("k").Read(), &lockv1.AcquireRequest{Key: "k", Kind: lockv1.Kind_KIND_RWLOCK, Mode: lockv1.Mode_MODE_SHARED}},
		{"writer", c.RWLock("k").Write(), &lockv1.AcquireRequest{Key: "k", Kind: lockv1.Kind_KIND_RWLOCK, Mode: lockv1.Mode_MODE_EXCLUSIVE}},
	} {
		req := &lockv1.AcquireRequest{Key: "k"}
		tc.lock.fill(req)
		if !proto.Equal(req, tc.want) {
			t.Errorf("%s: request %v, want %v", tc.name, req, tc.want)
		}
		if tc.lock.Kind() != kindFromProto(tc.want.GetKind()) {
			t.Errorf("%s: Kind() %v", tc.name, tc.lock.Kind())
		}
	}
}

// A server older than kinds ignores them and grants a mutex: the SDK gives
// that lease back and answers unimplemented, so that nobody holds a mutex
// believing it a semaphore.
func TestPrimitiveOnAServerWithoutKinds(t *testing.T) {
	p, url := newFakePeer(t) // the fake peer knows nothing of kinds
	c := dialPeer(t, url)
	_, err := c.Semaphore("s", 3).TryLock(t.Context())
	if !errors.Is(err, ErrServer) || ErrorCode(err) != "unimplemented" || !strings.Contains(err.Error(), "asked for a semaphore") {
		t.Fatalf("semaphore from a server without kinds: %v, want unimplemented", err)
	}
	if n := p.snapshot().releases; n != 1 {
		t.Fatalf("%d releases: the mutex granted instead must be given back", n)
	}
	g, err := c.Lock("l").TryLock(t.Context())
	if err != nil || g.Kind() != KindMutex || g.Limit() != 1 || g.Permits() != 1 || g.Mode() != ModeExclusive {
		t.Fatalf("a lock from a server without kinds: %v %v", g, err)
	}
	if err := g.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Against the real server: a semaphore grants up to its limit, a waiter
// takes the permits a release frees, Inspect shows every grant, and a
// mismatch is failed_precondition.
func TestSemaphore(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx := t.Context()
	info, err := c.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Backend.Keeps(KindSemaphore) || info.Backend.MaxLimit < 3 {
		t.Fatalf("the memory backend says %+v: want semaphores", info.Backend)
	}
	sem := c.Semaphore("jobs", 3).TTL(time.Minute)
	one, err := sem.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if one.Kind() != KindSemaphore || one.Limit() != 3 || one.Permits() != 1 || one.Mode() != ModeExclusive {
		t.Fatalf("grant of 1: kind %v limit %d permits %d mode %v", one.Kind(), one.Limit(), one.Permits(), one.Mode())
	}
	two, err := sem.Permits(2).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t1, _ := one.FencingToken()
	t2, _ := two.FencingToken()
	if got := two.String(); !strings.Contains(got, "semaphore, 2 of 3 permits") || strings.Contains(got, two.owner) {
		t.Fatalf("String() = %q", got)
	}
	if two.Permits() != 2 || t2 <= t1 {
		t.Fatalf("grant of 2: permits %d, fencing token %d after %d", two.Permits(), t2, t1)
	}
	st, held := inspect(t, c, "jobs")
	if !held || st.Kind != KindSemaphore || st.Limit != 3 || st.PermitsInUse != 3 || len(st.Holders) != 2 ||
		st.Holders[0].FencingToken != t1 || st.Holders[1].FencingToken != t2 || st.Holders[1].Permits != 2 {
		t.Fatalf("Inspect: %+v", st)
	}
	var na *NotAcquiredError
	if _, err := sem.TryLock(ctx); !errors.As(err, &na) || na.Current == nil || na.Current.PermitsInUse != 3 ||
		!strings.Contains(err.Error(), "semaphore with 3 of 3 permits in use by 2 holders") {
		t.Fatalf("a permit of a full semaphore: %v, want not acquired with the key's state", err)
	}
	got := make(chan *Guard, 1)
	go func() {
		g, err := sem.Wait(10 * time.Second).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	awaitWaiters(t, c, "jobs", 1)
	if err := one.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	three := <-got
	if three == nil {
		t.FailNow()
	}
	if t3, err := three.FencingToken(); err != nil || t3 <= t2 {
		t.Fatalf("the waiter's grant: %d %v, want a token after %d", t3, err, t2)
	}
	if err := two.Err(); err != nil {
		t.Fatalf("the other grant after a release: %v", err)
	}

	for _, l := range []Lock{c.Semaphore("jobs", 4), c.Lock("jobs"), c.RWLock("jobs").Read()} {
		_, err := l.TryLock(ctx)
		if !errors.Is(err, ErrServer) || ErrorCode(err) != "failed_precondition" {
			t.Errorf("a %s of limit-3 semaphore jobs: %v, want failed_precondition", l.Kind(), err)
		}
	}
	for _, g := range []*Guard{two, three} {
		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Racing goroutines never hold more permits than the limit.
func TestSemaphoreRacers(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	ctx := t.Context()
	const limit, racers, rounds = 3, 8, 10
	var mu sync.Mutex
	inUse, peak := 0, 0
	var wg sync.WaitGroup
	for r := range racers {
		c := dialServer(t, s)
		wg.Go(func() {
			for i := range rounds {
				n := 1 + (r+i)%2
				g, err := c.Semaphore("race", limit).Permits(n).TTL(time.Minute).Wait(30 * time.Second).Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inUse += n
				peak = max(peak, inUse)
				if inUse > limit {
					t.Errorf("%d permits in use, limit %d", inUse, limit)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // the workload: let grants overlap
				mu.Lock()
				inUse -= n
				mu.Unlock()
				if err := g.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if peak < 2 {
		t.Fatalf("peak %d permits: the racers never shared the semaphore", peak)
	}
}

// Readers share, a writer holds alone, and a reader arriving behind a
// waiting writer waits for it.
func TestRWLock(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx := t.Context()
	rw := c.RWLock("cfg")
	r1, err := rw.Read().TTL(time.Minute).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.Read().TTL(time.Minute).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Kind() != KindRWLock || r1.Mode() != ModeShared || r1.Permits() != 1 {
		t.Fatalf("reader: kind %v mode %v permits %d", r1.Kind(), r1.Mode(), r1.Permits())
	}
	if _, err := rw.Write().TryLock(ctx); !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "read by 2 holders") {
		t.Fatalf("a writer beside readers: %v", err)
	}
	type result struct {
		g   *Guard
		err error
	}
	writer, reader := make(chan result, 1), make(chan result, 1)
	go func() {
		g, err := rw.Write().TTL(time.Minute).Wait(10 * time.Second).Lock(ctx)
		writer <- result{g, err}
	}()
	awaitWaiters(t, c, "cfg", 1)
	go func() {
		g, err := rw.Read().TTL(time.Minute).Wait(10 * time.Second).Lock(ctx)
		reader <- result{g, err}
	}()
	awaitWaiters(t, c, "cfg", 2)
	for _, g := range []*Guard{r1, r2} {
		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := <-writer
	if w.err != nil {
		t.Fatal(w.err)
	}
	if w.g.Mode() != ModeExclusive || w.g.Permits() != w.g.Limit() {
		t.Fatalf("writer: mode %v permits %d of %d", w.g.Mode(), w.g.Permits(), w.g.Limit())
	}
	// The reader stays queued behind the writer.
	awaitWaiters(t, c, "cfg", 1)
	if _, err := rw.Read().TryLock(ctx); !strings.Contains(fmt.Sprint(err), "written by") {
		t.Fatalf("a reader's try while a writer holds: %v", err)
	}
	select {
	case r := <-reader:
		t.Fatalf("a reader got the key beside a writer: %v %v", r.g, r.err)
	default:
	}
	if err := w.g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-reader
	if r.err != nil {
		t.Fatal(r.err)
	}
	wt, _ := w.g.FencingToken()
	if rt, _ := r.g.FencingToken(); rt <= wt {
		t.Fatalf("reader after writer: token %d, writer's %d", rt, wt)
	}
	if err := r.g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The watchdog renews a semaphore grant like any lease, and a grant
// released behind its guard's back is poisoned (rejected) while the key's
// other grant holds on.
func TestSemaphoreWatchdog(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	c := dialServer(t, s)
	ctx := t.Context()
	// Not 600ms: a renewal has about 2/3 of the TTL to be answered, and on
	// a loaded machine the server left one ExtendBatch unanswered for 380ms.
	const ttl = 1500 * time.Millisecond
	start := time.Now()
	kept, err := c.Semaphore("w", 2).TTL(ttl).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := c.Semaphore("w", 2).TTL(ttl).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Holding past the TTL, renewed twice, is the subject: the watchdog
	// must renew both. Polled, so a slow scheduler lengthens the wait.
	for deadline := start.Add(10 * ttl); time.Since(start) <= ttl || kept.Renewals() < 2 || lost.Renewals() < 2; time.Sleep(10 * time.Millisecond) {
		if kept.Err() != nil || lost.Err() != nil || time.Now().After(deadline) {
			t.Fatalf("after %s: renewals %d %d, errors %v %v", time.Since(start), kept.Renewals(), lost.Renewals(), kept.Err(), lost.Err())
		}
	}
	resp, err := c.rpc.Release(ctx, &lockv1.ReleaseRequest{Key: "w", OwnerToken: lost.owner})
	if err != nil || !resp.GetReleased() {
		t.Fatalf("release behind the guard: %v %v", resp, err)
	}
	waitDone(t, lost, ttl+slack)
	if l := lossOf(t, lost); l.Reason != LossRejected {
		t.Fatalf("loss %v, want rejected", l.Reason)
	}
	if err := kept.Err(); err != nil {
		t.Fatalf("the other grant: %v", err)
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// countCalls is an http.RoundTripper that counts the requests of each RPC.
type countCalls struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *countCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.calls[path.Base(r.URL.Path)]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countCalls) of(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[method]
}

// A client's semaphore and read-write lock grants go on its one watchdog
// with its locks: taken together, they are renewed together, a few
// ExtendBatch calls a period, not one Extend per grant.
func TestGrantsRenewedWithTheClientsOtherGuards(t *testing.T) {
	s := startServer(t, "127.0.0.1:0")
	counter := &countCalls{calls: map[string]int{}}
	c := dialServer(t, s, WithHTTPClient(&http.Client{Transport: counter}))
	ctx := t.Context()
	const ttl = 900 * time.Millisecond
	locks := []Lock{
		c.Lock("renew/lock"),
		c.Semaphore("renew/sem", 3), c.Semaphore("renew/sem", 3).Permits(2),
		c.RWLock("renew/rw").Read(), c.RWLock("renew/rw").Read(),
	}
	gs := make([]*Guard, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			g, err := l.TTL(ttl).TryLock(ctx)
			if err != nil {
				t.Error(err)
			}
			gs[i] = g
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	start := time.Now()
	for {
		least := gs[0].Renewals()
		for _, g := range gs {
			if err := g.Err(); err != nil {
				t.Fatalf("%v lost while renewals succeed: %v", g, err)
			}
			least = min(least, g.Renewals())
		}
		if least >= 2 {
			break
		}
		if time.Since(start) > 3*ttl {
			t.Fatalf("after %s the fewest renewals of a guard is %d, want 2", 3*ttl, least)
		}
		time.Sleep(10 * time.Millisecond) // poll the guards' renewals
	}
	periods := int(time.Since(start)/(ttl/3)) + 1
	calls := counter.of("Extend") + counter.of("ExtendBatch")
	// A watchdog per guard would make 5 calls a period.
	if calls > 2*periods || counter.of("ExtendBatch") == 0 {
		t.Fatalf("%d renewal calls (%d ExtendBatch) over %d periods for %d guards", calls, counter.of("ExtendBatch"), periods, len(gs))
	}
	for _, g := range gs {
		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
