package turns

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ended is a context that has already ended.
func ended() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func take(t *testing.T, tu *Turns) func() {
	t.Helper()
	release, err := tu.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return release
}

func TestForProcessorsLeavesOneProcessor(t *testing.T) {
	if got, want := cap(ForProcessors().slots), max(runtime.GOMAXPROCS(0)-1, 1); got != want {
		t.Fatalf("ForProcessors gives %d turns, want %d (GOMAXPROCS %d)", got, want, runtime.GOMAXPROCS(0))
	}
	if got := cap(New(0, time.Hour).slots); got != 1 {
		t.Fatalf("New(0) gives %d turns, want 1", got)
	}
}

func TestAtMostNAtOnce(t *testing.T) {
	tu := New(2, time.Hour)
	a, b := take(t, tu), take(t, tu)
	if _, err := tu.Take(ended()); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third turn of two: %v, want context.Canceled", err)
	}
	a()
	c := take(t, tu) // a's turn, given back
	b()
	c()
}

func TestWaiterGetsTheTurnGivenBack(t *testing.T) {
	tu := New(1, time.Hour)
	release := take(t, tu)
	got := make(chan func())
	go func() {
		r, err := tu.Take(context.Background())
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- r
	}()
	release()
	if r := <-got; r != nil {
		r()
	}
}

func TestReleaseTwiceGivesBackOneTurn(t *testing.T) {
	tu := New(2, time.Hour)
	a, b := take(t, tu), take(t, tu)
	a()
	a() // must not give back b's turn
	c := take(t, tu)
	if _, err := tu.Take(ended()); err == nil {
		t.Fatal("a second release of one turn freed another")
	}
	b()
	c()
}

// A request that keeps its turn longer than the hold (a slow reader) gives
// it back anyway: the others wait at most the hold.
func TestTurnGoesBackAfterTheHold(t *testing.T) {
	const hold = 20 * time.Millisecond
	tu := New(1, hold)
	start := time.Now()
	kept := take(t, tu)
	defer kept()
	next := take(t, tu) // blocks until the hold is over
	if waited := time.Since(start); waited < hold {
		t.Fatalf("second turn after %s, before the first's hold of %s ended", waited, hold)
	}
	next()
	kept() // after the hold: gives back nothing more
	if _, err := tu.Take(ended()); err != nil {
		t.Fatalf("a turn after both were given back: %v", err)
	}
}

// A paced turn given back rests for as long as it was held (Rest 1)
// before the next request can take it: a client listing in a loop has
// its turn at most half the time.
func TestPacedTurnRestsAsLongAsItWasHeld(t *testing.T) {
	const work = 20 * time.Millisecond
	tu := Paced(1, time.Hour, 1)
	release := take(t, tu)
	time.Sleep(work) // the request's work, holding the turn
	released := time.Now()
	release()
	next := take(t, tu)
	defer next()
	if waited := time.Since(released); waited < work {
		t.Fatalf("the turn was taken again %s after it was given back, before resting the %s it was held", waited, work)
	}
}

func TestForProcessorsIsPaced(t *testing.T) {
	if tu := ForProcessors(); tu.rest != Rest || tu.hold != MaxHold {
		t.Fatalf("ForProcessors rests %v and holds %s, want %v and %s", tu.rest, tu.hold, Rest, MaxHold)
	}
}

func TestHandlerServesInTurns(t *testing.T) {
	tu := New(1, time.Hour)
	served := 0
	h := tu.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served++
		if _, err := tu.Take(ended()); err == nil {
			t.Error("the request ran without holding the turn")
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || served != 1 {
		t.Fatalf("status %d, served %d", rec.Code, served)
	}
	// The turn went back with the answer.
	take(t, tu)()

	// A request that ends while it waits is not served.
	release := take(t, tu)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil).WithContext(ended()))
	release()
	if rec.Code != http.StatusServiceUnavailable || served != 1 {
		t.Fatalf("a request that ended waiting: status %d, served %d", rec.Code, served)
	}
}
