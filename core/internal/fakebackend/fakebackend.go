// Package fakebackend is an in-memory backend.Backend for the tests of the
// engine and of the code around it, inside core: core cannot use the real
// backends, which live in modules that require core. It keeps the
// promises the engine relies on (atomic acquire, owner tokens compared,
// expiry by the monotonic clock with an EventExpired from a timer, fencing
// tokens increasing per key, NextStamp, a watch that syncs first) in the
// plainest way: one mutex, one map, one timer per lock.
//
// New is not fair, like the memory and Redis backends; NewFair keeps a FIFO
// queue per key, shared by every engine that uses the same Fair, like the
// etcd backend (backend.FairBackend). Both take sets of keys
// (backend.SetBackend; the fair one backend.FairSetBackend), keep request
// identities and keep lock-delays, as every in-tree backend does; a single
// key is a set of one.
//
// NewFair also runs as a plugin process
// (cmd/holdfast-backend-fakefair): the in-memory fair backend on which the
// conformance suite checks the fair queue and the engine's fair path, end
// to end, without etcd.
//
// It is not a backend to ship: it never forgets a key's fencing token or
// stamp, and it has no bounds.
package fakebackend

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// The Info of a fake.
const (
	Name           = "fake"
	MinTTL         = time.Millisecond
	MaxTTL         = 24 * time.Hour
	TTLGranularity = time.Millisecond
	MaxKeys        = 64
	MaxLockDelay   = time.Minute
)

// watchBuffer is how many events a watcher may fall behind before its watch
// ends with backend.ErrUnavailable.
const watchBuffer = 1024

// Backend is a fake that is not fair. Its methods are safe for concurrent
// use; Close it at the end.
type Backend struct {
	mu       sync.Mutex
	closed   bool
	locks    map[string]*lock
	fences   map[string]uint64        // last fencing token per key, kept forever, never below the wall clock
	stamps   map[string]hlc.Timestamp // last stamp per key, kept forever
	watchers map[*watcher]struct{}
	// delays: keys in their lock-delay, until when (monotonic).
	delays map[string]time.Time
	// released: the request identity of each key's last release.
	released map[string]backend.Request
	// queues, for Fair only: the waiter IDs per key, head first.
	queues map[string][]string
	// turn is closed and replaced whenever a queue changes (WaitTurn waits
	// on it).
	turn chan struct{}
	// kinds kept beside the mutex (KeepKinds), and the keys held by grants.
	kinds []backend.Kind
	pools map[string]*pool
}

type lock struct {
	key, token, holder string
	fence              uint64
	stamp              hlc.Timestamp
	expires            time.Time // with the monotonic reading
	timer              *time.Timer
	lockDelay          time.Duration
	request            backend.Request // of the last Acquire or Extend
	replay             string
	claimed            bool   // a replay of its Acquire was answered
	permits            int    // a grant's (grants.go)
	value              string // an election grant's (grants.go)
}

func (l *lock) record(now time.Time) backend.Record {
	return backend.Record{
		Key: l.key, FencingToken: l.fence, Holder: l.holder,
		ExpiresAt: l.expires.Round(0), Remaining: max(l.expires.Sub(now), 0), Stamp: l.stamp, LockDelay: l.lockDelay,
		Value: l.value,
	}
}

type watcher struct {
	prefix string
	events chan backend.Event
	ended  chan struct{} // closed when the watcher fell behind or the fake closed
}

var (
	_ backend.SetBackend      = (*Backend)(nil)
	_ backend.ElectionBackend = (*Backend)(nil)
)

// New returns a fake that is not fair.
func New() *Backend {
	return &Backend{
		locks:    map[string]*lock{},
		fences:   map[string]uint64{},
		stamps:   map[string]hlc.Timestamp{},
		watchers: map[*watcher]struct{}{},
		delays:   map[string]time.Time{},
		released: map[string]backend.Request{},
		queues:   map[string][]string{},
		turn:     make(chan struct{}),
		pools:    map[string]*pool{},
	}
}

// Close stops every expiry timer, ends every watch and makes later calls
// fail with backend.ErrUnavailable.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	for _, l := range b.locks {
		l.timer.Stop()
	}
	for _, p := range b.pools {
		for _, g := range p.grants {
			g.timer.Stop()
		}
	}
	for w := range b.watchers {
		b.endWatcher(w)
	}
	close(b.turn)
	return nil
}

