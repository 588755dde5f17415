package combine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Run that records its batches and can be held: a batch
// waits on gate (when set) before it answers, so tests decide when the
// batches in flight end.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	ctxs    []context.Context
	started chan struct{} // one send per batch started
	gate    chan struct{} // nil: answer at once
}

func newRecorder(gated bool) *recorder {
	r := &recorder{started: make(chan struct{}, 1024)}
	if gated {
		r.gate = make(chan struct{})
	}
	return r
}

func (r *recorder) run(ctx context.Context, reqs []string) []Result[string] {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(reqs))
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
	r.started <- struct{}{}
	if r.gate != nil {
		<-r.gate
	}
	out := make([]Result[string], len(reqs))
	for i, q := range reqs {
		if q == "fail" {
			out[i].Err = errors.New("failed: " + q)
			continue
		}
		out[i].Value = "answer " + q
	}
	return out
}

func (r *recorder) seen() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// keyOf: a request "k#n" has key k.
func keyOf(q string) string {
	k, _, _ := cutHash(q)
	return k
}

func cutHash(q string) (string, string, bool) {
	for i := range len(q) {
		if q[i] == '#' {
			return q[:i], q[i+1:], true
		}
	}
	return q, "", false
}

func waitStarted(t *testing.T, r *recorder, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("fewer than %d batches started: %v", n, r.seen())
		}
	}
}

// waitQueued polls until n calls are queued.
func waitQueued(t *testing.T, c *Combiner[string, string], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.queue)
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAloneGoesAtOnceWithTheCallersContext(t *testing.T) {
	r := newRecorder(false)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 8, MaxInFlight: 1})
	type ctxKey struct{}
	ctx := context.WithValue(t.Context(), ctxKey{}, "mine")
	for i := range 3 {
		got, err := c.Do(ctx, fmt.Sprint("k", i))
		if err != nil || got != fmt.Sprint("answer k", i) {
			t.Fatalf("Do = %q, %v", got, err)
		}
	}
	if b := r.seen(); len(b) != 3 {
		t.Fatalf("batches = %v, want three single calls", b)
	}
	for _, got := range r.ctxs {
		if got != ctx {
			t.Fatal("a call sent alone at once did not get its caller's own context")
		}
	}
}

func TestCallsArrivingDuringABatchGoInTheNextOne(t *testing.T) {
	r := newRecorder(true)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 8, MaxInFlight: 1})
	var wg sync.WaitGroup
	answers := make([]string, 6)
	do := func(i int) {
		wg.Go(func() {
			v, err := c.Do(t.Context(), fmt.Sprint("k", i))
			if err != nil {
				t.Errorf("Do(k%d): %v", i, err)
			}
			answers[i] = v
		})
	}
	do(0)
	waitStarted(t, r, 1) // k0 runs alone
	for i := 1; i < 6; i++ {
		do(i)
	}
	waitQueued(t, c, 5)
	r.gate <- struct{}{} // k0 ends; the five queued go together
	waitStarted(t, r, 1)
	r.gate <- struct{}{}
	wg.Wait()
	b := r.seen()
	if len(b) != 2 || len(b[0]) != 1 || len(b[1]) != 5 {
		t.Fatalf("batches = %v, want [k0] then the five that queued meanwhile", b)
	}
	for i, a := range answers {
		if a != fmt.Sprint("answer k", i) {
			t.Fatalf("caller %d got %q", i, a)
		}
	}
}

