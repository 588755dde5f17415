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
//     EventExpired. Renewal is lazy in the heap: an Extend that moves an
//     expiry later only records it, and the reaper re-sifts the entry when
//     its old place comes up, so a watchdog's renewals cost no heap work
//     under the mutex (an earlier expiry moves the entry at once). An access that finds an expired entry first expires it
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
//   - List pages in key order from an ordered index of the held keys (a
//     B-tree, github.com/google/btree, beside the map, whose items point
//     at the key's lock or pool): a page costs O(log n + page), with no map
//     lookup per key, never a scan or a sort of every lock under the mutex,
//     however many locks are held. The page token is an opaque encoding of
//     the last key returned (the server seals it before a client sees it).
//   - Count (backend.CountBackend) is O(1): the mutexes' map and a counter
//     of the pools' grants, so the server's held-locks gauge never walks
//     the index.
//   - Sets of keys (backend.SetBackend, up to MaxKeys): AcquireSet checks
//     and takes every key under the one mutex, so a set is as atomic as a
//     single key; ReleaseSet and ExtendSet likewise. A single key is a set
//     of one.
//   - Request identities: each entry keeps the Request of its last Acquire
//     or Extend and the Replay of its Acquire. A Release keeps its own
//     Request for the key until the released lease would have expired (a
//     repeat comes within the lease's life: after it the SDKs do not
//     retry), then the reaper forgets it; so does the next release.
//   - Lock-delay: an entry that expires with a LockDelay leaves its key
//     refusing holders until the delay after its expiry instant, on the
//     monotonic clock. Released entries leave none. The reaper forgets
//     delays that have passed.
//   - Semaphores and rwlocks (Info.Kinds): a key held by leases of one of
//     these kinds is a pool beside the mutexes' map: its kind, its limit,
//     the permits in use and its grants (each an entry of its own in the
//     expiry heap, with its own owner token, fencing token from the same
//     high-water mark, expiry and stamp, chained after the pool's last
//     grant). Acquire grants under the mutex only if the pool's kind and
//     limit are the request's and in use + permits fit the limit; a pool of
//     another kind or limit, or a mutex on the key, is answered as the
//     blocker, and a mutex Acquire (or set) finds a pool a blocker too. A
//     pool is deleted with its last grant, and its kind, limit and stamp
//     with it (for the reason stamps may be forgotten, above): so here a
//     key's kind is fixed only while someone holds it. Release and Extend
//     find the grant by its owner token; one grant's expiry frees its
//     permits only. List counts a pool as its grants (see backend.ListRequest).
//   - Elections (KindElection) are pools of limit 1 whose grant keeps a
//     value; Proclaim replaces it under the mutex only if the owner token
//     holds the grant, and emits EventProclaimed to the watchers.
//   - Info: not shared (each server has its own locks; fairness is the
//     engine's FIFO within one server), not durable, TTL between 1ms and 24h.
//     The 24h cap bounds how long a forgotten lock can stay held; clients
//     hold longer work with a watchdog that extends.
package memory

import (
	"container/heap"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"

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
	// MaxKeys is the most keys one AcquireSet takes.
	MaxKeys = 64
	// MaxLockDelay is the longest lock-delay kept.
	MaxLockDelay = time.Minute
)

// kinds are the kinds of key kept beside the mutex.
var kinds = []backend.Kind{backend.KindSemaphore, backend.KindRWLock, backend.KindElection}

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
	pools    map[string]*pool       // keys held by semaphore or rwlock leases
	grants   int                    // every pool's grants, for Count
	ordered  *btree.BTreeG[indexed] // the locks and pools, in key order (List)
	expiries expiryHeap
	watchers map[*watcher]struct{}
	// What a key keeps after its lease: its lock-delay, and its last
	// release's request; each forgotten at its time (lapses).
	delays   map[string]time.Time
	released map[string]tombstone
	lapses   lapseHeap
}

// tombstone is the request of a key's last release, kept until the
// released lease would have expired.
type tombstone struct {
	req   backend.Request
	until time.Time
}

var (
	_ backend.SetBackend         = (*Backend)(nil)
	_ backend.BatchBackend       = (*Backend)(nil)
	_ backend.ElectionBackend    = (*Backend)(nil)
	_ backend.CountBackend       = (*Backend)(nil)
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
	// due is the entry's place in the expiry heap, never after expires. An
	// Extend that moves expires later leaves due where it was (no heap
	// work under the mutex); the reaper, finding due passed but expires
	// not, moves due up to expires and sifts the entry once. So a lease
	// renewed every TTL/3 is sifted about once per TTL, not per renewal.
	due     time.Time
	index   int // position in the expiry heap
	delay   time.Duration
	request backend.Request // of the last Acquire or Extend
	replay  string
	claimed bool // a replay of its Acquire was answered
	// A grant of a pool (semaphore, rwlock, election): its permits and its
	// pool, and an election's value.
	permits int
	pool    *pool
	value   string
}

