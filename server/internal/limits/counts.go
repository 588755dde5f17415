package limits

import (
	"container/heap"
	"sync"
	"time"
)

// overLimit is a refusal: n already counted, against a caller's bound or
// (total) the server's.
type overLimit struct {
	n     int
	total bool
}

func (e *overLimit) Error() string { return "over the limit" }

// counter counts things in progress per caller and in total.
type counter struct {
	bound int // in total; 0: unbounded

	mu    sync.Mutex
	total int
	per   map[string]int // only callers with something in progress
}

func newCounter(bound int) *counter { return &counter{bound: bound, per: map[string]int{}} }

// add counts one more for id, unless that passes bound (id's; 0:
// unbounded) or the total's.
func (c *counter) add(id string, bound int) error { return c.addN(id, bound, 1) }

// addN counts n more for id, all or none.
func (c *counter) addN(id string, bound, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound > 0 && c.total+n > c.bound {
		return &overLimit{n: c.total, total: true}
	}
	if have := c.per[id]; bound > 0 && have+n > bound {
		return &overLimit{n: have}
	}
	c.total += n
	c.per[id] += n
	return nil
}

func (c *counter) remove(id string) { c.removeN(id, 1) }

func (c *counter) removeN(id string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total -= n
	if c.per[id] -= n; c.per[id] <= 0 {
		delete(c.per, id)
	}
}

// Total is the count over every caller.
func (c *counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// leases counts, per caller and in total, the leases granted through this
// server that are still held as far as it knows, and the Acquires in
// progress (reservations). A lease leaves when it is released or taken
// over through this server, or when its TTL runs out (a min-heap of
// expiries, pruned on every reservation).
type leases struct {
	mu      sync.Mutex
	counts  *counter
	byKey   map[string]*lease
	expires leaseHeap
}

type lease struct {
	key, caller string
	until       time.Time
	// due is the lease's place in the heap, never after until. A renewal
	// that moves until later leaves due where it was, so it costs no heap
	// work; prune, finding due passed but until not, moves due up to until
	// and sifts the lease once. A lease renewed every TTL/3 is then sifted
	// about once per TTL, not once per renewal.
	due   time.Time
	index int // in expires
}

func newLeases(bound int) *leases {
	return &leases{counts: newCounter(bound), byKey: map[string]*lease{}}
}

// reserve counts an Acquire of n keys in progress for id (its bound:
// bound).
func (l *leases) reserve(id string, bound, n int, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(now)
	return l.counts.addN(id, bound, n)
}

// unreserve ends a reservation of n keys whose Acquire did not win.
func (l *leases) unreserve(id string, n int) { l.counts.removeN(id, n) }

// granted turns id's reservation into the lease on key with owner token
// token, until until. A mutex's lease is counted by its key: one counted
// before is over, since the backend granted the key anew. A lease of a key
// of several leases (shared: a semaphore, an rwlock) is counted by its key
// and owner token, beside the key's other leases.
func (l *leases) granted(id, key, token string, shared bool, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := key
	if shared {
		slot = grantSlot(key, token)
	}
	if old := l.byKey[slot]; old != nil {
		l.drop(old)
	}
	ls := &lease{key: slot, caller: id, until: until, due: until}
	l.byKey[slot] = ls
	heap.Push(&l.expires, ls)
}

// grantSlot is where a lease of a key of several leases is counted.
func grantSlot(key, token string) string { return key + "\x00" + token }

// find is the counted lease on key with owner token token (a mutex's,
// counted by key, or one of several). l.mu must be held.
func (l *leases) find(key, token string) *lease {
	if ls := l.byKey[key]; ls != nil {
		return ls
	}
	return l.byKey[grantSlot(key, token)]
}

// released ends the lease on key with owner token token (only its owner
// token can release it).
func (l *leases) released(key, token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls := l.find(key, token); ls != nil {
		l.drop(ls)
	}
}

// renewal is one lease renewed: its key, owner token and new end.
type renewal struct {
	key, token string
	until      time.Time
}

// extendedAll moves the ends of renewed leases (of one answer) under one
// hold of the mutex: a watchdog's ExtendBatch answer renews hundreds.
func (l *leases) extendedAll(renewed []renewal) {
	if len(renewed) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range renewed {
		l.renew(r.key, r.token, r.until)
	}
}

// renew moves the end of the lease on key with owner token token: a later
// end costs no heap work (see lease.due); an earlier one (a shorter TTL)
// moves the lease up the heap at once. l.mu must be held.
func (l *leases) renew(key, token string, until time.Time) {
	ls := l.find(key, token)
	if ls == nil {
		return
	}
	ls.until = until
	if until.Before(ls.due) {
		ls.due = until
		heap.Fix(&l.expires, ls.index)
	}
}

// Total counts leases and reservations, after dropping expired leases.
func (l *leases) Total(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(now)
	return l.counts.Total()
}

// prune drops the leases whose TTL has run out. l.mu must be held.
func (l *leases) prune(now time.Time) {
	for len(l.expires) > 0 && !now.Before(l.expires[0].due) {
		if ls := l.expires[0]; now.Before(ls.until) {
			ls.due = ls.until // renewed since it was sifted: sift it once
			heap.Fix(&l.expires, 0)
			continue
		}
		l.drop(l.expires[0])
	}
}

// drop forgets ls. l.mu must be held.
func (l *leases) drop(ls *lease) {
	delete(l.byKey, ls.key)
	heap.Remove(&l.expires, ls.index)
	l.counts.remove(ls.caller)
}

// leaseHeap orders leases by due (container/heap).
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *leaseHeap) Push(x any) {
	ls := x.(*lease)
	ls.index = len(*h)
	*h = append(*h, ls)
}
func (h *leaseHeap) Pop() any {
	old := *h
	ls := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ls.index = -1
	return ls
}