func (b *Backend) check() error {
	if b.closed {
		return fmt.Errorf("%w: fake backend closed", backend.ErrUnavailable)
	}
	return nil
}

// Info implements backend.Backend.
func (b *Backend) Info(context.Context) (backend.Info, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return backend.Info{Name: Name, Version: "test", TTLGranularity: TTLGranularity, MinTTL: MinTTL, MaxTTL: MaxTTL,
		MaxKeys: MaxKeys, RequestIDs: true, MaxLockDelay: MaxLockDelay, Kinds: slices.Clone(b.kinds)}, nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl: %s is outside [%s, %s]", backend.ErrInvalidArgument, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// held returns key's lock if it has not expired. An expired lock is
// expired now (EventExpired), so every acquisition ends in one event. b.mu
// must be held.
func (b *Backend) held(key string, now time.Time) *lock {
	l := b.locks[key]
	if l == nil {
		return nil
	}
	if now.Before(l.expires) {
		return l
	}
	b.drop(l, backend.EventExpired, now)
	return nil
}

// drop deletes l and reports it as ended by typ; an expiry starts l's
// lock-delay (counted from when the lease ended). b.mu must be held.
func (b *Backend) drop(l *lock, typ backend.EventType, now time.Time) {
	l.timer.Stop()
	delete(b.locks, l.key)
	if typ == backend.EventExpired && l.lockDelay > 0 {
		b.delays[l.key] = l.expires.Add(l.lockDelay)
	}
	b.emit(backend.Event{Type: typ, Record: l.record(now)})
}

// delayed is how long key's lock-delay lasts from now (0: none). b.mu must
// be held.
func (b *Backend) delayed(key string, now time.Time) time.Duration {
	until, ok := b.delays[key]
	if !ok {
		return 0
	}
	if !now.Before(until) {
		delete(b.delays, key)
		return 0
	}
	return until.Sub(now)
}

// Acquire implements backend.Backend: a set of one, or a grant (grants.go).
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Kind != backend.KindMutex {
		if err := checkTTL(req.TTL); err != nil {
			return backend.AcquireResult{}, err
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.check(); err != nil {
			return backend.AcquireResult{}, err
		}
		return b.acquireGrant(req, time.Now())
	}
	res, err := b.AcquireSet(ctx, backend.AcquireSetRequest{
		Claims: []backend.Claim{{Key: req.Key}}, OwnerToken: req.OwnerToken, TTL: req.TTL, Holder: req.Holder, Stamp: req.Stamp,
		WaiterID: req.WaiterID, Request: req.Request, Replay: req.Replay, LockDelay: req.LockDelay, ReplayOnly: req.ReplayOnly,
	})
	if err != nil || !res.Acquired {
		return backend.AcquireResult{Record: res.Blocker}, err
	}
	return backend.AcquireResult{Acquired: true, Record: res.Records[0], Replayed: res.Replayed, Replay: res.Replay}, nil
}

// AcquireSet implements backend.SetBackend: it takes every key if each is
// free and, for a fair fake, if req.WaiterID is the head of each key's
// queue (empty: only when nobody is queued).
func (b *Backend) AcquireSet(_ context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireSetResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.AcquireSetResult{}, err
	}
	now := time.Now()
	held := make([]*lock, 0, len(req.Claims))
	for _, c := range req.Claims {
		if p := b.livePool(c.Key, now); p != nil {
			return backend.AcquireSetResult{Blocker: p.record(c.Key, nil, now)}, nil
		}
		if l := b.held(c.Key, now); l != nil {
			held = append(held, l)
		}
	}
	if len(held) == len(req.Claims) && req.Request.ID != "" {
		// A repeat: every key held under its request id and owner token.
		repeat := true
		for _, l := range held {
			ok, err := backend.Repeat(l.request, req.Request)
			if err != nil {
				return backend.AcquireSetResult{}, err
			}
			repeat = repeat && ok && l.token == held[0].token
		}
		if repeat {
			recs := make([]backend.Record, len(held))
			for i, l := range held {
				l.claimed = true
				recs[i] = l.record(now)
			}
			return backend.AcquireSetResult{Acquired: true, Records: recs, Replayed: true, Replay: held[0].replay}, nil
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
	for _, c := range req.Claims {
		q := b.queues[c.Key]
		if len(q) > 0 && q[0] != req.WaiterID || req.WaiterID != "" && len(q) == 0 {
			return backend.AcquireSetResult{}, nil // free, but not this caller's turn (or not queued any more)
		}
	}
	stamp := req.Stamp
	for _, c := range req.Claims {
		if req.WaiterID != "" {
			b.removeWaiter(c.Key, req.WaiterID)
		}
		stamp = backend.NextStamp(b.stamps[c.Key], stamp)
	}
	res := backend.AcquireSetResult{Acquired: true, Records: make([]backend.Record, len(req.Claims))}
	for i, c := range req.Claims {
		// Never below the wall clock: a plugin process of the fake (the fair
		// one the conformance suite runs) starts above every token the process
		// before it handed out, as plugins/memory does.
		b.fences[c.Key] = max(b.fences[c.Key]+1, uint64(now.UnixNano()))
		b.stamps[c.Key] = stamp
		l := &lock{key: c.Key, token: req.OwnerToken, holder: req.Holder, fence: b.fences[c.Key], stamp: stamp,
			expires: now.Add(req.TTL), lockDelay: req.LockDelay, request: req.Request, replay: req.Replay}
		l.timer = time.AfterFunc(req.TTL, func() { b.expire(l) })
		b.locks[c.Key] = l
		res.Records[i] = l.record(now)
		b.emit(backend.Event{Type: backend.EventAcquired, Record: res.Records[i]})
	}
	return res, nil
}

// expire is l's timer: it ends l unless it was released, taken over or
// extended since.
func (b *Backend) expire(l *lock) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.closed || b.locks[l.key] != l || now.Before(l.expires) {
		return
	}
	b.drop(l, backend.EventExpired, now)
}

// Release implements backend.Backend: a set of one, or a grant.
func (b *Backend) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	b.mu.Lock()
	if now := time.Now(); !b.closed {
		if p, g := b.grantOf(req.Key, req.OwnerToken, now); g != nil {
			defer b.mu.Unlock()
			if req.Abandon && g.claimed {
				return false, nil
			}
			b.stamps[req.Key] = hlc.Max(b.stamps[req.Key], req.Stamp)
			b.released[req.Key] = req.Request
			b.dropGrant(p, g, backend.EventReleased, now)
			return true, nil
		}
	}
	b.mu.Unlock()
	return b.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: []string{req.Key}, OwnerToken: req.OwnerToken, Stamp: req.Stamp,
		Request: req.Request, Abandon: req.Abandon})
}