// record is the entry as a record: a mutex, or one grant of a pool with the
// pool's kind, limit and permits in use but not its holders (a watch
// event's, a grant's and an extend's record; see pool.record).
func (e *entry) record(now time.Time) backend.Record {
	r := backend.Record{
		Key:          e.key,
		FencingToken: e.fence,
		Holder:       e.holder,
		ExpiresAt:    e.expires.Round(0), // wall clock only, as over the wire
		Remaining:    max(e.expires.Sub(now), 0),
		Stamp:        e.stamp,
		LockDelay:    e.delay,
	}
	if p := e.pool; p != nil {
		r.Kind, r.Limit, r.Permits, r.InUse = p.kind, p.limit, e.permits, p.inUse
		r.Value = e.value
	}
	return r
}

// indexed is a held key in the ordered index, with what holds it (one of
// lock and pool), so that a List page reads its records from the walk
// itself: no map lookup per key under the mutex.
type indexed struct {
	key  string
	lock *entry
	pool *pool
}

// pool is a key held by the leases of a semaphore or an rwlock.
type pool struct {
	key    string
	kind   backend.Kind
	limit  int
	inUse  int           // the grants' permits
	stamp  hlc.Timestamp // the key's last stamp: of its last grant, or a later release
	grants []*entry      // in fencing-token order (the order they were granted)
}

// record is the pool as a record about its grant subject, with every
// holder.
func (p *pool) record(now time.Time, subject *entry) backend.Record {
	r := subject.record(now)
	r.Holders = make([]backend.Grant, len(p.grants))
	for i, g := range p.grants {
		r.Holders[i] = backend.Grant{
			FencingToken: g.fence, Holder: g.holder, ExpiresAt: g.expires.Round(0),
			Remaining: max(g.expires.Sub(now), 0), Stamp: g.stamp, Permits: g.permits, Value: g.value,
		}
	}
	return r
}

// blocker is the pool's record for a request it does not take: about the
// grant that ends first, the one a waiter waits for.
func (p *pool) blocker(now time.Time) backend.Record {
	first := p.grants[0]
	for _, g := range p.grants[1:] {
		if g.expires.Before(first.expires) {
			first = g
		}
	}
	return p.record(now, first)
}

// grant is the pool's grant held under token (nil: none).
func (p *pool) grant(token string) *entry {
	if token == "" {
		return nil
	}
	for _, g := range p.grants {
		if g.token == token {
			return g
		}
	}
	return nil
}

