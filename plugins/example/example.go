// Package example is a complete holdfast backend, written the way a third
// party writes one: it imports github.com/holdfast/holdfast/core/backend (the
// interface, its plain types and errors, Serve) and proto/hlc (the stamp
// type), and nothing else from holdfast. docs/writing-a-backend.md walks
// through it.
//
// The store is one map guarded by one mutex, inside the plugin process. That
// makes every promise easy to see, because each is decided in one critical
// section. What it declares in Info follows from that choice:
//
//   - shared=false: each holdfast server that starts this plugin has its own
//     map, so two servers are two lock spaces (the suite then skips the
//     cross-server specs and says why);
//   - durable=false: the locks live in the plugin process and die with it
//     (the suite skips the survives-a-restart specs). Fencing tokens must
//     still never go back across a restart; see nextFence.
//
// A backend over a real store (a database, a consensus system) makes the
// same decisions in one transaction or one compare-and-set of that store,
// never by a read followed by a write.
package example

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

const (
	// Name and Version are what Info reports (and `holdfast serve` prints).
	Name    = "example"
	Version = "0.1.0"
	// MinTTL and DefaultMaxTTL bound the leases the store accepts. Declaring
	// bounds lets the server refuse bad TTLs with a clear error, and the
	// suite checks that we refuse them too.
	MinTTL        = 10 * time.Millisecond
	DefaultMaxTTL = time.Hour
	// TTLGranularity: a lock is free the instant its TTL runs out, because
	// every call compares the expiry with the clock. The granularity covers
	// only the EventExpired that a timer sends, which Go fires within about
	// a millisecond on an idle machine.
	TTLGranularity = time.Millisecond
	// watchBuffer is how far one watcher may fall behind before its watch
	// is ended (the engine then watches again).
	watchBuffer = 256
)

// ErrClosed answers calls after Close. It wraps backend.ErrUnavailable:
// anything that is not ErrInvalidArgument reaches clients as unavailable,
// and saying so explicitly documents that a retry may succeed.
var ErrClosed = fmt.Errorf("%w: example backend closed", backend.ErrUnavailable)

// Open is the backendserver.OpenFunc that backendserver.Serve calls with the
// options of `holdfast serve --backend-opt key=value`. It refuses options it
// does not know: a typo must not run silently with defaults.
func Open(_ context.Context, opts map[string]string) (backend.Backend, error) {
	maxTTL := DefaultMaxTTL
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		switch v := opts[k]; k {
		case "max_ttl":
			d, err := time.ParseDuration(v)
			if err != nil || d < MinTTL {
				return nil, fmt.Errorf("%w: example: option max_ttl=%q: want a duration of at least %s",
					backend.ErrInvalidArgument, v, MinTTL)
			}
			maxTTL = d
		default:
			return nil, fmt.Errorf("%w: example: unknown option %q (known: max_ttl)", backend.ErrInvalidArgument, k)
		}
	}
	// backendserver.Serve points slog at stderr; stdout belongs to the handshake.
	slog.Info("example backend open", "max_ttl", maxTTL.String())
	return New(maxTTL), nil
}

// Store is the example backend. It is safe for concurrent use.
type Store struct {
	maxTTL time.Duration
	done   chan struct{} // closed by Close: ends every Watch

	mu     sync.Mutex // guards everything below; every decision is made under it
	closed bool
	locks  map[string]*lock
	// lastStamp is each key's last stamp, kept after release so the next
	// holder's stamp comes after it (promise 6). It grows with the number of
	// distinct keys; a real store keeps it in the key's row.
	lastStamp map[string]hlc.Timestamp
	lastFence uint64
	watchers  map[*watcher]struct{}
}

// lock is a held lock.
type lock struct {
	rec     backend.Record // Key, FencingToken, Holder, Stamp
	token   string         // the owner token: never leaves the store
	expires time.Time      // carries Go's monotonic reading: immune to clock steps
	timer   *time.Timer    // sends EventExpired when the lease runs out
}

func (l *lock) record(now time.Time) backend.Record {
	r := l.rec
	r.ExpiresAt = l.expires.Round(0) // wall clock only, as it travels over the wire
	r.Remaining = max(l.expires.Sub(now), 0)
	return r
}

