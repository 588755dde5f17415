package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// holdFirst makes the fake hold the first call of op until released, and
// reports when it has started.
type holdFirst struct {
	op      string
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func newHoldFirst(op string) *holdFirst {
	return &holdFirst{op: op, started: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdFirst) before(op string, _ []string) {
	if op != h.op {
		return
	}
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.started)
		<-h.release
	}
}

func newBatchingEngine(t *testing.T, f *fakebackend.Batching, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(t.Context(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		f.Close()
	})
	return e
}

func acquireReq(key string) *lockv1.AcquireRequest {
	return &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)}
}

// callsOf counts the fake's calls of op and their sizes.
func callsOf(f *fakebackend.Batching, op string) []int {
	var sizes []int
	for _, c := range f.Calls() {
		if c.Op == op {
			sizes = append(sizes, len(c.Keys))
		}
	}
	return sizes
}

func TestAnIdleAcquireIsOneSingleCall(t *testing.T) {
	f := fakebackend.NewBatching()
	e := newBatchingEngine(t, f, engine.Config{})
	resp, err := e.Acquire(t.Context(), acquireReq("idle"))
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("Acquire = %v, %v", resp, err)
	}
	rel, err := e.Release(t.Context(), &lockv1.ReleaseRequest{Key: "idle", OwnerToken: resp.GetLease().GetOwnerToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("Release = %v, %v", rel, err)
	}
	got := f.Calls()
	if len(got) != 2 || got[0].Op != "Acquire" || got[1].Op != "Release" {
		t.Fatalf("backend calls = %+v, want one Acquire and one Release (no batch, no wait for company)", got)
	}
}

// Callers that arrive while a call of their kind is in flight are carried
// together in the next call, and each gets its own outcome.
func TestConcurrentAcquiresAndReleasesShareOneBackendCall(t *testing.T) {
	for _, op := range []string{"Acquire", "Release"} {
		t.Run(op, func(t *testing.T) {
			f := fakebackend.NewBatching()
			hold := newHoldFirst(op)
			e := newBatchingEngine(t, f, engine.Config{Batch: engine.BatchConfig{InFlight: 1}})
			ctx := t.Context()
			const n = 8
			// One key is held by someone else: its Acquire must fail on its
			// own while the batch's others succeed; one Release carries a
			// stale token and must answer false on its own.
			other, err := e.Acquire(ctx, acquireReq("k/busy"))
			if err != nil || !other.GetAcquired() {
				t.Fatal(other, err)
			}
			tokens := make([]string, n)
			if op == "Release" {
				for i := range n {
					resp, err := e.Acquire(ctx, acquireReq(fmt.Sprint("k/", i)))
					if err != nil || !resp.GetAcquired() {
						t.Fatal(resp, err)
					}
					tokens[i] = resp.GetLease().GetOwnerToken()
				}
				tokens[n-1] = "stale"
			}
			f.Before = hold.before // from now on: the setup's calls are not held
			do := func(i int) (bool, error) {
				key := fmt.Sprint("k/", i)
				if op == "Acquire" {
					if i == n-1 {
						key = "k/busy"
					}
					resp, err := e.Acquire(ctx, acquireReq(key))
					return resp.GetAcquired(), err
				}
				resp, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: tokens[i]})
				return resp.GetReleased(), err
			}
			var wg sync.WaitGroup
			won := make([]bool, n)
			errs := make([]error, n)
			wg.Go(func() { won[0], errs[0] = do(0) })
			<-hold.started // the first call is in flight: the others queue
			for i := 1; i < n; i++ {
				wg.Go(func() { won[i], errs[i] = do(i) })
			}
			eventually(t, "the others to queue", func() bool { return e.BatchQueued() == n-1 })
			close(hold.release)
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("caller %d: %v", i, errs[i])
				}
				if want := i != n-1; won[i] != want {
					t.Fatalf("caller %d: %s answered %v, want %v", i, op, won[i], want)
				}
			}
			if got := callsOf(f, op+"Batch"); len(got) != 1 || got[0] != n-1 {
				t.Fatalf("%sBatch calls = %v, want one carrying the %d callers that queued", op, got, n-1)
			}
		})
	}
}