// New returns a running in-memory backend.
func New() *Backend {
	b := &Backend{
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		locks:    make(map[string]*entry),
		pools:    make(map[string]*pool),
		ordered:  btree.NewG(32, func(a, b indexed) bool { return a.key < b.key }),
		watchers: make(map[*watcher]struct{}),
		delays:   make(map[string]time.Time),
		released: make(map[string]tombstone),
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
		MaxKeys:        MaxKeys,
		RequestIDs:     true,
		MaxLockDelay:   MaxLockDelay,
		Kinds:          kinds,
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

// expire deletes e and announces it; its lock-delay starts, counted from
// its expiry instant. b.mu must be held.
func (b *Backend) expire(e *entry, now time.Time) {
	b.remove(e)
	if e.delay > 0 {
		until := e.expires.Add(e.delay)
		b.delays[e.key] = until
		b.lapse(e.key, until, lapseDelay)
	}
	b.emit(backend.Event{Type: backend.EventExpired, Record: e.record(now)})
}

// delayed is how much longer key's lock-delay lasts (0: none). b.mu must
// be held.
func (b *Backend) delayed(key string, now time.Time) time.Duration {
	if until, ok := b.delays[key]; ok && now.Before(until) {
		return until.Sub(now)
	}
	return 0
}

// Expire ends the lease held on key now (every lease of a semaphore or an
// rwlock), as if its TTL had just run out: the entry is deleted and
// EventExpired announced, so waiters wake and the holder's next Extend
// answers false. It reports whether a lease was held.
// It exists for tests that run the backend in process (holdfasttest): a
// lease lost behind its holder's back, without waiting out its TTL.
func (b *Backend) Expire(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.livePool(key, time.Now()); p != nil {
		for _, g := range slices.Clone(p.grants) {
			b.expire(g, time.Now())
		}
		return true
	}
	e := b.live(key, time.Now())
	if e == nil {
		return false
	}
	b.expire(e, time.Now())
	return true
}

// remove deletes e from the map (or its pool), the index and the heap; a
// pool goes with its last grant. b.mu must be held.
func (b *Backend) remove(e *entry) {
	b.expiries.remove(e.index)
	if p := e.pool; p != nil {
		p.grants = slices.DeleteFunc(p.grants, func(g *entry) bool { return g == e })
		p.inUse -= e.permits
		b.grants--
		if len(p.grants) == 0 {
			delete(b.pools, p.key)
			b.ordered.Delete(indexed{key: p.key})
		}
		return
	}
	delete(b.locks, e.key)
	b.ordered.Delete(indexed{key: e.key})
}

// poolOf is key's live pool on an open backend (nil: none, or closed:
// the set path answers then). b.mu must be held.
func (b *Backend) poolOf(key string) *pool {
	if b.closed {
		return nil
	}
	return b.livePool(key, time.Now())
}

// livePool returns key's pool with its unexpired grants, expiring stale
// ones on the way (nil: no pool, or it went with them). b.mu must be held.
func (b *Backend) livePool(key string, now time.Time) *pool {
	p := b.pools[key]
	if p == nil {
		return nil
	}
	// Expire what has run out, without copying the grants when nothing
	// has (the common case, on every access).
	for i := 0; i < len(p.grants); {
		if g := p.grants[i]; !now.Before(g.expires) {
			b.expire(g, now) // removes g from p.grants
			continue
		}
		i++
	}
	return b.pools[key]
}

// Acquire implements backend.Backend: a set of one for a mutex, a grant of
// the key's pool for a semaphore or an rwlock.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Kind != backend.KindMutex {
		return b.acquireGrant(req)
	}
	res, err := b.AcquireSet(ctx, backend.AcquireSetRequest{
		Claims: []backend.Claim{{Key: req.Key}}, OwnerToken: req.OwnerToken, TTL: req.TTL, Holder: req.Holder, Stamp: req.Stamp,
		Request: req.Request, Replay: req.Replay, LockDelay: req.LockDelay, ReplayOnly: req.ReplayOnly,
	})
	if err != nil || !res.Acquired {
		return backend.AcquireResult{Record: res.Blocker}, err
	}
	return backend.AcquireResult{Acquired: true, Record: res.Records[0], Replayed: res.Replayed, Replay: res.Replay}, nil
}

func checkSet(n int) error {
	if n < 1 || n > MaxKeys {
		return fmt.Errorf("%w: a set of %d keys is outside the memory backend's range [1, %d]", backend.ErrInvalidArgument, n, MaxKeys)
	}
	return nil
}

func checkDelay(d time.Duration) error {
	if d < 0 || d > MaxLockDelay {
		return fmt.Errorf("%w: lock_delay %s is outside the memory backend's range [0, %s]", backend.ErrInvalidArgument, d, MaxLockDelay)
	}
	return nil
}

// AcquireSet implements backend.SetBackend: every key is checked and taken
// under the one mutex.
func (b *Backend) AcquireSet(_ context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	if err := checkSet(len(req.Claims)); err != nil {
		return backend.AcquireSetResult{}, err
	}
	for _, c := range req.Claims {
		if err := checkKey(c.Key); err != nil {
			return backend.AcquireSetResult{}, err
		}
	}
	if req.OwnerToken == "" {
		return backend.AcquireSetResult{}, fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireSetResult{}, err
	}
	if err := checkDelay(req.LockDelay); err != nil {
		return backend.AcquireSetResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.AcquireSetResult{}, ErrClosed
	}
	now := time.Now()
	held := make([]*entry, 0, len(req.Claims))
	// One stamp for the set: later than the proposal and than every key's
	// last stamp at hand (an entry taken over after its expiry; forgotten
	// stamps are behind the engine's clock, see the package doc).
	stamp := req.Stamp
	for _, c := range req.Claims {
		if p := b.livePool(c.Key, now); p != nil {
			// Held by the leases of a semaphore or an rwlock: never a
			// mutex's while they hold it.
			return backend.AcquireSetResult{Blocker: p.blocker(now)}, nil
		}
		if e := b.locks[c.Key]; e != nil && !now.Before(e.expires) {
			stamp = backend.NextStamp(e.stamp, stamp)
		}
		if e := b.live(c.Key, now); e != nil {
			held = append(held, e)
		}
	}
	if len(held) == len(req.Claims) {
		if res, ok, err := replay(held, req.Request, now); ok || err != nil {
			return res, err
		}
	}
	if len(held) > 0 {
		return backend.AcquireSetResult{Blocker: held[0].record(now)}, nil
	}
	for _, c := range req.Claims {
		if d := b.delayed(c.Key, now); d > 0 {
			return backend.AcquireSetResult{Blocker: backend.Record{Key: c.Key, DelayRemaining: d}}, nil
		}
	}
	if req.ReplayOnly {
		return backend.AcquireSetResult{}, nil
	}
	res := backend.AcquireSetResult{Acquired: true, Records: make([]backend.Record, len(req.Claims))}
	for i, c := range req.Claims {
		e := &entry{
			key:     c.Key,
			token:   req.OwnerToken,
			holder:  req.Holder,
			fence:   nextFence(),
			stamp:   stamp,
			expires: now.Add(req.TTL),
			delay:   req.LockDelay,
			request: req.Request,
			replay:  req.Replay,
		}
		b.locks[c.Key] = e
		b.ordered.ReplaceOrInsert(indexed{key: c.Key, lock: e})
		b.schedule(e)
		res.Records[i] = e.record(now)
		b.emit(backend.Event{Type: backend.EventAcquired, Record: res.Records[i]})
	}
	return res, nil
}

