// Package filestore is a durable backend whose store allows one owner: every
// lock in one file, which the plugin process holds an exclusive lock on
// (flock) for as long as it runs. A second process on the same file is
// refused when it opens, as an embedded database (SQLite with an exclusive
// lock) refuses a second owner of its file. It exists for the conformance
// suite's own tests: it proves the single-instance support
// (Config.SingleInstance) through a real plugin and real servers, and the
// broken backends wrap it where a bug needs a durable store. It is not a
// backend to ship: it rewrites the whole file on every change.
//
// What it declares follows from that: shared=false (one owner), and
// durable=true: the file, written and synced before every answer, outlives
// the plugin process and the server. Expiry is by the wall clock, stored as
// an instant (a monotonic reading does not survive a restart); fencing
// tokens and each key's last stamp are kept in the file and never forgotten.
package filestore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// The Info of the store.
const (
	Name           = "filestore"
	Version        = "0.1.0"
	MinTTL         = 10 * time.Millisecond
	MaxTTL         = time.Hour
	TTLGranularity = 5 * time.Millisecond
	// watchBuffer is how far a watcher may fall behind before its watch
	// ends with backend.ErrUnavailable.
	watchBuffer = 1024
)

// ErrInUse is returned (wrapped) by Open when another process owns the file.
var ErrInUse = errors.New("filestore: the store is in use by another process (it allows one owner at a time)")

// state is what the file holds.
type state struct {
	Locks  map[string]*lock         `json:"locks"`
	Fences map[string]uint64        `json:"fences"` // each key's last fencing token
	Stamps map[string]hlc.Timestamp `json:"stamps"` // each key's last stamp
}

// lock is a held lock as stored; it may have expired (decided on access).
type lock struct {
	Token   string        `json:"token"`
	Holder  string        `json:"holder"`
	Fence   uint64        `json:"fence"`
	Stamp   hlc.Timestamp `json:"stamp"`
	Expires int64         `json:"expires"` // Unix nanoseconds, wall clock
}

func (l *lock) record(key string, now time.Time) backend.Record {
	exp := time.Unix(0, l.Expires)
	return backend.Record{
		Key: key, FencingToken: l.Fence, Holder: l.Holder, Stamp: l.Stamp,
		ExpiresAt: exp, Remaining: max(exp.Sub(now), 0),
	}
}

func (l *lock) expired(now time.Time) bool { return now.UnixNano() >= l.Expires }

// Store is the backend. Create it with Open; Close releases the file.
type Store struct {
	path  string
	owner *os.File // holds the exclusive lock on path+".lock"
	done  chan struct{}

	mu       sync.Mutex
	closed   bool
	st       state
	timers   map[string]*time.Timer // announce each lock's expiry
	watchers map[*watcher]struct{}
}

var _ backend.Backend = (*Store)(nil)

// Open is the backendserver.OpenFunc. It takes one option, path: the file
// that holds the locks (created when missing; path+".lock" is the lock
// file). It refuses the file while another process owns it (ErrInUse,
// wrapping backend.ErrUnavailable).
func Open(_ context.Context, opts map[string]string) (backend.Backend, error) {
	path := opts["path"]
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if k != "path" {
			return nil, fmt.Errorf("%w: filestore: unknown option %q (known: path)", backend.ErrInvalidArgument, k)
		}
	}
	if path == "" {
		return nil, fmt.Errorf("%w: filestore: option path (the file that holds the locks) is required", backend.ErrInvalidArgument)
	}
	s, err := New(path)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New opens the store in path.
func New(path string) (*Store, error) {
	owner, err := own(path + ".lock")
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, owner: owner, done: make(chan struct{}), timers: map[string]*time.Timer{}, watchers: map[*watcher]struct{}{}}
	s.st = state{Locks: map[string]*lock{}, Fences: map[string]uint64{}, Stamps: map[string]hlc.Timestamp{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		_ = owner.Close()
		return nil, fmt.Errorf("%w: filestore: %w", backend.ErrUnavailable, err)
	default:
		if err := json.Unmarshal(b, &s.st); err != nil {
			_ = owner.Close()
			return nil, fmt.Errorf("filestore: %s is not a store this backend wrote: %w", path, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, l := range s.st.Locks {
		s.arm(key, l)
	}
	return s, nil
}

// Close stops the expiry timers, ends every watch and releases the file. The
// locks stay in it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	for _, t := range s.timers {
		t.Stop()
	}
	return s.owner.Close() // closing the descriptor releases the flock
}

func (s *Store) check() error {
	if s.closed {
		return fmt.Errorf("%w: filestore closed", backend.ErrUnavailable)
	}
	return nil
}

// save writes the state to a new file and renames it over the old one, so a
// crash leaves either state whole. s.mu must be held.
func (s *Store) save() error {
	b, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("%w: filestore: %w", backend.ErrUnavailable, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		return fmt.Errorf("%w: filestore: write %s: %w", backend.ErrUnavailable, filepath.Base(s.path), err)
	}
	return nil
}

// Info implements backend.Backend.
func (s *Store) Info(context.Context) (backend.Info, error) {
	return backend.Info{
		Name: Name, Version: Version, Shared: false, Durable: true,
		TTLGranularity: TTLGranularity, MinTTL: MinTTL, MaxTTL: MaxTTL,
	}, nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %s is outside [%s, %s]", backend.ErrInvalidArgument, ttl, MinTTL, MaxTTL)
	}
	return nil
}

// held returns key's unexpired lock, ending an expired one on the way.
// s.mu must be held.
func (s *Store) held(key string, now time.Time) (*lock, error) {
	l := s.st.Locks[key]
	if l == nil || !l.expired(now) {
		return l, nil
	}
	return nil, s.end(key, l, backend.EventExpired, now)
}

