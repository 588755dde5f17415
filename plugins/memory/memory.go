// Package memory is holdfast's in-memory lock backend: one process, one map,
// one mutex. It is the embedded default of the holdfast binary and runs either
// in-process (New) or as a plugin process (Open, through backendserver.Serve).
//
// # Semantics
//
//   - Atomicity: every call is decided under one mutex, so "store only if
//     absent or expired" and "delete only if the owner token matches" are
//     single steps.
//   - Expiry is authoritative and exact: every access compares the entry's
//     expiry with the monotonic clock, so a lock whose TTL has run out is free
//     at once, whatever the reaper has done. One reaper goroutine keeps a
//     min-heap of expiries and a single timer armed for the earliest one (no
//     fixed-interval polling); it deletes expired entries and emits
//     EventExpired. An access that finds an expired entry first expires it
//     the same way, so every acquisition ends in exactly one EventReleased or
//     EventExpired.
//   - Memory: the entry of a released or expired key is deleted, so memory
//     does not grow with the number of distinct keys ever used.
//   - Fencing tokens come from one process-wide high-water mark:
//     token = max(last+1, time.Now().UnixNano()). They strictly increase
//     across every key and every Backend in the process, and across a restart
//     of the plugin process, because a new process starts from the wall clock,
//     which has moved past every token the old process handed out. (The
//     counter runs ahead of the clock only when acquisitions come faster than
//     one a nanosecond, and then only by the size of that burst, in
//     nanoseconds; a restart takes far longer.) The assumption: the wall
//     clock does not step back across a restart. A host whose clock is
//     stepped back (NTP step, VM restore) while holdfast restarts can see
//     tokens repeat; use a durable backend where that matters.
//   - Stamps: Acquire stores backend.NextStamp(last, proposed), where last is
//     the stamp of the entry it takes over. The entry (and its stamp) is
//     forgotten on release or expiry. That is safe here and only here: a
//     memory backend is never shared, so exactly one engine stamps its keys,
//     and that engine's HLC has already observed every stamp memory stored
//     (Acquire returned it) and stamped the release after it. Its next
//     proposal is therefore later than anything forgotten. A plugin restart
//     loses the locks but not the engine's clock; a server restart loses both
//     the engine and every lock.
//   - Extend renews the expiry and keeps the acquisition's stamp.
//   - Watch fans out to subscribers through one buffered channel each. A
//     slow watcher never blocks Acquire or Release: when its buffer
//     (1024 events) is full, its watch ends with an error wrapping
//     backend.ErrUnavailable, and the engine re-watches and re-syncs (it
//     reads state with Get/List after the new EventSynced).
//   - List pages in key order; the page token is an opaque encoding of the
//     last key returned.
//   - Info: not shared (each server has its own locks; fairness is the
//     engine's FIFO within one server), not durable, TTL between 1ms and 24h.
//     The 24h cap bounds how long a forgotten lock can stay held; clients
//     hold longer work with a watchdog that extends.
package memory

import (
	"container/heap"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Name is the backend name reported by Info.
const Name = "memory"

// Version is reported by Info.
const Version = "0.1.0"

// TTL limits and granularity reported by Info.
const (
	MinTTL = time.Millisecond
	MaxTTL = 24 * time.Hour
	// TTLGranularity: a lock is free the instant its TTL runs out (every
	// access checks the monotonic clock). The EventExpired that wakes waiters
	// comes from the reaper's timer, which Go fires within about a
	// millisecond on an idle machine (more under heavy load).
	TTLGranularity = time.Millisecond
)

// watchBuffer is how many undelivered events one watcher may have before its
// watch is ended.
const watchBuffer = 1024

// ErrClosed is returned (wrapping backend.ErrUnavailable) by calls on a
// closed Backend.
var ErrClosed = fmt.Errorf("%w: memory backend closed", backend.ErrUnavailable)

// lastFence is the process-wide fencing high-water mark.
var lastFence atomic.Uint64

// nextFence returns max(last+1, now in Unix nanoseconds) and records it.
func nextFence() uint64 {
	for {
		last := lastFence.Load()
		next := max(last+1, uint64(time.Now().UnixNano()))
		if lastFence.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Backend is an in-memory backend.Backend. Create it with New; Close stops
// its reaper goroutine.
type Backend struct {
	wake chan struct{} // reaper: the earliest expiry may have changed
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	locks    map[string]*entry
	expiries expiryHeap
	watchers map[*watcher]struct{}
}

var (
	_ backend.Backend            = (*Backend)(nil)
	_ interface{ Close() error } = (*Backend)(nil)
)

// entry is a held lock.
type entry struct {
	key     string
	token   string
	holder  string
	fence   uint64
	stamp   hlc.Timestamp
	expires time.Time // carries the monotonic reading
	index   int       // position in the expiry heap
}

func (e *entry) record(now time.Time) backend.Record {
	return backend.Record{
		Key:          e.key,
		FencingToken: e.fence,
		Holder:       e.holder,
		ExpiresAt:    e.expires.Round(0), // wall clock only, as over the wire
		Remaining:    max(e.expires.Sub(now), 0),
		Stamp:        e.stamp,
	}
}

// New returns a running in-memory backend.
func New() *Backend {
	b := &Backend{
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		locks:    make(map[string]*entry),
		watchers: make(map[*watcher]struct{}),
	}
	b.wg.Add(1)
	go b.reap()
	return b
}

// Open is the plugin entry point (backendserver.Serve(memory.Open)). The memory
// backend takes no options; any option is refused.
func Open(_ context.Context, opts map[string]string) (backend.Backend, error) {
	if len(opts) > 0 {
		keys := make([]string, 0, len(opts))
		for k := range opts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("%w: memory: unknown option(s) %s: the memory backend takes no options",
			backend.ErrInvalidArgument, strings.Join(keys, ", "))
	}
	return New(), nil
}

// Close stops the reaper, ends every watch with ErrClosed and makes later
// calls fail with ErrClosed. It is safe to call more than once.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.done)
	}
	b.mu.Unlock()
	b.wg.Wait()
	return nil
}

// Info implements backend.Backend.
func (b *Backend) Info(context.Context) (backend.Info, error) {
	return backend.Info{
		Name:           Name,
		Version:        Version,
		Shared:         false,
		Durable:        false,
		TTLGranularity: TTLGranularity,
		MinTTL:         MinTTL,
		MaxTTL:         MaxTTL,
		Fair:           false,
	}, nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %s is outside the memory backend's range [%s, %s]",
			backend.ErrInvalidArgument, ttl, MinTTL, MaxTTL)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key must not be empty", backend.ErrInvalidArgument)
	}
	return nil
}