// acquireGrant grants req.Permits of key's pool, under the mutex, if the
// pool's kind and limit are the request's (or there is no pool) and the
// permits fit; otherwise it reports the blocker: a mutex holding the key, a
// lock-delay, or the pool (with its kind and limit).
func (b *Backend) acquireGrant(req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := checkKey(req.Key); err != nil {
		return backend.AcquireResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.AcquireResult{}, fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	if err := req.CheckGrant(kinds); err != nil {
		return backend.AcquireResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.AcquireResult{}, ErrClosed
	}
	now := time.Now()
	if e := b.live(req.Key, now); e != nil {
		return backend.AcquireResult{Record: e.record(now)}, nil
	}
	if d := b.delayed(req.Key, now); d > 0 {
		return backend.AcquireResult{Record: backend.Record{Key: req.Key, DelayRemaining: d}}, nil
	}
	p := b.livePool(req.Key, now)
	if p != nil {
		if p.kind != req.Kind || p.limit != req.Limit {
			return backend.AcquireResult{Record: p.blocker(now)}, nil
		}
		for _, g := range p.grants {
			repeat, err := backend.Repeat(g.request, req.Request)
			if err != nil {
				return backend.AcquireResult{}, err
			}
			if repeat {
				g.claimed = true
				return backend.AcquireResult{Acquired: true, Record: g.record(now), Replayed: true, Replay: g.replay}, nil
			}
		}
		if p.inUse+req.Permits > p.limit {
			return backend.AcquireResult{Record: p.blocker(now)}, nil
		}
	}
	if req.ReplayOnly {
		return backend.AcquireResult{}, nil
	}
	if p == nil {
		p = &pool{key: req.Key, kind: req.Kind, limit: req.Limit}
		b.pools[req.Key] = p
		b.ordered.ReplaceOrInsert(indexed{key: req.Key, pool: p})
	}
	g := &entry{
		key:     req.Key,
		token:   req.OwnerToken,
		holder:  req.Holder,
		fence:   nextFence(),
		stamp:   backend.NextStamp(p.stamp, req.Stamp),
		expires: now.Add(req.TTL),
		request: req.Request,
		replay:  req.Replay,
		permits: req.Permits,
		pool:    p,
		value:   req.Value,
	}
	p.stamp = g.stamp
	p.grants = append(p.grants, g)
	p.inUse += g.permits
	b.grants++
	b.schedule(g)
	rec := g.record(now) // the grant alone: the engine reads nothing else of an acquired record
	b.emit(backend.Event{Type: backend.EventAcquired, Record: rec})
	return backend.AcquireResult{Acquired: true, Record: rec}, nil
}

// replay answers an Acquire of the keys of held (every one of them held)
// as a repeat of the request that took them, when it is one (ok), or
// refuses a repeat with other arguments. b.mu must be held.
func replay(held []*entry, req backend.Request, now time.Time) (backend.AcquireSetResult, bool, error) {
	for _, e := range held {
		repeat, err := backend.Repeat(e.request, req)
		if err != nil {
			return backend.AcquireSetResult{}, false, err
		}
		if !repeat || e.token != held[0].token {
			return backend.AcquireSetResult{}, false, nil
		}
	}
	res := backend.AcquireSetResult{Acquired: true, Records: make([]backend.Record, len(held)), Replayed: true, Replay: held[0].replay}
	for i, e := range held {
		e.claimed = true
		res.Records[i] = e.record(now)
	}
	return res, true, nil
}

// rearm wakes the reaper when e became the earliest expiry. b.mu must be held.
func (b *Backend) rearm(e *entry) {
	if e.index != 0 {
		return
	}
	b.wakeReaper()
}

// schedule puts a new entry in the expiry heap, due at its expiry. b.mu
// must be held.
func (b *Backend) schedule(e *entry) {
	e.due = e.expires
	b.expiries.push(e)
	b.rearm(e)
}

// renew moves e's expiry to expires. A later expiry costs no heap work
// (see entry.due); an earlier one, which a shorter TTL can ask for, moves
// e up the heap at once, so the reaper never wakes after it. b.mu must be
// held.
func (b *Backend) renew(e *entry, expires time.Time) {
	e.expires = expires
	if !expires.Before(e.due) {
		return
	}
	e.due = expires
	b.expiries.fix(e.index)
	b.rearm(e)
}

func (b *Backend) wakeReaper() {
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Release implements backend.Backend: a set of one, or a grant of the key's
// pool.
func (b *Backend) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	if err := checkKey(req.Key); err != nil {
		return false, err
	}
	b.mu.Lock()
	if p := b.poolOf(req.Key); p != nil {
		defer b.mu.Unlock()
		return b.releaseGrant(p, req, time.Now())
	}
	b.mu.Unlock()
	return b.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: []string{req.Key}, OwnerToken: req.OwnerToken, Stamp: req.Stamp,
		Request: req.Request, Abandon: req.Abandon})
}

