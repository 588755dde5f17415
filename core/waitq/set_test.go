package waitq

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// A set waiter is the head only at the front of every one of its queues,
// and is woken when the last waiter ahead of it leaves.
func TestSetWaiterIsHeadOfAllItsQueues(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k1")
	s, err := q.JoinSet([]string{"k1", "k2"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := q.Join("k2")
	if s.IsHead() {
		t.Fatal("the set waiter is head while a waiter for k1 is ahead of it")
	}
	if woken(s) {
		t.Fatal("the set waiter was woken behind another waiter")
	}
	if b.IsHead() {
		t.Fatal("b, behind the set waiter in k2's queue, is head")
	}
	if got := q.Depth("k2"); got != 2 {
		t.Fatalf("Depth(k2) = %d, want 2", got)
	}
	if got := q.Total(); got != 4 {
		t.Fatalf("Total = %d, want 4 (the set counts once per key)", got)
	}
	a.Leave()
	if !s.IsHead() || !woken(s) {
		t.Fatal("the set waiter was not made head and woken when a left")
	}
	s.Leave()
	if !b.IsHead() || !woken(b) {
		t.Fatal("b was not made head and woken when the set waiter left")
	}
	b.Leave()
	if q.Total() != 0 || q.Depth("k1") != 0 || q.Depth("k2") != 0 {
		t.Fatalf("queues not empty after everyone left: total %d", q.Total())
	}
}

// Leaving the front of one queue does not wake a set waiter that is still
// behind someone in another.
func TestSetWaiterNotWokenWhileBehindInAnotherQueue(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k1")
	b, _ := q.Join("k2")
	s, _ := q.JoinSet([]string{"k1", "k2"})
	a.Leave()
	if s.IsHead() || woken(s) {
		t.Fatal("woken or head while b is still ahead in k2's queue")
	}
	b.Leave()
	if !s.IsHead() || !woken(s) {
		t.Fatal("not head and woken once both were gone")
	}
	s.Leave()
}

// A set that cannot join (a full queue) joins none of its queues.
func TestSetJoinIsAllOrNothing(t *testing.T) {
	q := New(1, 0)
	a, _ := q.Join("k2")
	if _, err := q.JoinSet([]string{"k1", "k2"}); err == nil {
		t.Fatal("a set over the per-key bound joined")
	}
	if q.Depth("k1") != 0 || q.Total() != 1 {
		t.Fatalf("a refused set left entries: depth(k1)=%d total=%d", q.Depth("k1"), q.Total())
	}
	a.Leave()
	q = New(0, 3)
	s, _ := q.JoinSet([]string{"a", "b"})
	if _, err := q.JoinSet([]string{"c", "d"}); err == nil {
		t.Fatal("a set over the total bound joined")
	}
	s.Leave()
}

// Won by a set holds the next head of each of its keys until that key's
// release is seen.
func TestSetWonHoldsEachKey(t *testing.T) {
	q := New(0, 0)
	s, _ := q.JoinSet([]string{"k1", "k2"})
	b, _ := q.Join("k2")
	until := time.Now().Add(time.Minute)
	s.Won([]uint64{5, 6}, "tok", until)
	if got, held := b.HeldUntil(); !held || !got.Equal(until) {
		t.Fatalf("HeldUntil = %v %v, want %v", got, held, until)
	}
	if q.WakeReleased("k2", 5) {
		t.Fatal("an older lock's release (fence 5 < 6) woke b")
	}
	if !q.Released("k2", "tok") {
		t.Fatal("the set's release of k2 did not wake b")
	}
	if _, held := b.HeldUntil(); held {
		t.Fatal("still held after the release was seen")
	}
	b.Leave()
}

// The property the engine relies on: with waiters for random overlapping
// sets joining and leaving in any order, the earliest waiter still queued
// is always the head of all its queues (nobody waits for a later arrival),
// so some waiter can always go: no deadlock, and every waiter eventually
// heads its queues (no starvation).
func TestRandomOverlappingSetsNeverDeadlock(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		q := New(0, 0)
		keys := []string{"a", "b", "c", "d", "e"}
		type queued struct {
			w   *Waiter
			seq int
		}
		var live []queued
		seq := 0
		served := 0
		for step := 0; step < 300; step++ {
			if len(live) == 0 || (r.IntN(2) == 0 && len(live) < 20) {
				n := 1 + r.IntN(3)
				set := slices.Clone(keys)
				r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:n]
				slices.Sort(set)
				w, err := q.JoinSet(set)
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, queued{w, seq})
				seq++
				continue
			}
			// The earliest arrival is the head of all its queues.
			if !live[0].w.IsHead() {
				t.Fatalf("seed %d step %d: the earliest waiter (%v) is not the head", seed, step, live[0].w.Keys())
			}
			// Serve a head (any head: sets with disjoint keys go
			// together), or let a random waiter give up.
			i := r.IntN(len(live))
			if r.IntN(3) > 0 {
				var heads []int
				for j, l := range live {
					if l.w.IsHead() {
						heads = append(heads, j)
					}
				}
				i = heads[r.IntN(len(heads))]
				served++
			}
			// Heads never share a key: two waiters heading one queue at
			// once would both try it.
			seen := map[string]int{}
			for _, l := range live {
				if l.w.IsHead() {
					for _, k := range l.w.Keys() {
						if prev, ok := seen[k]; ok {
							t.Fatalf("seed %d: waiters %d and %d both head %q", seed, prev, l.seq, k)
						}
						seen[k] = l.seq
					}
				}
			}
			live[i].w.Leave()
			live = slices.Delete(live, i, i+1)
		}
		for _, l := range live {
			l.w.Leave()
		}
		if q.Total() != 0 {
			t.Fatalf("seed %d: %d entries left after everyone left", seed, q.Total())
		}
		if served == 0 {
			t.Fatalf("seed %d served nobody", seed)
		}
	}
}

// A lock won for a request does not hold up a later waiter of the same
// request (a repeat), only the others.
func TestWonForTheSameRequestDoesNotHold(t *testing.T) {
	q := New(0, 0)
	a, _ := q.Join("k")
	a.SetRequest("r1")
	same, _ := q.Join("k")
	same.SetRequest("r1")
	other, _ := q.Join("k")
	other.SetRequest("r2")
	a.Won([]uint64{1}, "tok", time.Now().Add(time.Minute))
	if _, held := same.HeldUntil(); held {
		t.Fatal("a repeat of the winning request waits for its own lease")
	}
	same.Leave()
	if _, held := other.HeldUntil(); !held {
		t.Fatal("another request does not wait for the won lease")
	}
	other.Leave()
}