// New returns an empty store accepting TTLs up to maxTTL.
func New(maxTTL time.Duration) *Store {
	return &Store{
		maxTTL:    maxTTL,
		done:      make(chan struct{}),
		locks:     map[string]*lock{},
		lastStamp: map[string]hlc.Timestamp{},
		watchers:  map[*watcher]struct{}{},
	}
}

// Close stops the expiry timers and ends every watch. backendserver.Serve
// calls it (through io.Closer) when the host shuts the plugin down.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
		for _, l := range s.locks {
			l.timer.Stop()
		}
	}
	return nil
}

// Info implements backend.Backend. The engine reads it at start-up and after
// every plugin restart; the suite decides from it which specs apply.
func (s *Store) Info(context.Context) (backend.Info, error) {
	return backend.Info{
		Name: Name, Version: Version,
		Shared: false, Durable: false, Fair: false,
		TTLGranularity: TTLGranularity, MinTTL: MinTTL, MaxTTL: s.maxTTL,
	}, nil
}

func (s *Store) checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > s.maxTTL {
		return fmt.Errorf("%w: ttl %s is outside the example backend's range [%s, %s]",
			backend.ErrInvalidArgument, ttl, MinTTL, s.maxTTL)
	}
	return nil
}

// live returns the unexpired lock on key. A lock whose TTL has run out is
// expired here and now, whether or not its timer has fired yet: the store is
// the authority on expiry, and its answer must not depend on timer latency.
// s.mu must be held.
func (s *Store) live(key string, now time.Time) *lock {
	l := s.locks[key]
	if l != nil && !now.Before(l.expires) {
		s.drop(l, backend.EventExpired, now)
		return nil
	}
	return l
}

// drop deletes a lock and tells the watchers why. s.mu must be held.
func (s *Store) drop(l *lock, why backend.EventType, now time.Time) {
	l.timer.Stop()
	delete(s.locks, l.rec.Key)
	s.emit(backend.Event{Type: why, Record: l.record(now)})
}

// nextFence returns the next fencing token. It is one counter for the whole
// store, never below the wall clock in nanoseconds: a restarted plugin starts
// with an empty map and a zero counter, yet its first token is above every
// token the previous process handed out, because the clock has moved on
// since. (The assumption, stated: the host's clock is not stepped back while
// the plugin restarts. A durable store keeps the counter instead, e.g. an
// etcd revision or a database sequence.) s.mu must be held.
func (s *Store) nextFence(now time.Time) uint64 {
	s.lastFence = max(s.lastFence+1, uint64(now.UnixNano()))
	return s.lastFence
}

// Acquire implements backend.Backend. "Store only if absent or expired" is
// decided under one mutex: N racing acquirers see exactly one winner.
func (s *Store) Acquire(_ context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Key == "" || req.OwnerToken == "" {
		return backend.AcquireResult{}, fmt.Errorf("%w: key and owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := s.checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.AcquireResult{}, ErrClosed
	}
	now := time.Now()
	if held := s.live(req.Key, now); held != nil {
		// Contention is not an error: report the holder (never its token).
		return backend.AcquireResult{Acquired: false, Record: held.record(now)}, nil
	}
	// The stamp comes after the key's previous holder's even when the
	// proposing server's clock is behind (backend.NextStamp).
	stamp := backend.NextStamp(s.lastStamp[req.Key], req.Stamp)
	s.lastStamp[req.Key] = stamp
	l := &lock{
		rec: backend.Record{
			Key: req.Key, Holder: req.Holder, Stamp: stamp,
			FencingToken: s.nextFence(now),
		},
		token:   req.OwnerToken,
		expires: now.Add(req.TTL),
	}
	l.timer = time.AfterFunc(req.TTL, func() { s.expireByTimer(l) })
	s.locks[req.Key] = l
	rec := l.record(now)
	s.emit(backend.Event{Type: backend.EventAcquired, Record: rec})
	return backend.AcquireResult{Acquired: true, Record: rec}, nil
}

// expireByTimer sends EventExpired for l if it is still the key's lock and
// its lease has run out. The lock may have been released, extended or taken
// over while the timer fired, so this checks rather than assumes.
func (s *Store) expireByTimer(l *lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.locks[l.rec.Key] == l {
		s.live(l.rec.Key, time.Now())
	}
}

// holds reports whether l is held by token, compared in constant time: owner
// tokens are secrets, and timing must not leak how much of a guess matched.
func holds(l *lock, token string) bool {
	return l != nil && token != "" && subtle.ConstantTimeCompare([]byte(l.token), []byte(token)) == 1
}

// Release implements backend.Backend. The token is compared in the same
// critical section that deletes, so a stale holder (whose lease expired and
// was taken over) can never delete its successor's lock: it gets false.
func (s *Store) Release(_ context.Context, req backend.ReleaseRequest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	now := time.Now()
	l := s.live(req.Key, now)
	if !holds(l, req.OwnerToken) {
		return false, nil // not an error: the caller simply no longer holds it
	}
	// A release stamped later than the acquisition moves the key's last
	// stamp on, so the next holder is stamped after the release too.
	s.lastStamp[req.Key] = hlc.Max(s.lastStamp[req.Key], req.Stamp)
	s.drop(l, backend.EventReleased, now)
	return true, nil
}

// Extend implements backend.Backend: TTL counted from now, same token
// compare as Release. The lock keeps its acquisition's stamp and token.
func (s *Store) Extend(_ context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := s.checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ExtendResult{}, ErrClosed
	}
	now := time.Now()
	l := s.live(req.Key, now)
	if !holds(l, req.OwnerToken) {
		return backend.ExtendResult{}, nil
	}
	l.expires = now.Add(req.TTL)
	l.timer.Reset(req.TTL)
	return backend.ExtendResult{Extended: true, Record: l.record(now)}, nil
}