// heldBy returns the entries of keys if token holds every one. b.mu must
// be held.
func (b *Backend) heldBy(keys []string, token string, now time.Time) ([]*entry, bool) {
	out := make([]*entry, len(keys))
	for i, k := range keys {
		e := b.live(k, now)
		if e == nil || token == "" || e.token != token {
			return nil, false
		}
		out[i] = e
	}
	return out, true
}

// ReleaseSet implements backend.SetBackend.
func (b *Backend) ReleaseSet(_ context.Context, req backend.ReleaseSetRequest) (bool, error) {
	if err := checkSet(len(req.Keys)); err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false, ErrClosed
	}
	now := time.Now()
	held, ok := b.heldBy(req.Keys, req.OwnerToken, now)
	if !ok {
		return b.releasedBefore(req.Keys, req.Request, now)
	}
	for _, e := range held {
		if req.Abandon && e.claimed {
			return false, nil
		}
	}
	for _, e := range held {
		b.release(e, req.Request, now)
	}
	return true, nil
}

// releasedBefore answers a Release of keys that token does not hold: true
// for a repeat of a release that answered true (every key keeps it), false
// otherwise. b.mu must be held.
func (b *Backend) releasedBefore(keys []string, req backend.Request, now time.Time) (bool, error) {
	if req.ID == "" {
		return false, nil
	}
	for _, k := range keys {
		t := b.released[k]
		if repeat, err := backend.Repeat(t.req, req); err != nil || !repeat || !now.Before(t.until) {
			return false, err
		}
	}
	return true, nil
}

// release deletes e, keeps req for its key and announces it. b.mu must be
// held.
func (b *Backend) release(e *entry, req backend.Request, now time.Time) {
	b.remove(e)
	if req.ID != "" {
		b.released[e.key] = tombstone{req: req, until: e.expires}
		b.lapse(e.key, e.expires, lapseTombstone)
	} else {
		delete(b.released, e.key)
	}
	b.emit(backend.Event{Type: backend.EventReleased, Record: e.record(now)})
}

// releaseGrant releases the grant of p that req.OwnerToken holds. b.mu must
// be held.
func (b *Backend) releaseGrant(p *pool, req backend.ReleaseRequest, now time.Time) (bool, error) {
	g := p.grant(req.OwnerToken)
	if g == nil {
		return b.releasedBefore([]string{req.Key}, req.Request, now)
	}
	if req.Abandon && g.claimed {
		return false, nil
	}
	p.stamp = hlc.Max(p.stamp, req.Stamp)
	b.release(g, req.Request, now)
	return true, nil
}

// Extend implements backend.Backend: a set of one. The record keeps its
// acquisition stamp.
func (b *Backend) Extend(_ context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := checkExtend(req); err != nil {
		return backend.ExtendResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ExtendResult{}, ErrClosed
	}
	return b.extend(req, time.Now())
}

func checkExtend(req backend.ExtendRequest) error {
	if err := checkKey(req.Key); err != nil {
		return err
	}
	return checkTTL(req.TTL)
}

