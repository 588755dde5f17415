package waitq

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func woken(w *Waiter) bool {
	select {
	case <-w.Wake():
		return true
	default:
		return false
	}
}

func TestFirstWaiterIsHeadAndWoken(t *testing.T) {
	q := New(0, 0)
	a, err := q.Join("k")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := q.Join("k")
	if !a.IsHead() || b.IsHead() {
		t.Fatalf("head: a=%v b=%v", a.IsHead(), b.IsHead())
	}
	if !woken(a) {
		t.Fatal("the first waiter should find its wake channel signalled")
	}
	if woken(b) {
		t.Fatal("a waiter behind the head must not be woken")
	}
	if got := q.Depth("k"); got != 2 {
		t.Fatalf("Depth = %d, want 2", got)
	}
	a.Leave()
	b.Leave()
}

func TestFIFOHandoff(t *testing.T) {
	q := New(0, 0)
	const n = 10
	ws := make([]*Waiter, n)
	for i := range ws {
		w, err := q.Join("k")
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	for i, w := range ws {
		if !w.IsHead() {
			t.Fatalf("waiter %d is not head after the ones before it left", i)
		}
		if !woken(w) {
			t.Fatalf("waiter %d was not woken when it became head", i)
		}
		for _, later := range ws[i+1:] {
			if woken(later) {
				t.Fatalf("a later waiter was woken while %d is head", i)
			}
		}
		w.Leave()
		w.Leave() // idempotent
	}
	if q.Depth("k") != 0 || q.Total() != 0 || len(q.keys) != 0 {
		t.Fatalf("queues not empty: depth=%d total=%d keys=%d", q.Depth("k"), q.Total(), len(q.keys))
	}
}

func TestMiddleLeaveDoesNotWake(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k")
	b, _ := q.Join("k")
	c, _ := q.Join("k")
	woken(a)
	b.Leave()
	if woken(c) {
		t.Fatal("c woken though the head did not change")
	}
	a.Leave()
	if !woken(c) {
		t.Fatal("c not woken when it became head")
	}
	c.Leave()
}

func TestWakeOnlyHeadAndCollapse(t *testing.T) {
	q := New(0, 0)
	if q.Wake("none") {
		t.Fatal("Wake of an empty key reported a head")
	}
	a, _ := q.Join("k")
	b, _ := q.Join("k")
	c, _ := q.Join("other")
	woken(a)
	woken(c)
	first, second := q.Wake("k"), q.Wake("k")
	if !first || !second {
		t.Fatal("Wake reported no head")
	}
	if !woken(a) || woken(a) {
		t.Fatal("several wake-ups must collapse into exactly one")
	}
	if woken(b) || woken(c) {
		t.Fatal("Wake woke the wrong waiter")
	}
	q.WakeAll()
	if !woken(a) || !woken(c) || woken(b) {
		t.Fatal("WakeAll must wake every head and only heads")
	}
	a.Leave()
	b.Leave()
	c.Leave()
}

func TestBounds(t *testing.T) {
	q := New(2, 3)
	a, _ := q.Join("k")
	b, _ := q.Join("k")
	if _, err := q.Join("k"); !errors.Is(err, ErrFull) {
		t.Fatalf("third waiter on k: err = %v, want ErrFull", err)
	}
	c, _ := q.Join("j")
	if _, err := q.Join("i"); !errors.Is(err, ErrFull) {
		t.Fatalf("fourth waiter in total: err = %v, want ErrFull", err)
	}
	a.Leave()
	d, err := q.Join("k")
	if err != nil {
		t.Fatalf("after a leave there is room again: %v", err)
	}
	for _, w := range []*Waiter{b, c, d} {
		w.Leave()
	}
}

func TestWonHoldsTheNextHeadUntilItsRelease(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k")
	b, _ := q.Join("k")
	defer b.Leave()
	woken(a)
	until := time.Now().Add(time.Minute)
	a.Won([]uint64{10}, "tok10", until)
	if !b.IsHead() || !woken(b) {
		t.Fatal("the next waiter should become head and be woken")
	}
	if got, held := b.HeldUntil(); !held || !got.Equal(until) {
		t.Fatalf("HeldUntil = %v %v, want %v true", got, held, until)
	}
	// The release of an older lock is old news.
	if q.WakeReleased("k", 9) || woken(b) {
		t.Fatal("the release of an earlier lock must not wake the head")
	}
	if _, held := b.HeldUntil(); !held {
		t.Fatal("an earlier lock's release must not end the won lock")
	}
	// The won lock's own release (or one whose token is unknown) wakes it.
	if !q.WakeReleased("k", 10) || !woken(b) {
		t.Fatal("the won lock's release should wake the head")
	}
	if _, held := b.HeldUntil(); held {
		t.Fatal("after its release the lock is no longer held")
	}
}

func TestWakeAndUnknownFenceEndWon(t *testing.T) {
	for name, release := range map[string]func(q *Queues){
		"local release":  func(q *Queues) { q.Released("k", "tok10") },
		"wake":           func(q *Queues) { q.Wake("k") },
		"unknown fence":  func(q *Queues) { q.WakeReleased("k", 0) },
		"backend resync": func(q *Queues) { q.WakeAll() },
	} {
		t.Run(name, func(t *testing.T) {
			q := New(0, 0)
			a, _ := q.Join("k")
			b, _ := q.Join("k")
			defer b.Leave()
			a.Won([]uint64{10}, "tok10", time.Now().Add(time.Minute))
			woken(b)
			release(q)
			if !woken(b) {
				t.Fatal("the head should be woken")
			}
			if _, held := b.HeldUntil(); held {
				t.Fatal("the lock should no longer be held")
			}
		})
	}
}

func TestWonWithoutOthersLeavesNothing(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k")
	a.Won([]uint64{10}, "tok10", time.Now().Add(time.Minute))
	b, _ := q.Join("k")
	defer b.Leave()
	if !woken(b) {
		t.Fatal("a waiter joining an empty queue is head and woken")
	}
	if _, held := b.HeldUntil(); held {
		t.Fatal("nothing should be remembered for a queue that emptied")
	}
}

func TestReleasedOfAnOlderLockIsOldNews(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k")
	b, _ := q.Join("k")
	defer b.Leave()
	a.Won([]uint64{10}, "tok10", time.Now().Add(time.Minute))
	woken(b)
	// The previous holder's release call returns after its release event
	// already handed the lock to a.
	if q.Released("k", "tok9") || woken(b) {
		t.Fatal("the release of the lock before the won one must not wake the head")
	}
	if !q.Released("k", "tok10") || !woken(b) {
		t.Fatal("the won lock's release should wake the head")
	}
}

// A repeat marked by SetRecheck is woken by the key's acquisitions though
// it is not the head; unmarked waiters, the head and other keys' waiters
// are not, and a waiter that leaves or is unmarked stops counting.
func TestWakeAcquiredWakesOnlyMarkedRepeats(t *testing.T) {
	q := New(0, 0)
	head, _ := q.Join("k")
	plain, _ := q.Join("k")
	repeat, _ := q.Join("k")
	set, _ := q.JoinSet([]string{"k", "j"})
	other, _ := q.Join("j")
	woken(head)
	repeat.SetRecheck(true)
	set.SetRecheck(true)
	q.WakeAcquired("k")
	if woken(head) || woken(plain) || woken(other) {
		t.Fatal("WakeAcquired woke a waiter that is not a marked repeat")
	}
	if !woken(repeat) || !woken(set) {
		t.Fatal("WakeAcquired did not wake the marked repeats behind the head")
	}
	q.WakeAcquired("j") // set is not behind anyone in j, but is in k: not head
	if !woken(set) || woken(other) {
		t.Fatal("WakeAcquired of j: want the marked set waiter only")
	}
	repeat.SetRecheck(false)
	set.Leave()
	if got := q.rechecks["k"] + q.rechecks["j"]; got != 0 {
		t.Fatalf("marked waiters left counted: %d", got)
	}
	q.WakeAcquired("k")
	if woken(repeat) {
		t.Fatal("an unmarked waiter was woken by an acquisition")
	}
	head.Leave()
	plain.Leave()
	repeat.Leave()
	other.Leave()
}

// Depths answers as Depth does for each key, in the keys' order, for keys
// with and without queues, and for a set's waiter in each of its keys.
func TestDepthsMatchDepth(t *testing.T) {
	q := New(0, 0)
	keys := []string{"a", "none", "b", "c", "a"}
	if got := q.Depths(keys); len(got) != len(keys) || got[0] != 0 || got[2] != 0 {
		t.Fatalf("Depths on empty queues = %v, want %d zeros", got, len(keys))
	}
	var ws []*Waiter
	join := func(keys ...string) {
		w, err := q.JoinSet(keys)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	join("a")
	join("a")
	join("b", "c")
	join("c")
	got := q.Depths(keys)
	for i, k := range keys {
		if got[i] != q.Depth(k) {
			t.Fatalf("Depths(%q)[%d] = %d, Depth(%q) = %d", keys, i, got[i], k, q.Depth(k))
		}
	}
	if want := []int{2, 0, 1, 2, 2}; !slices.Equal(got, want) {
		t.Fatalf("Depths(%q) = %v, want %v", keys, got, want)
	}
	for _, w := range ws {
		w.Leave()
	}
	if got := q.Depths(keys); slices.ContainsFunc(got, func(n int) bool { return n != 0 }) {
		t.Fatalf("Depths after every waiter left = %v", got)
	}
}
