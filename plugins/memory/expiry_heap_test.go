package memory

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The expiry heap under a random mix of pushes, dues moved either way
// (fix) and removals from anywhere keeps its order, every entry's index
// and every slot's copy of its entry's due; and popping by remove(0)
// yields the entries in due order.
func TestExpiryHeapKeepsOrderAndIndexes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	at := func() time.Time { return base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond) }
	var h expiryHeap
	var live []*entry
	check := func(step int) {
		t.Helper()
		for i, s := range h {
			if s.e.index != i || !s.due.Equal(s.e.due) {
				t.Fatalf("step %d: slot %d holds index %d, due %s for the entry's %s", step, i, s.e.index, s.due, s.e.due)
			}
			if i > 0 && h[i].due.Before(h[(i-1)/heapArity].due) {
				t.Fatalf("step %d: slot %d is due before its parent", step, i)
			}
		}
		if len(h) != len(live) {
			t.Fatalf("step %d: %d slots for %d entries", step, len(h), len(live))
		}
	}
	for step := range 5000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(live) == 0:
			e := &entry{due: at()}
			h.push(e)
			live = append(live, e)
		case op < 8:
			e := live[rng.IntN(len(live))]
			e.due = at()
			h.fix(e.index)
		default:
			k := rng.IntN(len(live))
			e := live[k]
			h.remove(e.index)
			if e.index != -1 {
				t.Fatalf("step %d: a removed entry keeps index %d", step, e.index)
			}
			live = slices.Delete(live, k, k+1)
		}
		check(step)
	}
	var popped []time.Time
	for len(h) > 0 {
		popped = append(popped, h[0].e.due)
		h.remove(0)
	}
	if !slices.IsSortedFunc(popped, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Fatal("the entries did not come off the heap in due order")
	}
	if len(popped) != len(live) {
		t.Fatalf("%d entries came off the heap, %d were in it", len(popped), len(live))
	}
}