// ReleaseSet implements backend.SetBackend.
func (b *Backend) ReleaseSet(_ context.Context, req backend.ReleaseSetRequest) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return false, err
	}
	now := time.Now()
	locks, ok := b.heldBy(req.Keys, req.OwnerToken, now)
	if !ok {
		// A repeat of a release that was done: every key keeps it.
		repeat := req.Request.ID != ""
		for _, k := range req.Keys {
			ok, err := backend.Repeat(b.released[k], req.Request)
			if err != nil {
				return false, err
			}
			repeat = repeat && ok
		}
		return repeat, nil
	}
	for _, l := range locks {
		if req.Abandon && l.claimed {
			return false, nil
		}
	}
	for _, l := range locks {
		b.stamps[l.key] = hlc.Max(b.stamps[l.key], req.Stamp)
		b.released[l.key] = req.Request
		b.drop(l, backend.EventReleased, now)
	}
	return true, nil
}

// heldBy returns the locks on keys if token holds every one of them. b.mu
// must be held.
func (b *Backend) heldBy(keys []string, token string, now time.Time) ([]*lock, bool) {
	locks := make([]*lock, len(keys))
	for i, k := range keys {
		l := b.held(k, now)
		if l == nil || token == "" || l.token != token {
			return nil, false
		}
		locks[i] = l
	}
	return locks, true
}

// Extend implements backend.Backend: a set of one, or a grant.
func (b *Backend) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	b.mu.Lock()
	if now := time.Now(); !b.closed {
		if p, g := b.grantOf(req.Key, req.OwnerToken, now); g != nil {
			defer b.mu.Unlock()
			if _, err := backend.Repeat(g.request, req.Request); err != nil {
				return backend.ExtendResult{}, err
			}
			g.expires = now.Add(req.TTL)
			g.timer.Reset(req.TTL)
			if req.Request.ID != "" {
				g.request = req.Request
			}
			return backend.ExtendResult{Extended: true, Record: p.record(req.Key, g, now)}, nil
		}
	}
	b.mu.Unlock()
	res, err := b.ExtendSet(ctx, backend.ExtendSetRequest{Keys: []string{req.Key}, OwnerToken: req.OwnerToken, TTL: req.TTL,
		Stamp: req.Stamp, Request: req.Request})
	if err != nil || !res.Extended {
		return backend.ExtendResult{}, err
	}
	return backend.ExtendResult{Extended: true, Record: res.Records[0]}, nil
}

