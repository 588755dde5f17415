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
// etcd backend (backend.FairBackend).
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
	// queues, for Fair only: the waiter IDs per key, head first.
	queues map[string][]string
	// turn is closed and replaced whenever a queue changes (WaitTurn waits
	// on it).
	turn chan struct{}
}

type lock struct {
	key, token, holder string
	fence              uint64
	stamp              hlc.Timestamp
	expires            time.Time // with the monotonic reading
	timer              *time.Timer
}

func (l *lock) record(now time.Time) backend.Record {
	return backend.Record{
		Key: l.key, FencingToken: l.fence, Holder: l.holder,
		ExpiresAt: l.expires.Round(0), Remaining: max(l.expires.Sub(now), 0), Stamp: l.stamp,
	}
}

type watcher struct {
	prefix string
	events chan backend.Event
	ended  chan struct{} // closed when the watcher fell behind or the fake closed
}

var _ backend.Backend = (*Backend)(nil)

// New returns a fake that is not fair.
func New() *Backend {
	return &Backend{
		locks:    map[string]*lock{},
		fences:   map[string]uint64{},
		stamps:   map[string]hlc.Timestamp{},
		watchers: map[*watcher]struct{}{},
		queues:   map[string][]string{},
		turn:     make(chan struct{}),
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
	return backend.Info{Name: Name, Version: "test", TTLGranularity: TTLGranularity, MinTTL: MinTTL, MaxTTL: MaxTTL}, nil
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

// drop deletes l and reports it as ended by typ. b.mu must be held.
func (b *Backend) drop(l *lock, typ backend.EventType, now time.Time) {
	l.timer.Stop()
	delete(b.locks, l.key)
	b.emit(backend.Event{Type: typ, Record: l.record(now)})
}

// Acquire implements backend.Backend: it takes key if it is free and, for a
// fair fake, if req.WaiterID is the head of key's queue (empty: only when
// nobody is queued).
func (b *Backend) Acquire(_ context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.AcquireResult{}, err
	}
	now := time.Now()
	if l := b.held(req.Key, now); l != nil {
		return backend.AcquireResult{Record: l.record(now)}, nil
	}
	if q := b.queues[req.Key]; len(q) > 0 && q[0] != req.WaiterID {
		return backend.AcquireResult{}, nil // free, but not this caller's turn
	}
	if req.WaiterID != "" {
		if q := b.queues[req.Key]; len(q) == 0 || q[0] != req.WaiterID {
			return backend.AcquireResult{}, nil // not queued (any more)
		}
		b.removeWaiter(req.Key, req.WaiterID)
	}
	// Never below the wall clock: a plugin process of the fake (the fair
	// one the conformance suite runs) starts above every token the process
	// before it handed out, as plugins/memory does.
	b.fences[req.Key] = max(b.fences[req.Key]+1, uint64(now.UnixNano()))
	stamp := backend.NextStamp(b.stamps[req.Key], req.Stamp)
	b.stamps[req.Key] = stamp
	l := &lock{key: req.Key, token: req.OwnerToken, holder: req.Holder, fence: b.fences[req.Key], stamp: stamp, expires: now.Add(req.TTL)}
	l.timer = time.AfterFunc(req.TTL, func() { b.expire(l) })
	b.locks[req.Key] = l
	b.emit(backend.Event{Type: backend.EventAcquired, Record: l.record(now)})
	return backend.AcquireResult{Acquired: true, Record: l.record(now)}, nil
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

// Release implements backend.Backend.
func (b *Backend) Release(_ context.Context, req backend.ReleaseRequest) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return false, err
	}
	now := time.Now()
	l := b.held(req.Key, now)
	if l == nil || req.OwnerToken == "" || l.token != req.OwnerToken {
		return false, nil
	}
	b.stamps[req.Key] = hlc.Max(b.stamps[req.Key], req.Stamp)
	b.drop(l, backend.EventReleased, now)
	return true, nil
}

// Extend implements backend.Backend.
func (b *Backend) Extend(_ context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.ExtendResult{}, err
	}
	now := time.Now()
	l := b.held(req.Key, now)
	if l == nil || req.OwnerToken == "" || l.token != req.OwnerToken {
		return backend.ExtendResult{}, nil
	}
	l.expires = now.Add(req.TTL)
	l.timer.Reset(req.TTL)
	return backend.ExtendResult{Extended: true, Record: l.record(now)}, nil
}

// Get implements backend.Backend.
func (b *Backend) Get(_ context.Context, key string) (backend.Record, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.Record{}, false, err
	}
	now := time.Now()
	if l := b.held(key, now); l != nil {
		return l.record(now), true, nil
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
