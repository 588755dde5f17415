// Package waitq keeps the server's per-key FIFO queues of Acquire callers
// that chose to wait.
//
// Only the head of a key's queue tries to take the lock; the others sleep.
// The head is woken by events (the engine calls Wake when a release or an
// expiry of the key is seen, WakeAll after a backend resync), never by a
// fixed polling interval. A waiter that gives up leaves at once: if it was
// the head, the next waiter becomes head and is woken, so a dead waiter can
// never block the queue (the failure mode of fair locks in redisson#2596).
//
// Queues are bounded per key and in total, so waiters cannot grow memory
// without bound; Join answers ErrFull over a bound.
//
// # Sets of keys
//
// A waiter for several keys (JoinSet) stands in the queue of every one of
// them, and is the head only when it is at the front of all of them. It
// joins all of them in one step, under the one mutex, so that two waiters
// stand in the same order, their order of arrival, in every queue they
// share. That order is total and every waiter waits only for waiters that
// arrived before it: the earliest waiter still waiting is at the front of
// all of its queues, so overlapping sets never deadlock, and a waiter is
// passed by nobody who came later, so nobody starves. A single-key waiter is
// a set of one.
package waitq

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrFull is returned (wrapped) by Join when a bound is reached.
var ErrFull = errors.New("waitq: too many waiters")

// Defaults used when a bound given to New is zero or negative.
const (
	DefaultMaxPerKey = 1024
	DefaultMaxTotal  = 65536
)

// Queues holds one FIFO queue per key. It is safe for concurrent use. The
// zero value is not usable; call New.
type Queues struct {
	maxPerKey int
	maxTotal  int

	mu    sync.Mutex
	keys  map[string]*list.List // of *Waiter; a key is absent when empty
	total int
	// rechecks: per key, its waiters marked by SetRecheck.
	rechecks map[string]int
	// won: per key with waiters, the lock a waiter of the queue won last
	// and whose release has not been seen yet (see Won); dropped with the
	// key's queue.
	won map[string]wonLock
}

// wonLock is a lock a waiter won: its fencing token, and the instant (on
// this process's monotonic clock) by which it has expired unless extended.
type wonLock struct {
	fence   uint64
	token   string
	request string // the winner's request id (see Waiter.SetRequest)
	until   time.Time
}

// New returns empty queues bounded to maxPerKey waiters per key and maxTotal
// waiters in all (<= 0 means the defaults).
func New(maxPerKey, maxTotal int) *Queues {
	if maxPerKey <= 0 {
		maxPerKey = DefaultMaxPerKey
	}
	if maxTotal <= 0 {
		maxTotal = DefaultMaxTotal
	}
	return &Queues{maxPerKey: maxPerKey, maxTotal: maxTotal, keys: make(map[string]*list.List), won: make(map[string]wonLock), rechecks: make(map[string]int)}
}

// MaxPerKey is the bound on waiters per key.
func (q *Queues) MaxPerKey() int { return q.maxPerKey }

// Waiter is one caller's place in the queue of each of its keys.
type Waiter struct {
	q     *Queues
	keys  []string
	elems []*list.Element // one per key; nil once left
	// wake has room for one signal, so a wake-up sent while the waiter is
	// busy (trying the backend) is kept, never lost, and several wake-ups
	// collapse into one.
	wake chan struct{}
	// request is the id of the request the waiter waits for (empty:
	// none); set before the waiter's first Won or HeldUntil.
	request string
	// recheck: see SetRecheck; guarded by q.mu.
	recheck bool
}

// SetRequest names the (retry-safe) request w waits for. A lock won by a
// waiter of the same request is no reason for w to wait (HeldUntil): it is
// the lease w asks for, and the backend answers w with it. Call it right
// after joining, before w's first HeldUntil or Won.
func (w *Waiter) SetRequest(id string) { w.request = id }

// SetRecheck marks w (on) as a repeat whose request's lease may land while
// it waits, or unmarks it: WakeAcquired wakes a marked waiter even when it
// is not the head. Mark it before asking the backend, so that an
// acquisition seen during the call still wakes it afterwards.
func (w *Waiter) SetRecheck(on bool) {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	w.setRecheckLocked(on)
}