// end deletes key's lock l, saves, and tells the watchers why. s.mu must be
// held.
func (s *Store) end(key string, l *lock, why backend.EventType, now time.Time) error {
	delete(s.st.Locks, key)
	if t := s.timers[key]; t != nil {
		t.Stop()
		delete(s.timers, key)
	}
	if err := s.save(); err != nil {
		return err
	}
	s.emit(backend.Event{Type: why, Record: l.record(key, now)})
	return nil
}

// arm sets the timer that announces l's expiry. s.mu must be held.
func (s *Store) arm(key string, l *lock) {
	if t := s.timers[key]; t != nil {
		t.Stop()
	}
	s.timers[key] = time.AfterFunc(time.Until(time.Unix(0, l.Expires)), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed && s.st.Locks[key] == l {
			_, _ = s.held(key, time.Now()) // a failed save is retried by the next access
		}
	})
}

// Acquire implements backend.Backend.
func (s *Store) Acquire(_ context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Key == "" || req.OwnerToken == "" {
		return backend.AcquireResult{}, fmt.Errorf("%w: key and owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return backend.AcquireResult{}, err
	}
	now := time.Now()
	cur, err := s.held(req.Key, now)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if cur != nil {
		return backend.AcquireResult{Record: cur.record(req.Key, now)}, nil
	}
	l := &lock{
		Token: req.OwnerToken, Holder: req.Holder,
		Fence:   s.st.Fences[req.Key] + 1,
		Stamp:   backend.NextStamp(s.st.Stamps[req.Key], req.Stamp),
		Expires: now.Add(req.TTL).UnixNano(),
	}
	s.st.Locks[req.Key] = l
	s.st.Fences[req.Key] = l.Fence
	s.st.Stamps[req.Key] = l.Stamp
	if err := s.save(); err != nil {
		delete(s.st.Locks, req.Key) // not granted: the file does not say so
		return backend.AcquireResult{}, err
	}
	s.arm(req.Key, l)
	rec := l.record(req.Key, now)
	s.emit(backend.Event{Type: backend.EventAcquired, Record: rec})
	return backend.AcquireResult{Acquired: true, Record: rec}, nil
}

// holding returns key's lock when token holds it. s.mu must be held.
func (s *Store) holding(key, token string, now time.Time) (*lock, error) {
	l, err := s.held(key, now)
	if err != nil || l == nil || token == "" || l.Token != token {
		return nil, err
	}
	return l, nil
}

// Release implements backend.Backend.
func (s *Store) Release(_ context.Context, req backend.ReleaseRequest) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return false, err
	}
	now := time.Now()
	l, err := s.holding(req.Key, req.OwnerToken, now)
	if err != nil || l == nil {
		return false, err
	}
	s.st.Stamps[req.Key] = hlc.Max(s.st.Stamps[req.Key], req.Stamp)
	if err := s.end(req.Key, l, backend.EventReleased, now); err != nil {
		return false, err
	}
	return true, nil
}

// Extend implements backend.Backend.
func (s *Store) Extend(_ context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return backend.ExtendResult{}, err
	}
	now := time.Now()
	l, err := s.holding(req.Key, req.OwnerToken, now)
	if err != nil || l == nil {
		return backend.ExtendResult{}, err
	}
	was := l.Expires
	l.Expires = now.Add(req.TTL).UnixNano()
	if err := s.save(); err != nil {
		l.Expires = was
		return backend.ExtendResult{}, err
	}
	s.arm(req.Key, l)
	return backend.ExtendResult{Extended: true, Record: l.record(req.Key, now)}, nil
}

// Get implements backend.Backend.
func (s *Store) Get(_ context.Context, key string) (backend.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return backend.Record{}, false, err
	}
	now := time.Now()
	l, err := s.held(key, now)
	if err != nil || l == nil {
		return backend.Record{}, false, err
	}
	return l.record(key, now), true, nil
}

// List implements backend.Backend: keys in order after the page token (the
// last key of the page before, base64url).
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
	if err := s.check(); err != nil {
		return backend.ListPage{}, err
	}
	now := time.Now()
	var page backend.ListPage
	for _, key := range slices.Sorted(maps.Keys(s.st.Locks)) {
		if !strings.HasPrefix(key, req.Prefix) || key <= string(after) {
			continue
		}
		l, err := s.held(key, now)
		if err != nil {
			return backend.ListPage{}, err
		}
		if l == nil {
			continue
		}
		if len(page.Records) == req.PageSize {
			page.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(page.Records[req.PageSize-1].Key))
			break
		}
		page.Records = append(page.Records, l.record(key, now))
	}
	return page, nil
}

// watcher is one Watch call's mailbox; ended is closed when it fell behind.
type watcher struct {
	prefix string
	events chan backend.Event
	ended  chan struct{}
}

// emit hands ev to every watcher of its key without blocking; one that fell
// behind is ended. s.mu must be held.
func (s *Store) emit(ev backend.Event) {
	for w := range s.watchers {
		if !strings.HasPrefix(ev.Record.Key, w.prefix) {
			continue
		}
		select {
		case w.events <- ev:
		default:
			delete(s.watchers, w)
			close(w.ended)
		}
	}
}

// Watch implements backend.Backend: registered under the mutex, then synced.
func (s *Store) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	w := &watcher{prefix: prefix, events: make(chan backend.Event, watchBuffer), ended: make(chan struct{})}
	s.mu.Lock()
	if err := s.check(); err != nil {
		s.mu.Unlock()
		return err
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
		case <-w.ended:
			return fmt.Errorf("%w: filestore: watcher fell %d events behind; watch again", backend.ErrUnavailable, watchBuffer)
		case <-s.done:
			return s.check()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