func TestABatchHoldsEachKeyOnceAndAtMostMaxBatch(t *testing.T) {
	r := newRecorder(true)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 3, MaxInFlight: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Do(t.Context(), "first") })
	waitStarted(t, r, 1)
	reqs := []string{"a#1", "a#2", "b#1", "c#1", "d#1", "a#3"}
	for _, q := range reqs {
		wg.Go(func() {
			if v, err := c.Do(t.Context(), q); err != nil || v != "answer "+q {
				t.Errorf("Do(%s) = %q, %v", q, v, err)
			}
		})
		waitQueued(t, c, slices.Index(reqs, q)+1) // arrival order is the order above
	}
	for range 4 { // "first", then three batches
		r.gate <- struct{}{}
		if len(r.seen()) < 4 {
			waitStarted(t, r, 1)
		}
	}
	wg.Wait()
	b := r.seen()[1:]
	want := [][]string{{"a#1", "b#1", "c#1"}, {"a#2", "d#1"}, {"a#3"}}
	if fmt.Sprint(b) != fmt.Sprint(want) {
		t.Fatalf("batches = %v, want %v (arrival order, each key once, at most 3)", b, want)
	}
}

func TestEachCallerGetsItsOwnResult(t *testing.T) {
	r := newRecorder(true)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 8, MaxInFlight: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Do(t.Context(), "first") })
	waitStarted(t, r, 1)
	errs := make(chan error, 2)
	for _, q := range []string{"ok", "fail"} {
		wg.Go(func() {
			v, err := c.Do(t.Context(), q)
			if q == "ok" && (err != nil || v != "answer ok") {
				t.Errorf("Do(ok) = %q, %v", v, err)
			}
			errs <- err
		})
	}
	waitQueued(t, c, 2)
	r.gate <- struct{}{}
	waitStarted(t, r, 1)
	r.gate <- struct{}{}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d callers failed, want only the one whose item failed", failed)
	}
}

func TestAQueuedCallerThatGivesUpIsNeverSent(t *testing.T) {
	r := newRecorder(true)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 8, MaxInFlight: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Do(t.Context(), "first") })
	waitStarted(t, r, 1)
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	wg.Go(func() {
		_, err := c.Do(ctx, "quitter")
		gaveUp <- err
	})
	waitQueued(t, c, 1)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do after its context ended = %v, want context.Canceled", err)
	}
	waitQueued(t, c, 0)
	r.gate <- struct{}{}
	wg.Wait()
	for _, b := range r.seen() {
		if slices.Contains(b, "quitter") {
			t.Fatalf("batches = %v: a caller that gave up while queued was sent", r.seen())
		}
	}
}

func TestALeaderThatGivesUpStillRunsItsBatch(t *testing.T) {
	r := newRecorder(true)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 8, MaxInFlight: 1})
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Do(t.Context(), "first") })
	waitStarted(t, r, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	leaderDone := make(chan struct{})
	wg.Go(func() {
		defer close(leaderDone)
		_, _ = c.Do(ctx, "leader")
	})
	waitQueued(t, c, 1)
	other := make(chan string, 1)
	wg.Go(func() {
		v, _ := c.Do(t.Context(), "other")
		other <- v
	})
	waitQueued(t, c, 2)
	r.gate <- struct{}{} // "leader" and "other" form the next batch, run by "leader"
	waitStarted(t, r, 1)
	cancel() // the leader's caller gives up while it runs the batch
	r.gate <- struct{}{}
	if v := <-other; v != "answer other" {
		t.Fatalf("the other caller of the batch got %q", v)
	}
	<-leaderDone
	wg.Wait()
	if ctx := r.ctxs[1]; ctx.Err() != nil {
		t.Fatal("a batch run for several callers got a cancellable context")
	}
}

func TestInFlightBound(t *testing.T) {
	r := newRecorder(true)
	c := New(Config[string, string]{Run: r.run, Key: keyOf, MaxBatch: 8, MaxInFlight: 2})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { _, _ = c.Do(t.Context(), fmt.Sprint("alone", i)) })
	}
	waitStarted(t, r, 2) // two slots: both went at once
	for i := range 3 {
		wg.Go(func() { _, _ = c.Do(t.Context(), fmt.Sprint("q", i)) })
	}
	waitQueued(t, c, 3)
	for range 3 {
		r.gate <- struct{}{}
	}
	wg.Wait()
	b := r.seen()
	if len(b) != 3 || len(b[2]) != 3 {
		t.Fatalf("batches = %v, want two alone and then the three queued together", b)
	}
}