func (w *Waiter) setRecheckLocked(on bool) {
	if w.recheck == on {
		return
	}
	w.recheck = on
	d := -1
	if on {
		d = 1
	}
	for i, key := range w.keys {
		if w.elems[i] == nil {
			continue
		}
		if q := w.q; q.rechecks[key]+d == 0 {
			delete(q.rechecks, key)
		} else {
			q.rechecks[key] += d
		}
	}
}

// Join appends a waiter for key at the tail of its queue. A waiter that
// joins an empty queue is the head and finds its wake channel already
// signalled, so it tries at once. The caller must call Leave exactly once.
func (q *Queues) Join(key string) (*Waiter, error) { return q.JoinSet([]string{key}) }

// JoinSet appends one waiter at the tail of the queue of every key in keys
// (distinct), in one step (see the package doc). It is the head once it is
// at the front of every one of those queues; a waiter that joins as the
// head finds its wake channel signalled. Each key counts as one waiter
// towards the bounds. The caller must call Leave exactly once.
func (q *Queues) JoinSet(keys []string) (*Waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, key := range keys {
		if n := q.depth(key); n >= q.maxPerKey {
			return nil, fmt.Errorf("%w: %d waiters already queued for key %q (the maximum per key)", ErrFull, n, key)
		}
	}
	if q.total+len(keys) > q.maxTotal {
		return nil, fmt.Errorf("%w: %d waiters already queued on this server (the maximum is %d)", ErrFull, q.total, q.maxTotal)
	}
	w := &Waiter{q: q, keys: keys, elems: make([]*list.Element, len(keys)), wake: make(chan struct{}, 1)}
	for i, key := range keys {
		l := q.keys[key]
		if l == nil {
			l = list.New()
			q.keys[key] = l
		}
		w.elems[i] = l.PushBack(w)
	}
	q.total += len(keys)
	if w.isHeadLocked() {
		w.signal()
	}
	return w, nil
}

// depth is the length of key's queue. q.mu must be held.
func (q *Queues) depth(key string) int {
	if l := q.keys[key]; l != nil {
		return l.Len()
	}
	return 0
}

// Key is the (first) key the waiter queues for.
func (w *Waiter) Key() string { return w.keys[0] }

// Keys are the keys the waiter queues for.
func (w *Waiter) Keys() []string { return w.keys }

// Wake receives a value when the waiter should look at the lock again. Only
// the head is woken.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// IsHead reports whether w is at the front of every one of its queues.
func (w *Waiter) IsHead() bool {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.isHeadLocked()
}

func (w *Waiter) isHeadLocked() bool {
	for _, e := range w.elems {
		if e == nil || e.Prev() != nil {
			return false
		}
	}
	return true
}

// front reports whether w is at the front of key's queue. q.mu must be held.
func (q *Queues) front(key string) *Waiter {
	if l := q.keys[key]; l != nil {
		return l.Front().Value.(*Waiter)
	}
	return nil
}

// Won records that w won the locks on its keys (fences[i], the fencing
// token of keys[i]; owner token token, expired by until unless extended)
// and removes w from its queues, as Leave does. Until a lock's release or
// expiry is seen (Wake, Released with its owner token, WakeReleased with a
// fencing token not below its fence, WakeAll), HeldUntil tells the next
// head of that key's queue that the lock is held and till when, so that it
// waits for the release instead of trying the backend in vain; and release
// events of earlier locks on the key no longer wake it.
func (w *Waiter) Won(fences []uint64, token string, until time.Time) {
	q := w.q
	q.mu.Lock()
	for i, e := range w.elems {
		key := w.keys[i]
		if e != nil && e.Next() != nil && i < len(fences) && fences[i] >= q.won[key].fence {
			q.won[key] = wonLock{fence: fences[i], token: token, request: w.request, until: until}
		}
	}
	q.mu.Unlock()
	w.Leave()
}