// extend renews req's lease: a grant of the key's pool, or a set of one.
// b.mu must be held, on an open backend.
func (b *Backend) extend(req backend.ExtendRequest, now time.Time) (backend.ExtendResult, error) {
	if p := b.livePool(req.Key, now); p != nil {
		return b.extendGrant(p, req, now)
	}
	// A set of one, without the set's slices: a watchdog renews hundreds
	// of keys a call.
	e := b.live(req.Key, now)
	if e == nil || req.OwnerToken == "" || e.token != req.OwnerToken {
		return backend.ExtendResult{}, nil
	}
	if _, err := backend.Repeat(e.request, req.Request); err != nil {
		return backend.ExtendResult{}, err
	}
	return backend.ExtendResult{Extended: true, Record: b.renewEntry(e, req.TTL, req.Request, now)}, nil
}

// renewEntry renews the held entry e for ttl from now, under req (a zero
// Request keeps e's own), and returns its record. b.mu must be held.
func (b *Backend) renewEntry(e *entry, ttl time.Duration, req backend.Request, now time.Time) backend.Record {
	b.renew(e, now.Add(ttl))
	if req.ID != "" {
		e.request = req
	}
	return e.record(now)
}

// extendGrant renews the grant of p that req.OwnerToken holds. b.mu must be
// held.
func (b *Backend) extendGrant(p *pool, req backend.ExtendRequest, now time.Time) (backend.ExtendResult, error) {
	g := p.grant(req.OwnerToken)
	if g == nil {
		return backend.ExtendResult{}, nil
	}
	if _, err := backend.Repeat(g.request, req.Request); err != nil {
		return backend.ExtendResult{}, err
	}
	b.renew(g, now.Add(req.TTL))
	if req.Request.ID != "" {
		g.request = req.Request
	}
	return backend.ExtendResult{Extended: true, Record: g.record(now)}, nil
}

// Proclaim implements backend.ElectionBackend: the value of the election
// grant req.OwnerToken holds is replaced, and nothing else of it.
func (b *Backend) Proclaim(_ context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	if err := checkKey(req.Key); err != nil {
		return backend.ProclaimResult{}, err
	}
	if len(req.Value) > backend.MaxValueBytes {
		return backend.ProclaimResult{}, fmt.Errorf("%w: value of %d bytes exceeds the maximum %d", backend.ErrInvalidArgument, len(req.Value), backend.MaxValueBytes)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ProclaimResult{}, ErrClosed
	}
	now := time.Now()
	p := b.livePool(req.Key, now)
	if p == nil || p.kind != backend.KindElection {
		return backend.ProclaimResult{}, nil
	}
	g := p.grant(req.OwnerToken)
	if g == nil {
		return backend.ProclaimResult{}, nil
	}
	g.value = req.Value
	p.stamp = hlc.Max(p.stamp, req.Stamp)
	rec := g.record(now)
	b.emit(backend.Event{Type: backend.EventProclaimed, Record: rec})
	return backend.ProclaimResult{Proclaimed: true, Record: rec}, nil
}

// ExtendSet implements backend.SetBackend. A zero Request keeps the
// entries' own.
func (b *Backend) ExtendSet(_ context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	if err := checkSet(len(req.Keys)); err != nil {
		return backend.ExtendSetResult{}, err
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendSetResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ExtendSetResult{}, ErrClosed
	}
	return b.extendSet(req, time.Now())
}

// extendSet renews every key of req if its owner token holds them all.
// b.mu must be held, on an open backend.
func (b *Backend) extendSet(req backend.ExtendSetRequest, now time.Time) (backend.ExtendSetResult, error) {
	held, ok := b.heldBy(req.Keys, req.OwnerToken, now)
	if !ok {
		return backend.ExtendSetResult{}, nil
	}
	for _, e := range held {
		if _, err := backend.Repeat(e.request, req.Request); err != nil {
			return backend.ExtendSetResult{}, err
		}
	}
	res := backend.ExtendSetResult{Extended: true, Records: make([]backend.Record, len(held))}
	for i, e := range held {
		res.Records[i] = b.renewEntry(e, req.TTL, req.Request, now)
	}
	return res, nil
}

// AcquireBatch implements backend.BatchBackend: each item decided by
// Acquire, in order, so that request ids and lock-delays hold per item
// exactly as they do for single calls. The store is this process's memory:
// a batch saves the plugin hops, and there is no round trip to save.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.Outcome[backend.AcquireResult], error) {
	return eachItem(ctx, reqs, b.Acquire)
}

// ReleaseBatch implements backend.BatchBackend, item by item as Release.
func (b *Backend) ReleaseBatch(ctx context.Context, reqs []backend.ReleaseRequest) ([]backend.Outcome[bool], error) {
	return eachItem(ctx, reqs, b.Release)
}

