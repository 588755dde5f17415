package limits

import (
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
//
// A server may count hundreds of thousands of leases, so their records
// hold no pointers (see slotTable): a lease is an id in slots, its record
// at that index of recs, its caller an index in callers, its times
// nanoseconds since epoch on the monotonic clock.
type leases struct {
	mu      sync.Mutex
	counts  *counter
	epoch   time.Time
	slots   *slotTable
	recs    []lease // by slot id
	callers interned
	expires []int32 // slot ids, a min-heap by due
}

type lease struct {
	until int64 // since epoch
	// due is the lease's place in the heap, never after until. A renewal
	// that moves until later leaves due where it was, so it costs no heap
	// work; prune, finding due passed but until not, moves due up to until
	// and sifts the lease once. A lease renewed every TTL/3 is then sifted
	// about once per TTL, not once per renewal.
	due    int64
	caller int32 // in callers
	index  int32 // in expires
}

func newLeases(bound int) *leases {
	return &leases{counts: newCounter(bound), epoch: time.Now(), slots: newSlotTable(), callers: interned{ids: map[string]int32{}}}
}

// since is t as the leases keep it.
func (l *leases) since(t time.Time) int64 { return int64(t.Sub(l.epoch)) }

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
	s := slot{key: key, token: token, shared: shared}
	if old, ok := l.slots.find(s); ok {
		l.drop(old)
	}
	sid := l.slots.add(s)
	if int(sid) == len(l.recs) {
		l.recs = append(l.recs, lease{})
	}
	end := l.since(until)
	l.recs[sid] = lease{until: end, due: end, caller: l.callers.hold(id), index: int32(len(l.expires))}
	l.expires = append(l.expires, sid)
	l.up(len(l.expires) - 1)
}

// find is the counted lease on key with owner token token (a mutex's,
// counted by key, or one of several). l.mu must be held.
func (l *leases) find(key, token string) (int32, bool) {
	if sid, ok := l.slots.find(slot{key: key}); ok {
		return sid, true
	}
	return l.slots.find(slot{key: key, token: token, shared: true})
}

// released ends the lease on key with owner token token (only its owner
// token can release it).
func (l *leases) released(key, token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sid, ok := l.find(key, token); ok {
		l.drop(sid)
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
	sid, ok := l.find(key, token)
	if !ok {
		return
	}
	ls := &l.recs[sid]
	ls.until = l.since(until)
	if ls.until < ls.due {
		ls.due = ls.until
		l.up(int(ls.index))
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
	at := l.since(now)
	for len(l.expires) > 0 {
		sid := l.expires[0]
		ls := &l.recs[sid]
		if at < ls.due {
			return
		}
		if at < ls.until {
			ls.due = ls.until // renewed since it was sifted: sift it once
			l.down(0)
			continue
		}
		l.drop(sid)
	}
}

// drop forgets the lease of slot sid. l.mu must be held.
func (l *leases) drop(sid int32) {
	ls := l.recs[sid]
	l.counts.remove(l.callers.name(ls.caller))
	l.callers.release(ls.caller)
	l.slots.remove(sid)
	// Take it out of the heap: the last lease takes its place and is
	// sifted whichever way it must go.
	last := len(l.expires) - 1
	if i := int(ls.index); i != last {
		l.swap(i, last)
		l.expires = l.expires[:last]
		l.down(i)
		l.up(i)
	} else {
		l.expires = l.expires[:last]
	}
}

// The heap of expires, by due (container/heap's algorithm, without its
// interface: a Push through it would box every id).

func (l *leases) less(i, j int) bool { return l.recs[l.expires[i]].due < l.recs[l.expires[j]].due }

func (l *leases) swap(i, j int) {
	h := l.expires
	h[i], h[j] = h[j], h[i]
	l.recs[h[i]].index = int32(i)
	l.recs[h[j]].index = int32(j)
}

func (l *leases) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !l.less(j, i) {
			return
		}
		l.swap(i, j)
		j = i
	}
}

func (l *leases) down(i int) {
	n := len(l.expires)
	for {
		j := 2*i + 1
		if j >= n {
			return
		}
		if r := j + 1; r < n && l.less(r, j) {
			j = r
		}
		if !l.less(j, i) {
			return
		}
		l.swap(i, j)
		i = j
	}
}

// interned gives each caller with counted leases a small index, held by
// its leases: a lease record keeps the index, not the caller's name.
type interned struct {
	ids   map[string]int32
	names []string
	held  []int // leases holding each index
	free  []int32
}

// hold is id's index, held once more.
func (c *interned) hold(id string) int32 {
	n, ok := c.ids[id]
	if !ok {
		if k := len(c.free); k > 0 {
			n = c.free[k-1]
			c.free = c.free[:k-1]
			c.names[n] = id
		} else {
			n = int32(len(c.names))
			c.names = append(c.names, id)
			c.held = append(c.held, 0)
		}
		c.ids[id] = n
	}
	c.held[n]++
	return n
}

func (c *interned) name(n int32) string { return c.names[n] }

// release lets go of one hold of n; n is free once no lease holds it.
func (c *interned) release(n int32) {
	if c.held[n]--; c.held[n] > 0 {
		return
	}
	delete(c.ids, c.names[n])
	c.names[n] = ""
	c.free = append(c.free, n)
}
