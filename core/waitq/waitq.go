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
	// won: per key with waiters, the lock a waiter of the queue won last
	// and whose release has not been seen yet (see Won); dropped with the
	// key's queue.
	won map[string]wonLock
}

// wonLock is a lock a waiter won: its fencing token, and the instant (on
// this process's monotonic clock) by which it has expired unless extended.
type wonLock struct {
	fence uint64
	token string
	until time.Time
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
	return &Queues{maxPerKey: maxPerKey, maxTotal: maxTotal, keys: make(map[string]*list.List), won: make(map[string]wonLock)}
}

// MaxPerKey is the bound on waiters per key.
func (q *Queues) MaxPerKey() int { return q.maxPerKey }

// Waiter is one caller's place in a key's queue.
type Waiter struct {
	q    *Queues
	key  string
	elem *list.Element // nil once left
	// wake has room for one signal, so a wake-up sent while the waiter is
	// busy (trying the backend) is kept, never lost, and several wake-ups
	// collapse into one.
	wake chan struct{}
}

// Join appends a waiter for key at the tail of its queue. A waiter that
// joins an empty queue is the head and finds its wake channel already
// signalled, so it tries at once. The caller must call Leave exactly once.
func (q *Queues) Join(key string) (*Waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.keys[key]
	n := 0
	if l != nil {
		n = l.Len()
	}
	if n >= q.maxPerKey {
		return nil, fmt.Errorf("%w: %d waiters already queued for this key (the maximum per key)", ErrFull, n)
	}
	if q.total >= q.maxTotal {
		return nil, fmt.Errorf("%w: %d waiters already queued on this server (the maximum)", ErrFull, q.total)
	}
	if l == nil {
		l = list.New()
		q.keys[key] = l
	}
	w := &Waiter{q: q, key: key, wake: make(chan struct{}, 1)}
	w.elem = l.PushBack(w)
	q.total++
	if l.Len() == 1 {
		w.signal()
	}
	return w, nil
}

// Key is the key the waiter queues for.
func (w *Waiter) Key() string { return w.key }

// Wake receives a value when the waiter should look at the lock again. Only
// the head is woken.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// IsHead reports whether w is at the head of its queue.
func (w *Waiter) IsHead() bool {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.elem != nil && w.elem.Prev() == nil
}

// Won records that w won the lock (fencing token fence, owner token token,
// expired by until unless extended) and removes w from its queue, as Leave
// does. Until that lock's release or expiry is seen (Wake, Released with
// its owner token, WakeReleased with a fencing token not below fence,
// WakeAll), HeldUntil tells the next head that the lock is
// held and till when, so that it waits for the release instead of trying
// the backend in vain; and release events of earlier locks on the key no
// longer wake it.
func (w *Waiter) Won(fence uint64, token string, until time.Time) {
	q := w.q
	q.mu.Lock()
	if w.elem != nil && w.elem.Next() != nil && fence >= q.won[w.key].fence {
		q.won[w.key] = wonLock{fence: fence, token: token, until: until}
	}
	q.mu.Unlock()
	w.Leave()
}

// HeldUntil reports, while a waiter of w's queue holds the lock it won and
// its release has not been seen, the instant by which that lock has expired
// unless extended.
func (w *Waiter) HeldUntil() (time.Time, bool) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	l, ok := w.q.won[w.key]
	return l.until, ok
}

// Leave removes w from its queue (whether it got the lock or gave up). If w
// was the head, the next waiter becomes head and is woken. Calling Leave
// again does nothing.
func (w *Waiter) Leave() {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.elem == nil {
		return
	}
	l := q.keys[w.key]
	wasHead := w.elem.Prev() == nil
	next := w.elem.Next()
	l.Remove(w.elem)
	w.elem = nil
	q.total--
	if l.Len() == 0 {
		delete(q.keys, w.key)
		delete(q.won, w.key)
		return
	}
	if wasHead && next != nil {
		next.Value.(*Waiter).signal()
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
	l := q.keys[key]
	if l == nil {
		return false
	}
	delete(q.won, key)
	l.Front().Value.(*Waiter).signal()
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
	l := q.keys[key]
	if l == nil {
		return false
	}
	if won, ok := q.won[key]; ok {
		if won.token != token {
			return false
		}
		delete(q.won, key)
	}
	l.Front().Value.(*Waiter).signal()
	return true
}

// WakeReleased wakes the head of key's queue for the release or expiry of
// the lock with fencing token fence (0: unknown), unless that lock is older
// than one a waiter of the queue has won since (see Won): its release is
// old news. It reports whether it woke a waiter.
func (q *Queues) WakeReleased(key string, fence uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.keys[key]
	if l == nil {
		return false
	}
	if won, ok := q.won[key]; ok {
		if fence != 0 && fence < won.fence {
			return false
		}
		delete(q.won, key)
	}
	l.Front().Value.(*Waiter).signal()
	return true
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
	if l := q.keys[key]; l != nil {
		return l.Len()
	}
	return 0
}

// Total is the number of waiters queued for every key.
func (q *Queues) Total() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.total
}