// extendChunk is how many items of an ExtendBatch are decided under one
// hold of the mutex. One hold per item made a watchdog's batch of 500 take
// the mutex 500 times against every other batch in flight; one hold per
// batch would keep single calls waiting behind the whole batch. A chunk
// holds it for tens of microseconds.
const extendChunk = 64

// ExtendBatch implements backend.BatchBackend: each item decided as Extend
// decides it, with its own outcome, extendChunk items to a hold of the
// mutex.
func (b *Backend) ExtendBatch(_ context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	out := make([]backend.Outcome[backend.ExtendResult], len(reqs))
	for start := 0; start < len(reqs); start += extendChunk {
		chunk := reqs[start:min(start+extendChunk, len(reqs))]
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, ErrClosed
		}
		for i, r := range chunk {
			o := &out[start+i]
			if o.Err = checkExtend(r); o.Err == nil {
				o.Value, o.Err = b.extend(r, time.Now())
			}
		}
		b.mu.Unlock()
	}
	return out, nil
}

// eachItem decides reqs in order with the single call, each item's error
// its own; a closed backend fails the whole batch, as it fails every call.
func eachItem[Req, Res any](ctx context.Context, reqs []Req, call func(context.Context, Req) (Res, error)) ([]backend.Outcome[Res], error) {
	out := make([]backend.Outcome[Res], len(reqs))
	for i, r := range reqs {
		v, err := call(ctx, r)
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		out[i] = backend.Outcome[Res]{Value: v, Err: err}
	}
	return out, nil
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
	if p := b.livePool(key, now); p != nil {
		return p.blocker(now), true, nil
	}
	e := b.live(key, now)
	if e == nil {
		if d := b.delayed(key, now); d > 0 {
			return backend.Record{Key: key, DelayRemaining: d}, false, nil
		}
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

// List implements backend.Backend: one walk of the ordered index from the
// page's first key, O(log n + page) under the mutex. A pool counts as its
// grants, and its grants are never split across pages.
func (b *Backend) List(_ context.Context, req backend.ListRequest) (backend.ListPage, error) {
	if req.PageSize < 1 {
		return backend.ListPage{}, fmt.Errorf("%w: page_size must be at least 1, got %d", backend.ErrInvalidArgument, req.PageSize)
	}
	from := req.Prefix
	if req.PageToken != "" {
		after, err := decodePageToken(req.PageToken)
		if err != nil {
			return backend.ListPage{}, err
		}
		// The smallest key after the token's.
		if next := after + "\x00"; next > from {
			from = next
		}
	}
	// The page's slices are made before the mutex is taken: they are a
	// List's large allocations (a record is some 180 bytes, a page of a
	// thousand 180 KB), and an allocation may be made to help the GC mark
	// the heap of every held lock, which under the mutex every Acquire
	// would wait for. (A page of fewer keys than its size wastes the rest;
	// past listPrealloc the slices grow as they fill.)
	held := make([]indexed, 0, min(req.PageSize, listPrealloc)) // in key order
	records := make([]backend.Record, 0, min(req.PageSize, listPrealloc))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ListPage{}, ErrClosed
	}
	now := time.Now()
	var (
		expired []*entry
		grants  int  // counted in held
		more    bool // a held key after the page
	)
	b.ordered.AscendGreaterOrEqual(indexed{key: from}, func(it indexed) bool {
		if !strings.HasPrefix(it.key, req.Prefix) {
			return false
		}
		live := 0
		if e := it.lock; e != nil {
			if now.Before(e.expires) {
				live = 1
			} else {
				expired = append(expired, e)
			}
		} else {
			for _, g := range it.pool.grants {
				if now.Before(g.expires) {
					live++
				} else {
					expired = append(expired, g)
				}
			}
		}
		if live == 0 {
			return true // expired below, not while walking
		}
		if grants >= req.PageSize {
			more = true
			return false
		}
		held = append(held, it)
		grants += live
		return true
	})
	// A held pool keeps its live grants (and so its place) through the
	// expiry of the others.
	for _, e := range expired {
		b.expire(e, now)
	}
	var page backend.ListPage
	if more {
		page.NextPageToken = encodePageToken(held[len(held)-1].key)
	}
	for _, it := range held {
		if it.pool != nil {
			records = append(records, it.pool.blocker(now))
		} else {
			records = append(records, it.lock.record(now))
		}
	}
	page.Records = records
	return page, nil
}

// listPrealloc bounds the records a List makes room for before it takes
// the mutex: the server's largest page (engine.MaxPageSize).
const listPrealloc = 1000

// Count implements backend.CountBackend in O(1): the mutexes' map and a
// counter of the pools' grants. A lease whose TTL ran out and that the
// reaper has not yet deleted (a millisecond or so) still counts.
func (b *Backend) Count(context.Context) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, ErrClosed
	}
	return int64(len(b.locks) + b.grants), nil
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
		wait := b.sweep(time.Now())
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