// Racing acquirers of one key are never in one batch, and exactly one wins.
func TestAcquiresOfOneKeyAreNeverInOneBatch(t *testing.T) {
	f := fakebackend.NewBatching()
	hold := newHoldFirst("Acquire")
	f.Before = hold.before
	e := newBatchingEngine(t, f, engine.Config{Batch: engine.BatchConfig{InFlight: 1}})
	ctx := t.Context()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	try := func(key string) {
		wg.Go(func() {
			resp, err := e.Acquire(ctx, acquireReq(key))
			if err != nil {
				t.Error(err)
			}
			if resp.GetAcquired() && key == "same" {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	try("first")
	<-hold.started
	for range 5 {
		try("same")
	}
	try("else")
	eventually(t, "the racers to queue", func() bool { return e.BatchQueued() == 6 })
	close(hold.release)
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d racers won key same, want exactly 1", wins)
	}
	for _, c := range f.Calls() {
		n := strings.Count(strings.Join(c.Keys, ","), "same")
		if n > 1 {
			t.Fatalf("call %+v carried key same %d times", c, n)
		}
	}
}

func TestABackendThatCannotBatchGetsSingleCalls(t *testing.T) {
	f := fakebackend.NewBatching()
	f.Unsupported = true
	hold := newHoldFirst("Acquire")
	f.Before = hold.before
	e := newBatchingEngine(t, f, engine.Config{Batch: engine.BatchConfig{InFlight: 1}})
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			resp, err := e.Acquire(ctx, acquireReq(fmt.Sprint("u/", i)))
			if err != nil || !resp.GetAcquired() {
				t.Errorf("Acquire u/%d = %v, %v", i, resp, err)
			}
		})
		if i == 0 {
			<-hold.started
		}
	}
	eventually(t, "the others to queue", func() bool { return e.BatchQueued() == 3 })
	close(hold.release)
	wg.Wait()
	if got := callsOf(f, "Acquire"); len(got) != 4 {
		t.Fatalf("single Acquire calls = %v, want all 4 after the batch was refused", got)
	}
	// And later calls do not try to batch again.
	resp, err := e.Extend(ctx, &lockv1.ExtendRequest{Key: "u/0", OwnerToken: "x", Ttl: durationpb.New(time.Minute)})
	if err != nil || resp.GetExtended() {
		t.Fatalf("Extend(wrong token) = %v, %v", resp, err)
	}
}

func TestExtendBatch(t *testing.T) {
	f := fakebackend.NewBatching()
	f.ItemErr = func(key string) error {
		if key == "eb/unreachable" {
			return fmt.Errorf("%w: fake: that part of the store is down", backend.ErrUnavailable)
		}
		return nil
	}
	e := newBatchingEngine(t, f, engine.Config{})
	ctx := t.Context()
	tok := map[string]string{}
	for _, k := range []string{"eb/a", "eb/b", "eb/unreachable"} {
		resp, err := e.Acquire(ctx, &lockv1.AcquireRequest{Key: k, Ttl: durationpb.New(2 * time.Second)})
		if err != nil || !resp.GetAcquired() {
			t.Fatal(resp, err)
		}
		tok[k] = resp.GetLease().GetOwnerToken()
	}
	item := func(k, token string) *lockv1.ExtendBatchItem {
		return &lockv1.ExtendBatchItem{Key: k, OwnerToken: token, Ttl: durationpb.New(time.Minute)}
	}
	resp, err := e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{
		item("eb/a", tok["eb/a"]),
		item("eb/b", "stale"),
		item("eb/nobody", "x"),
		item("eb/b", tok["eb/b"]), // the same key again: answered on its own, after the first
		item("eb/unreachable", tok["eb/unreachable"]),
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.GetResults()
	if len(r) != 5 || resp.GetServerStamp() == nil {
		t.Fatalf("ExtendBatch = %v", resp)
	}
	if !r[0].GetExtended() || r[0].GetLease().GetOwnerToken() != tok["eb/a"] || r[0].GetLease().GetTtl().AsDuration() != time.Minute {
		t.Fatalf("held lease: %v", r[0])
	}
	if r[1].GetExtended() || r[1].GetError() != nil || r[2].GetExtended() || r[2].GetError() != nil {
		t.Fatalf("stale token, unknown key: %v, %v; want extended=false without an error", r[1], r[2])
	}
	if !r[3].GetExtended() {
		t.Fatalf("the second item of a repeated key: %v", r[3])
	}
	if r[4].GetExtended() || r[4].GetError().GetCode() != "unavailable" || !strings.Contains(r[4].GetError().GetMessage(), "down") {
		t.Fatalf("an item the backend could not decide: %v, want its own unavailable error", r[4])
	}
	// The renewals took: the 2s leases now last a minute.
	for _, k := range []string{"eb/a", "eb/b"} {
		ins, err := e.Inspect(ctx, &lockv1.InspectRequest{Key: k})
		if err != nil || time.Until(ins.GetState().GetExpiresAt().AsTime()) < 30*time.Second {
			t.Fatalf("Inspect %s after ExtendBatch = %v, %v", k, ins, err)
		}
	}
	// Two rounds: the repeated key went into a second backend call.
	if got := callsOf(f, "ExtendBatch"); len(got) != 2 || got[0] != 4 {
		t.Fatalf("ExtendBatch calls = %v, want [4 1]", got)
	}
}

// An ExtendBatch item carries its request id to the backend, with the
// fingerprint of a single-key Extend: a repeat of the item, in a batch or as
// an Extend, renews again and answers as the first did; the same id with
// another ttl is that item's request conflict.
func TestExtendBatchItemsCarryRequestIDs(t *testing.T) {
	e := newBatchingEngine(t, fakebackend.NewBatching(), engine.Config{})
	ctx := t.Context()
	resp, err := e.Acquire(ctx, acquireReq("eb/rid"))
	if err != nil || !resp.GetAcquired() {
		t.Fatal(resp, err)
	}
	tok := resp.GetLease().GetOwnerToken()
	const id = "renewal-0123456789abcdef"
	item := &lockv1.ExtendBatchItem{Key: "eb/rid", OwnerToken: tok, Ttl: durationpb.New(time.Minute), RequestId: id}
	for i := range 2 {
		r, err := e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{item}})
		if err != nil || !r.GetResults()[0].GetExtended() {
			t.Fatalf("ExtendBatch attempt %d = %v, %v", i, r, err)
		}
	}
	ext, err := e.Extend(ctx, &lockv1.ExtendRequest{Key: "eb/rid", OwnerToken: tok, Ttl: durationpb.New(time.Minute), RequestId: id})
	if err != nil || !ext.GetExtended() {
		t.Fatalf("the renewal retried as an Extend = %v, %v", ext, err)
	}
	other := &lockv1.ExtendBatchItem{Key: "eb/rid", OwnerToken: tok, Ttl: durationpb.New(2 * time.Minute), RequestId: id}
	r, err := e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{other}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetResults()[0]; got.GetExtended() || got.GetError().GetCode() != "invalid_argument" ||
		!strings.Contains(got.GetError().GetMessage(), "request_id: already used for another extend") {
		t.Fatalf("the same request id with another ttl = %v, want that item's invalid_argument", got)
	}
	short := &lockv1.ExtendBatchItem{Key: "eb/rid", OwnerToken: tok, Ttl: durationpb.New(time.Minute), RequestId: "short"}
	_, err = e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: []*lockv1.ExtendBatchItem{item, short}})
	if !errors.Is(err, engine.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "items[1].request_id: 5 bytes") {
		t.Fatalf("a malformed request id: %v, want invalid_argument naming items[1].request_id", err)
	}
}