// live returns the unexpired entry for key, expiring a stale one on the way.
// b.mu must be held.
func (b *Backend) live(key string, now time.Time) *entry {
	e := b.locks[key]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		b.expire(e, now)
		return nil
	}
	return e
}

// expire deletes e and announces it. b.mu must be held.
func (b *Backend) expire(e *entry, now time.Time) {
	b.remove(e)
	b.emit(backend.Event{Type: backend.EventExpired, Record: e.record(now)})
}

// Expire ends the lease held on key now, as if its TTL had just run out:
// the entry is deleted and EventExpired announced, so waiters wake and the
// holder's next Extend answers false. It reports whether a lease was held.
// It exists for tests that run the backend in process (holdfasttest): a
// lease lost behind its holder's back, without waiting out its TTL.
func (b *Backend) Expire(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, time.Now())
	if e == nil {
		return false
	}
	b.expire(e, time.Now())
	return true
}

// remove deletes e from the map and the heap. b.mu must be held.
func (b *Backend) remove(e *entry) {
	delete(b.locks, e.key)
	heap.Remove(&b.expiries, e.index)
}

// Acquire implements backend.Backend.
func (b *Backend) Acquire(_ context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := checkKey(req.Key); err != nil {
		return backend.AcquireResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.AcquireResult{}, fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.AcquireResult{}, ErrClosed
	}
	now := time.Now()
	var last hlc.Timestamp
	if e := b.locks[req.Key]; e != nil {
		if now.Before(e.expires) {
			return backend.AcquireResult{Acquired: false, Record: e.record(now)}, nil
		}
		last = e.stamp // taken over after expiry: its stamp is at hand
		b.expire(e, now)
	}
	e := &entry{
		key:     req.Key,
		token:   req.OwnerToken,
		holder:  req.Holder,
		fence:   nextFence(),
		stamp:   backend.NextStamp(last, req.Stamp),
		expires: now.Add(req.TTL),
	}
	b.locks[req.Key] = e
	heap.Push(&b.expiries, e)
	b.rearm(e)
	rec := e.record(now)
	b.emit(backend.Event{Type: backend.EventAcquired, Record: rec})
	return backend.AcquireResult{Acquired: true, Record: rec}, nil
}

// rearm wakes the reaper when e became the earliest expiry. b.mu must be held.
func (b *Backend) rearm(e *entry) {
	if e.index != 0 {
		return
	}
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Release implements backend.Backend.
func (b *Backend) Release(_ context.Context, req backend.ReleaseRequest) (bool, error) {
	if err := checkKey(req.Key); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, ErrClosed
	}
	now := time.Now()
	e := b.live(req.Key, now)
	if e == nil || e.token != req.OwnerToken || req.OwnerToken == "" {
		return false, nil
	}
	b.remove(e)
	b.emit(backend.Event{Type: backend.EventReleased, Record: e.record(now)})
	return true, nil
}