// HeldUntil reports, while a waiter of one of w's queues holds the lock it
// won and its release has not been seen, the latest instant by which those
// locks have expired unless extended (a lock won for w's own request
// excepted: see SetRequest).
func (w *Waiter) HeldUntil() (time.Time, bool) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	var until time.Time
	held := false
	for _, key := range w.keys {
		if l, ok := w.q.won[key]; ok && (w.request == "" || l.request != w.request) {
			held = true
			if l.until.After(until) {
				until = l.until
			}
		}
	}
	return until, held
}

// Leave removes w from its queues (whether it got the locks or gave up).
// The next waiter of a queue w was at the front of is woken when that makes
// it the head. Calling Leave again does nothing.
func (w *Waiter) Leave() {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	w.setRecheckLocked(false)
	var next []*Waiter
	for i, e := range w.elems {
		if e == nil {
			continue
		}
		key := w.keys[i]
		l := q.keys[key]
		wasFront := e.Prev() == nil
		after := e.Next()
		l.Remove(e)
		w.elems[i] = nil
		q.total--
		if l.Len() == 0 {
			delete(q.keys, key)
			delete(q.won, key)
			continue
		}
		if wasFront && after != nil {
			next = append(next, after.Value.(*Waiter))
		}
	}
	for _, n := range next {
		if n.isHeadLocked() {
			n.signal()
		}
	}
}

func (w *Waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Wake wakes the head of key's queue, if any, and reports whether there was
// one. Call it when the key's current lock was released.
func (q *Queues) Wake(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.front(key)
	if w == nil {
		return false
	}
	delete(q.won, key)
	w.signal()
	return true
}

// Released wakes the head of key's queue for this server's release of the
// lock with owner token token, unless a waiter of the queue has won a lock
// with another token since (see Won): the released lock is older than that
// one (two locks on a key are never held at once), its release is old news
// (a release event can wake and hand over the lock before the releasing
// call returns). It reports whether it woke a waiter.
func (q *Queues) Released(key, token string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.front(key)
	if w == nil {
		return false
	}
	if won, ok := q.won[key]; ok {
		if won.token != token {
			return false
		}
		delete(q.won, key)
	}
	w.signal()
	return true
}

// WakeReleased wakes the head of key's queue for the release or expiry of
// the lock with fencing token fence (0: unknown), unless that lock is older
// than one a waiter of the queue has won since (see Won): its release is
// old news. It reports whether it woke a waiter.
func (q *Queues) WakeReleased(key string, fence uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.front(key)
	if w == nil {
		return false
	}
	if won, ok := q.won[key]; ok {
		if fence != 0 && fence < won.fence {
			return false
		}
		delete(q.won, key)
	}
	w.signal()
	return true
}

// WakeAcquired wakes the waiters of key's queue marked by SetRecheck, but
// its head (which is woken by releases, and asks the backend anyway when it
// tries). Call it when an acquisition of key is seen. It costs nothing when
// no waiter of key is marked.
func (q *Queues) WakeAcquired(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rechecks[key] == 0 {
		return
	}
	for e := q.keys[key].Front(); e != nil; e = e.Next() {
		if w := e.Value.(*Waiter); w.recheck && !w.isHeadLocked() {
			w.signal()
		}
	}
}

// WakeAll wakes the head of every queue (after a backend resync, when events
// may have been missed).
func (q *Queues) WakeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.won)
	for _, l := range q.keys {
		l.Front().Value.(*Waiter).signal()
	}
}

// Depth is the number of waiters queued for key.
func (q *Queues) Depth(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depth(key)
}

// Depths is Depth of each of keys (in their order), read under one hold of
// the mutex: a List page asks about a thousand keys, and a lock and unlock
// per key would contend with every Join and Leave a thousand times.
func (q *Queues) Depths(keys []string) []int {
	out := make([]int, len(keys))
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.total == 0 {
		return out
	}
	for i, k := range keys {
		out[i] = q.depth(k)
	}
	return out
}

// Total is the number of waiters queued for every key (a waiter for a set
// counts once per key).
func (q *Queues) Total() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}