// sweep expires the entries whose expiry has come, sifts those renewed
// since they were sifted (due passed, expires not), forgets the lapses
// whose time has come, and returns how long until the next is due (-1:
// nothing). b.mu must be held.
func (b *Backend) sweep(now time.Time) time.Duration {
	for len(b.expiries) > 0 && !now.Before(b.expiries[0].due) {
		if e := b.expiries[0].e; now.Before(e.expires) {
			e.due = e.expires
			b.expiries.fix(0)
			continue
		}
		b.expire(b.expiries[0].e, now)
	}
	b.forget(now)
	var wait time.Duration = -1
	if len(b.expiries) > 0 {
		wait = b.expiries[0].due.Sub(now)
	}
	if len(b.lapses) > 0 {
		if d := b.lapses[0].at.Sub(now); wait < 0 || d < wait {
			wait = d
		}
	}
	return wait
}

// expiryHeap is a min-heap of the held entries by due. It is 4-ary, and
// each slot keeps its entry's due beside the entry, so that a sift compares
// neighbouring slots instead of loading an entry per comparison: with
// 100,000 leases under renewal, the reaper's re-sifts (binary, through the
// entries) were a seventh of the plugin's CPU, all of it under the mutex.
type expiryHeap []expirySlot

type expirySlot struct {
	due time.Time // e.due, as of the slot's last sift
	e   *entry
}

const heapArity = 4

// push adds e at its due.
func (h *expiryHeap) push(e *entry) {
	*h = append(*h, expirySlot{due: e.due, e: e})
	h.up(len(*h) - 1)
}

// fix restores the order after the due of the entry at i changed.
func (h expiryHeap) fix(i int) {
	h[i].due = h[i].e.due
	if !h.up(i) {
		h.down(i)
	}
}

// remove takes out the entry at i.
func (h *expiryHeap) remove(i int) {
	old := *h
	last := len(old) - 1
	old[i].e.index = -1
	old[i] = old[last]
	old[last] = expirySlot{}
	*h = old[:last]
	if i < last {
		h.fix(i)
	}
}

// up moves the slot at i towards the root while it is due before its
// parent, and says whether it moved.
func (h expiryHeap) up(i int) bool {
	s, start := h[i], i
	for i > 0 {
		parent := (i - 1) / heapArity
		if !s.due.Before(h[parent].due) {
			break
		}
		h[i] = h[parent]
		h[i].e.index = i
		i = parent
	}
	h[i] = s
	s.e.index = i
	return i != start
}

// down moves the slot at i towards the leaves while a child is due before it.
func (h expiryHeap) down(i int) {
	s := h[i]
	for {
		first := heapArity*i + 1
		if first >= len(h) {
			break
		}
		least := first
		for c := first + 1; c < min(first+heapArity, len(h)); c++ {
			if h[c].due.Before(h[least].due) {
				least = c
			}
		}
		if !h[least].due.Before(s.due) {
			break
		}
		h[i] = h[least]
		h[i].e.index = i
		i = least
	}
	h[i] = s
	s.e.index = i
}

// What a key keeps after its lease lapses at its time.
const (
	lapseDelay = iota
	lapseTombstone
)

// lapse is a lock-delay or a tombstone of key that ends at at.
type lapse struct {
	key  string
	kind int
	at   time.Time
}

// lapse schedules the end of what key keeps. b.mu must be held.
func (b *Backend) lapse(key string, at time.Time, kind int) {
	heap.Push(&b.lapses, lapse{key: key, kind: kind, at: at})
	if b.lapses[0].at.Equal(at) {
		b.wakeReaper()
	}
}

// forget drops the lock-delays and tombstones whose time has come (unless
// a later one replaced them). b.mu must be held.
func (b *Backend) forget(now time.Time) {
	for len(b.lapses) > 0 && !now.Before(b.lapses[0].at) {
		l := heap.Pop(&b.lapses).(lapse)
		switch l.kind {
		case lapseDelay:
			if b.delays[l.key].Equal(l.at) {
				delete(b.delays, l.key)
			}
		case lapseTombstone:
			if b.released[l.key].until.Equal(l.at) {
				delete(b.released, l.key)
			}
		}
	}
}

// lapseHeap orders lapses by time (container/heap).
type lapseHeap []lapse

func (h lapseHeap) Len() int           { return len(h) }
func (h lapseHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h lapseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lapseHeap) Push(x any)        { *h = append(*h, x.(lapse)) }
func (h *lapseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	*h = old[:len(old)-1]
	return l
}