func TestExtendBatchBadInput(t *testing.T) {
	e := newBatchingEngine(t, fakebackend.NewBatching(), engine.Config{})
	ctx := t.Context()
	ok := &lockv1.ExtendBatchItem{Key: "k", OwnerToken: "t", Ttl: durationpb.New(time.Minute)}
	many := make([]*lockv1.ExtendBatchItem, engine.MaxExtendBatchItems+1)
	for i := range many {
		many[i] = ok
	}
	for _, tc := range []struct {
		items []*lockv1.ExtendBatchItem
		want  string
	}{
		{nil, "items: at least one"},
		{many, "items: 1001 leases exceeds the maximum 1000"},
		{[]*lockv1.ExtendBatchItem{ok, {OwnerToken: "t", Ttl: durationpb.New(time.Minute)}}, "items[1].key: must not be empty"},
		{[]*lockv1.ExtendBatchItem{{Key: "k", Ttl: durationpb.New(time.Minute)}}, "items[0].owner_token: must not be empty"},
		{[]*lockv1.ExtendBatchItem{ok, ok, {Key: "k", OwnerToken: "t", Ttl: durationpb.New(48 * time.Hour)}}, "items[2].ttl: 48h exceeds the maximum 24h"},
		{[]*lockv1.ExtendBatchItem{{Key: "k", OwnerToken: "t"}}, "items[0].ttl: required"},
	} {
		_, err := e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: tc.items})
		if !errors.Is(err, engine.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("ExtendBatch(%d items) err = %v, want invalid argument %q", len(tc.items), err, tc.want)
		}
	}
}

// A caller whose context ends while it waits in the queue is never sent
// and answers at once.
func TestAQueuedReleaseThatGivesUpIsNotSent(t *testing.T) {
	f := fakebackend.NewBatching()
	hold := newHoldFirst("Release")
	f.Before = hold.before
	e := newBatchingEngine(t, f, engine.Config{Batch: engine.BatchConfig{InFlight: 1}})
	ctx := t.Context()
	a, _ := e.Acquire(ctx, acquireReq("g/a")) // not held: only the first Release is
	b, _ := e.Acquire(ctx, acquireReq("g/b"))
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = e.Release(ctx, &lockv1.ReleaseRequest{Key: "g/a", OwnerToken: a.GetLease().GetOwnerToken()})
	})
	<-hold.started
	qctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	wg.Go(func() {
		_, err := e.Release(qctx, &lockv1.ReleaseRequest{Key: "g/b", OwnerToken: b.GetLease().GetOwnerToken()})
		gaveUp <- err
	})
	eventually(t, "the release to queue", func() bool { return e.BatchQueued() == 1 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, engine.ErrCanceled) {
		t.Fatalf("Release cancelled while queued = %v, want canceled", err)
	}
	close(hold.release)
	wg.Wait()
	if ins, _ := e.Inspect(ctx, &lockv1.InspectRequest{Key: "g/b"}); !ins.GetHeld() {
		t.Fatal("a release whose caller gave up while it was queued was sent anyway")
	}
}

