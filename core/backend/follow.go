package backend

import (
	"context"
	"strings"
	"sync"
)

// FollowBackend is a Backend that sends the engine only the changes of the
// keys someone waits for or watches, instead of every change (Watch "").
// Most Acquires and Releases have nobody waiting for them and nobody
// watching: on Watch each is still an event that the store sends the
// plugin, the plugin sends the engine, and the engine drops, two wake-ups
// of three processes for every lock taken and given back. With Follow the
// engine names the keys and prefixes it needs (the keys its waiters wait
// on, the keys and prefixes of its API watchers) and changes that set as
// waiters come and go.
//
// It is optional. Package backendserver serves Follow for every backend:
// natively for a FollowBackend (a store that can subscribe to single keys,
// say), and for any other through Following, which filters the backend's
// Watch "" in the plugin process, so the events nobody needs stop there
// instead of crossing the plugin hop. The plugin host answers
// errors.ErrUnsupported for a plugin that does not serve the call (an
// older one); the engine then watches everything as before.
type FollowBackend interface {
	Backend
	// Follow calls send for every change to a followed key until ctx is
	// done or send returns an error, and then returns (nil when ctx ended
	// it, send's error when send failed, an error wrapping ErrUnavailable
	// when the store's feed broke and changes may have been missed: the
	// caller then follows again from nothing and re-reads what it waits
	// on).
	//
	// A key is followed when it is one of the keys, or starts with one of
	// the prefixes, that the FollowChanges received so far have added and
	// not dropped. Nothing is followed at first. Follow's first call of
	// send must be an EventSynced, made once the feed is established; it
	// applies the changes it receives on changes, in order, each once it
	// has sent that EventSynced, and then calls the change's Applied (when
	// not nil): every change of a followed key that commits after Applied
	// is called must be sent. Changes of other keys are not sent (one
	// already on its way when its key was dropped may still be): that is
	// the point of Follow, and the conformance suite checks it. The one
	// exception is EventExpired, sent for every key, followed or not: a
	// lease that ran out is one its holder lost, which the server counts
	// (holdfast_lease_expirations_total) whoever waits, and which is rare
	// beside the Acquires and Releases that Follow leaves out.
	//
	// send and Applied are never called concurrently, so a transport may
	// write both to one stream; both are called in the order the backend
	// saw things happen. A closed changes channel means no further change;
	// the feed goes on until ctx ends it.
	Follow(ctx context.Context, changes <-chan FollowChange, send func(Event) error) error
}

// FollowChange adds keys and prefixes to what a Follow sends, or drops
// them. Adding what is followed already, or dropping what is not, does
// nothing. A change drops before it adds, so a change may drop and re-add
// one key without a gap.
type FollowChange struct {
	Keys, Prefixes         []string
	DropKeys, DropPrefixes []string
	// Applied, when not nil, is called once the change is in force (see
	// FollowBackend.Follow).
	Applied func()
}

// Following returns b as a FollowBackend: b itself when it is one, and
// otherwise b wrapped so that Follow runs b.Watch("") and sends on only the
// events of followed keys (and every EventSynced and EventExpired). The
// wrapper is correct
// for any Backend whose Watch keeps its promise: a change that commits
// after Applied is sent by Watch after it commits, so after the change that
// made its key followed.
func Following(b Backend) FollowBackend {
	if f, ok := b.(FollowBackend); ok {
		return f
	}
	return watchFollower{b}
}

// watchFollower follows keys by filtering a Watch of every key.
type watchFollower struct {
	Backend
}

func (w watchFollower) Follow(parent context.Context, changes <-chan FollowChange, send func(Event) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()

	var (
		mu       sync.Mutex // guards set and serialises send and Applied
		set      FollowSet
		synced   = make(chan struct{})
		isSynced bool
	)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- w.Watch(ctx, "", func(ev Event) error {
			mu.Lock()
			defer mu.Unlock()
			if ev.Type == EventSynced {
				if !isSynced {
					isSynced = true
					close(synced)
				}
				return send(ev)
			}
			if ev.Type != EventExpired && !set.Has(ev.Record.Key) {
				return nil
			}
			return send(ev)
		})
	}()
	// The watch has ended (or parent has): cancel it and wait for its
	// error, so that Follow returns only once nothing can call send any
	// more. A watch ended by the caller's context is no failure.
	end := func() error {
		cancel()
		err := <-watchDone
		if parent.Err() != nil {
			return nil //nolint:nilerr // the caller's context ended it: that is the contract's nil
		}
		return err
	}
	for {
		var c FollowChange
		var ok bool
		select {
		case <-ctx.Done():
			return end()
		case err := <-watchDone:
			watchDone <- err
			return end()
		case c, ok = <-changes:
			if !ok {
				changes = nil // no more changes: go on sending
				continue
			}
		}
		select {
		case <-synced:
		case <-ctx.Done():
			return end()
		case err := <-watchDone:
			watchDone <- err
			return end()
		}
		mu.Lock()
		set.Apply(c)
		if c.Applied != nil {
			c.Applied()
		}
		mu.Unlock()
	}
}

// FollowSet is a set of followed keys and prefixes, for a backend (or a
// transport) that filters events itself. The zero value follows nothing.
// It is not safe for concurrent use.
type FollowSet struct {
	keys     map[string]struct{}
	prefixes map[string]struct{}
}

// Apply drops c's DropKeys and DropPrefixes, then adds its Keys and
// Prefixes.
func (s *FollowSet) Apply(c FollowChange) {
	for _, k := range c.DropKeys {
		delete(s.keys, k)
	}
	for _, p := range c.DropPrefixes {
		delete(s.prefixes, p)
	}
	for _, k := range c.Keys {
		if s.keys == nil {
			s.keys = map[string]struct{}{}
		}
		s.keys[k] = struct{}{}
	}
	for _, p := range c.Prefixes {
		if s.prefixes == nil {
			s.prefixes = map[string]struct{}{}
		}
		s.prefixes[p] = struct{}{}
	}
}

// Has reports whether key is followed: one of the keys, or under one of the
// prefixes. Prefixes are few (the API watchers' of one server), so they
// are checked one by one.
func (s *FollowSet) Has(key string) bool {
	if _, ok := s.keys[key]; ok {
		return true
	}
	for p := range s.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Empty reports whether nothing is followed.
func (s *FollowSet) Empty() bool { return len(s.keys) == 0 && len(s.prefixes) == 0 }