// Extend implements backend.Backend. The record keeps its acquisition stamp.
func (b *Backend) Extend(_ context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := checkKey(req.Key); err != nil {
		return backend.ExtendResult{}, err
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ExtendResult{}, ErrClosed
	}
	now := time.Now()
	e := b.live(req.Key, now)
	if e == nil || e.token != req.OwnerToken || req.OwnerToken == "" {
		return backend.ExtendResult{}, nil
	}
	e.expires = now.Add(req.TTL)
	heap.Fix(&b.expiries, e.index)
	b.rearm(e)
	return backend.ExtendResult{Extended: true, Record: e.record(now)}, nil
}

// Get implements backend.Backend.
func (b *Backend) Get(_ context.Context, key string) (backend.Record, bool, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.Record{}, false, ErrClosed
	}
	now := time.Now()
	e := b.live(key, now)
	if e == nil {
		return backend.Record{}, false, nil
	}
	return e.record(now), true, nil
}

// pageTokenPrefix versions the page token format.
const pageTokenPrefix = "m1:"

func encodePageToken(lastKey string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenPrefix + lastKey))
}

func decodePageToken(tok string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !strings.HasPrefix(string(raw), pageTokenPrefix) {
		return "", fmt.Errorf("%w: page_token is not a token this backend issued", backend.ErrInvalidArgument)
	}
	return strings.TrimPrefix(string(raw), pageTokenPrefix), nil
}

// List implements backend.Backend. It sorts the matching keys on every call:
// simple, and fine for the lock counts one memory server holds.
func (b *Backend) List(_ context.Context, req backend.ListRequest) (backend.ListPage, error) {
	if req.PageSize < 1 {
		return backend.ListPage{}, fmt.Errorf("%w: page_size must be at least 1, got %d", backend.ErrInvalidArgument, req.PageSize)
	}
	after, hasAfter := "", false
	if req.PageToken != "" {
		k, err := decodePageToken(req.PageToken)
		if err != nil {
			return backend.ListPage{}, err
		}
		after, hasAfter = k, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ListPage{}, ErrClosed
	}
	now := time.Now()
	var held []*entry
	for key := range b.locks {
		if !strings.HasPrefix(key, req.Prefix) || (hasAfter && key <= after) {
			continue
		}
		if e := b.live(key, now); e != nil { // deleting during range is allowed
			held = append(held, e)
		}
	}
	slices.SortFunc(held, func(x, y *entry) int { return strings.Compare(x.key, y.key) })
	var page backend.ListPage
	if len(held) > req.PageSize {
		held = held[:req.PageSize]
		page.NextPageToken = encodePageToken(held[len(held)-1].key)
	}
	page.Records = make([]backend.Record, len(held))
	for i, e := range held {
		page.Records[i] = e.record(now)
	}
	return page, nil
}

// watcher is one Watch subscriber.
type watcher struct {
	prefix string
	events chan backend.Event
	// dropped is closed when the watcher's buffer overflowed; it has been
	// removed from b.watchers by then.
	dropped chan struct{}
}

// emit hands ev to every matching watcher without blocking. b.mu must be
// held, so watchers see events in the order the map changed.
func (b *Backend) emit(ev backend.Event) {
	for w := range b.watchers {
		if !strings.HasPrefix(ev.Record.Key, w.prefix) {
			continue
		}
		select {
		case w.events <- ev:
		default:
			delete(b.watchers, w)
			close(w.dropped)
		}
	}
}

// Watch implements backend.Backend. It returns ctx.Err() when ctx is done,
// ErrClosed when the backend closes, and an error wrapping
// backend.ErrUnavailable when the watcher fell more than 1024 events behind
// (the caller re-watches).
func (b *Backend) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	w := &watcher{
		prefix:  prefix,
		events:  make(chan backend.Event, watchBuffer),
		dropped: make(chan struct{}),
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.watchers[w] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.watchers, w)
		b.mu.Unlock()
	}()

	// Registered under the mutex: every later change reaches w.events.
	if err := send(backend.Event{Type: backend.EventSynced}); err != nil {
		return err
	}
	for {
		select {
		case ev := <-w.events:
			if err := send(ev); err != nil {
				return err
			}
		case <-w.dropped:
			return fmt.Errorf("%w: memory: watcher fell more than %d events behind; watch again",
				backend.ErrUnavailable, watchBuffer)
		case <-b.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reap is the one reaper goroutine: it sleeps on one timer armed for the
// earliest expiry and deletes what has expired.
func (b *Backend) reap() {
	defer b.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		now := time.Now()
		for len(b.expiries) > 0 && !now.Before(b.expiries[0].expires) {
			b.expire(b.expiries[0], now)
		}
		var wait time.Duration = -1
		if len(b.expiries) > 0 {
			wait = b.expiries[0].expires.Sub(now)
		}
		b.mu.Unlock()

		// Since Go 1.23 Stop and Reset discard a pending tick, so a stale
		// firing cannot be read after re-arming.
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-b.done:
			return
		case <-b.wake:
		case <-timer.C:
		}
	}
}

// expiryHeap orders entries by expiry (container/heap).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