// trackedBatches counts the ExtendBatch calls in flight, holds the first
// wave's calls until held of them have started (or a deadline passes), and
// notes whether a call carrying repeat (a key's second item) overlapped
// another call.
type trackedBatches struct {
	*fakebackend.Batching
	held   int
	repeat string

	mu          sync.Mutex
	inFlight    int
	started     int
	allStarted  chan struct{}
	concurrent  bool // the held calls were all in flight at once
	overlapped  bool // the repeat's call ran beside another
	repeatCalls int
}

func (b *trackedBatches) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	b.mu.Lock()
	b.inFlight++
	b.started++
	first := b.started <= b.held
	if b.started == b.held {
		close(b.allStarted)
	}
	if len(reqs) == 1 && reqs[0].Key == b.repeat {
		b.repeatCalls++
		b.overlapped = b.overlapped || b.inFlight > 1
	}
	b.mu.Unlock()
	if first {
		select {
		case <-b.allStarted:
			b.mu.Lock()
			b.concurrent = true
			b.mu.Unlock()
		case <-time.After(10 * time.Second): // a deadline, so that calls sent one by one fail the test instead of hanging it
		}
	}
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	return b.Batching.ExtendBatch(ctx, reqs)
}

// An ExtendBatch larger than one backend batch goes to the backend in
// chunks sent at once, and a key that repeats is still decided after its
// earlier item: its second item is sent once the first wave has been
// answered, and its ttl (the later one) is the one that holds.
func TestExtendBatchChunksGoAtOnceAndKeepPerKeyOrder(t *testing.T) {
	const size, n = 100, 300
	f := &trackedBatches{Batching: fakebackend.NewBatching(), held: n / size, repeat: "ebc/000", allStarted: make(chan struct{})}
	e, err := engine.New(t.Context(), f, engine.Config{Batch: engine.BatchConfig{MaxItems: size}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		f.Close()
	})
	ctx := t.Context()
	items := make([]*lockv1.ExtendBatchItem, 0, n+1)
	for i := range n {
		key := fmt.Sprintf("ebc/%03d", i)
		resp, err := e.Acquire(ctx, acquireReq(key))
		if err != nil || !resp.GetAcquired() {
			t.Fatal(resp, err)
		}
		items = append(items, &lockv1.ExtendBatchItem{Key: key, OwnerToken: resp.GetLease().GetOwnerToken(), Ttl: durationpb.New(time.Hour)})
	}
	items = append(items, &lockv1.ExtendBatchItem{Key: f.repeat, OwnerToken: items[0].GetOwnerToken(), Ttl: durationpb.New(2 * time.Hour)})
	resp, err := e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults() {
		l := r.GetLease()
		if !r.GetExtended() || l.GetKey() != items[i].GetKey() || l.GetOwnerToken() != items[i].GetOwnerToken() ||
			l.GetTtl().AsDuration() != items[i].GetTtl().AsDuration() || l.GetFencingToken() == 0 || l.GetStamp() == nil ||
			time.Until(l.GetExpiresAt().AsTime()) < 59*time.Minute {
			t.Fatalf("result %d = %v, want item %v extended", i, r, items[i])
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.concurrent {
		t.Errorf("the %d chunks of %d distinct keys were not in flight at once", f.held, n)
	}
	if f.repeatCalls != 1 || f.overlapped {
		t.Errorf("the repeated key's second item: %d calls, overlapped another call: %v; want one call, after the others", f.repeatCalls, f.overlapped)
	}
	if got := callsOf(f.Batching, "ExtendBatch"); len(got) != 4 || got[0] != size || got[1] != size || got[2] != size || got[3] != 1 {
		t.Errorf("ExtendBatch calls = %v, want [100 100 100 1] (in any order within the first three)", got)
	}
	ins, err := e.Inspect(ctx, &lockv1.InspectRequest{Key: f.repeat})
	if err != nil || time.Until(ins.GetState().GetExpiresAt().AsTime()) < 90*time.Minute {
		t.Fatalf("Inspect %s = %v, %v; want the later item's 2h ttl to hold", f.repeat, ins, err)
	}
}