// ExtendSet implements backend.SetBackend. A zero Request keeps the
// locks' own.
func (b *Backend) ExtendSet(_ context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendSetResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.ExtendSetResult{}, err
	}
	now := time.Now()
	locks, ok := b.heldBy(req.Keys, req.OwnerToken, now)
	if !ok {
		return backend.ExtendSetResult{}, nil
	}
	for _, l := range locks {
		if _, err := backend.Repeat(l.request, req.Request); err != nil {
			return backend.ExtendSetResult{}, err
		}
	}
	res := backend.ExtendSetResult{Extended: true, Records: make([]backend.Record, len(locks))}
	for i, l := range locks {
		l.expires = now.Add(req.TTL)
		l.timer.Reset(req.TTL)
		if req.Request.ID != "" {
			l.request = req.Request
		}
		res.Records[i] = l.record(now)
	}
	return res, nil
}

// Get implements backend.Backend.
func (b *Backend) Get(_ context.Context, key string) (backend.Record, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.Record{}, false, err
	}
	now := time.Now()
	if p := b.livePool(key, now); p != nil {
		return p.record(key, nil, now), true, nil
	}
	if l := b.held(key, now); l != nil {
		return l.record(now), true, nil
	}
	if d := b.delayed(key, now); d > 0 {
		return backend.Record{Key: key, DelayRemaining: d}, false, nil
	}
	return backend.Record{}, false, nil
}

// pageTokenPrefix marks List's page tokens as this fake's.
const pageTokenPrefix = "fake1."

// List implements backend.Backend. The page token is the last key of the
// page before, base64url-encoded after pageTokenPrefix.
func (b *Backend) List(_ context.Context, req backend.ListRequest) (backend.ListPage, error) {
	var after []byte
	if req.PageToken != "" {
		enc, ok := strings.CutPrefix(req.PageToken, pageTokenPrefix)
		var err error
		if after, err = base64.RawURLEncoding.DecodeString(enc); !ok || err != nil {
			return backend.ListPage{}, fmt.Errorf("%w: page_token: not a token this backend issued", backend.ErrInvalidArgument)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.ListPage{}, err
	}
	now := time.Now()
	var keys []string
	for k := range b.locks {
		if strings.HasPrefix(k, req.Prefix) && k > string(after) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var page backend.ListPage
	for _, k := range keys {
		l := b.held(k, now)
		if l == nil {
			continue
		}
		if len(page.Records) == req.PageSize {
			page.NextPageToken = pageTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(page.Records[len(page.Records)-1].Key))
			break
		}
		page.Records = append(page.Records, l.record(now))
	}
	return page, nil
}

// Watch implements backend.Backend.
func (b *Backend) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	w := &watcher{prefix: prefix, events: make(chan backend.Event, watchBuffer), ended: make(chan struct{})}
	b.mu.Lock()
	if err := b.check(); err != nil {
		b.mu.Unlock()
		return err
	}
	b.watchers[w] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.endWatcher(w)
		b.mu.Unlock()
	}()
	if err := send(backend.Event{Type: backend.EventSynced}); err != nil {
		return err
	}
	for {
		select {
		case ev := <-w.events:
			if err := send(ev); err != nil {
				return err
			}
		case <-w.ended:
			return fmt.Errorf("%w: fake backend: the watch ended (closed, or the watcher fell behind)", backend.ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// emit queues ev for every watcher of its key; one that fell behind is
// ended. b.mu must be held.
func (b *Backend) emit(ev backend.Event) {
	for w := range b.watchers {
		if !strings.HasPrefix(ev.Record.Key, w.prefix) {
			continue
		}
		select {
		case w.events <- ev:
		default:
			b.endWatcher(w)
		}
	}
}

// endWatcher ends w's watch. b.mu must be held.
func (b *Backend) endWatcher(w *watcher) {
	if _, ok := b.watchers[w]; ok {
		delete(b.watchers, w)
		close(w.ended)
	}
}