// Get implements backend.Backend.
func (s *Store) Get(_ context.Context, key string) (backend.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.Record{}, false, ErrClosed
	}
	now := time.Now()
	if l := s.live(key, now); l != nil {
		return l.record(now), true, nil
	}
	return backend.Record{}, false, nil
}

// List implements backend.Backend. The page token is the last key returned,
// encoded so that callers treat it as opaque.
func (s *Store) List(_ context.Context, req backend.ListRequest) (backend.ListPage, error) {
	if req.PageSize < 1 {
		return backend.ListPage{}, fmt.Errorf("%w: page_size must be at least 1", backend.ErrInvalidArgument)
	}
	after, err := base64.RawURLEncoding.DecodeString(req.PageToken)
	if err != nil {
		return backend.ListPage{}, fmt.Errorf("%w: page_token is not one this backend issued", backend.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ListPage{}, ErrClosed
	}
	now := time.Now()
	var keys []string
	for _, k := range slices.Collect(maps.Keys(s.locks)) { // a copy: live may delete
		if strings.HasPrefix(k, req.Prefix) && k > string(after) && s.live(k, now) != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var page backend.ListPage
	if len(keys) > req.PageSize {
		keys = keys[:req.PageSize]
		page.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(keys[len(keys)-1]))
	}
	for _, k := range keys {
		page.Records = append(page.Records, s.locks[k].record(now))
	}
	return page, nil
}

// watcher is one Watch call's mailbox.
type watcher struct {
	prefix  string
	events  chan backend.Event
	dropped chan struct{} // closed when the mailbox overflowed
}

// emit hands ev to every watcher of its key without blocking: a slow watcher
// must never stall Acquire. One that falls too far behind is dropped, and
// its Watch returns ErrUnavailable so the engine watches again and re-reads
// the state. s.mu must be held, so watchers see changes in the order made.
func (s *Store) emit(ev backend.Event) {
	for w := range s.watchers {
		if !strings.HasPrefix(ev.Record.Key, w.prefix) {
			continue
		}
		select {
		case w.events <- ev:
		default:
			delete(s.watchers, w)
			close(w.dropped)
		}
	}
}

// Watch implements backend.Backend. It registers the watcher under the mutex
// and only then sends EventSynced: from that moment every change reaches it.
// The engine relies on that order: it reads the state after EventSynced and
// takes every later change from the events, so none falls in between.
func (s *Store) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	w := &watcher{prefix: prefix, events: make(chan backend.Event, watchBuffer), dropped: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
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
		case <-w.dropped:
			return fmt.Errorf("%w: example: watcher fell %d events behind; watch again", backend.ErrUnavailable, watchBuffer)
		case <-s.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
