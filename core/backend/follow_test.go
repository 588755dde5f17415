package backend_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
)

// follow runs Following(b).Follow until the test ends, and returns its
// events and the channel that changes it.
type follow struct {
	events  chan backend.Event
	changes chan backend.FollowChange
	done    chan error
	inSend  atomic.Bool
	overlap atomic.Bool // Applied ran while send did
}

func startFollow(ctx context.Context, t *testing.T, b backend.Backend) *follow {
	t.Helper()
	f := &follow{events: make(chan backend.Event, 64), changes: make(chan backend.FollowChange), done: make(chan error, 1)}
	go func() {
		f.done <- backend.Following(b).Follow(ctx, f.changes, func(ev backend.Event) error {
			f.inSend.Store(true)
			defer f.inSend.Store(false)
			f.events <- ev
			return nil
		})
	}()
	if ev := f.next(t); ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	return f
}

func (f *follow) next(t *testing.T) backend.Event {
	t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case err := <-f.done:
		t.Fatalf("Follow returned %v while an event was awaited", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event in 10s")
	}
	return backend.Event{}
}

// change sends c and waits until it is applied.
func (f *follow) change(t *testing.T, c backend.FollowChange) {
	t.Helper()
	applied := make(chan struct{})
	c.Applied = func() {
		if f.inSend.Load() {
			f.overlap.Store(true)
		}
		close(applied)
	}
	f.changes <- c
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("change not applied in 10s")
	}
}

func cycle(t *testing.T, b backend.Backend, key string) {
	t.Helper()
	ctx := context.Background()
	res, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "tok-" + key, TTL: time.Minute, Limit: 1, Permits: 1})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire %q: %+v, %v", key, res, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: "tok-" + key}); err != nil || !ok {
		t.Fatalf("release %q: %v, %v", key, ok, err)
	}
}

// The wrapper sends the events of followed keys and prefixes only: a
// change of an unfollowed key is dropped in the wrapper, and a dropped key
// is no longer sent. Each check is ordered by a later followed event, so
// an unwanted event would arrive before it and fail the test.
func TestFollowingSendsOnlyFollowedKeys(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := fakebackend.New()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	f := startFollow(ctx, t, b)

	f.change(t, backend.FollowChange{Keys: []string{"a"}, Prefixes: []string{"jobs/"}})
	cycle(t, b, "other") // not followed: must not arrive
	cycle(t, b, "a")
	for _, want := range []backend.EventType{backend.EventAcquired, backend.EventReleased} {
		if ev := f.next(t); ev.Type != want || ev.Record.Key != "a" {
			t.Fatalf("got %v of %q, want %v of \"a\"", ev.Type, ev.Record.Key, want)
		}
	}
	cycle(t, b, "jobs/x")
	if ev := f.next(t); ev.Record.Key != "jobs/x" {
		t.Fatalf("got an event of %q, want one of the followed prefix's jobs/x", ev.Record.Key)
	}
	<-f.events // jobs/x released

	f.change(t, backend.FollowChange{DropKeys: []string{"a"}})
	cycle(t, b, "a") // dropped: must not arrive
	cycle(t, b, "jobs/y")
	if ev := f.next(t); ev.Record.Key != "jobs/y" {
		t.Fatalf("got an event of %q after dropping it, want jobs/y", ev.Record.Key)
	}
	if f.overlap.Load() {
		t.Fatal("Applied ran while send was running")
	}
	cancel()
	if err := <-f.done; err != nil {
		t.Fatalf("Follow ended by its context returned %v, want nil", err)
	}
}

// Every key's expiry is sent, followed or not: the server counts the
// leases that ran out.
func TestFollowingSendsEveryExpiry(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := fakebackend.New()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := startFollow(ctx, t, b)
	f.change(t, backend.FollowChange{Keys: []string{"followed"}})
	res, err := b.Acquire(ctx, backend.AcquireRequest{Key: "unfollowed", OwnerToken: "tok", TTL: 20 * time.Millisecond, Limit: 1, Permits: 1})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	if ev := f.next(t); ev.Type != backend.EventExpired || ev.Record.Key != "unfollowed" {
		t.Fatalf("got %v of %q, want the expiry of the unfollowed key (its acquisition must not be sent)", ev.Type, ev.Record.Key)
	}
}

// A change is applied only after the feed is synced, and a closed changes
// channel does not end the feed.
func TestFollowingKeepsSendingAfterChangesClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := fakebackend.New()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := startFollow(ctx, t, b)
	f.change(t, backend.FollowChange{Keys: []string{"k"}})
	close(f.changes)
	cycle(t, b, "k")
	if ev := f.next(t); ev.Type != backend.EventAcquired || ev.Record.Key != "k" {
		t.Fatalf("got %v of %q, want acquired of k", ev.Type, ev.Record.Key)
	}
}

// A watch that breaks ends Follow with its error (unavailable), so the
// caller knows changes may have been missed.
func TestFollowingEndsWithTheWatchError(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := fakebackend.New()
	f := startFollow(context.Background(), t, b)
	b.Close() // ends every watch with ErrUnavailable
	select {
	case err := <-f.done:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("Follow returned %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end with its watch")
	}
}

// nativeFollower is a FollowBackend of its own.
type nativeFollower struct{ *fakebackend.Backend }

func (nativeFollower) Follow(context.Context, <-chan backend.FollowChange, func(backend.Event) error) error {
	return nil
}

func TestFollowingKeepsANativeFollower(t *testing.T) {
	n := nativeFollower{fakebackend.New()}
	defer n.Close()
	if _, ok := backend.Following(n).(nativeFollower); !ok {
		t.Fatal("Following wrapped a backend that follows by itself")
	}
}

func TestFollowSet(t *testing.T) {
	var s backend.FollowSet
	if !s.Empty() || s.Has("") {
		t.Fatal("zero FollowSet follows something")
	}
	s.Apply(backend.FollowChange{Keys: []string{"a"}, Prefixes: []string{"p/"}})
	for key, want := range map[string]bool{"a": true, "ab": false, "p/": true, "p/x": true, "p": false, "b": false} {
		if got := s.Has(key); got != want {
			t.Errorf("Has(%q) = %v, want %v", key, got, want)
		}
	}
	// Drops come before adds: one change can drop and re-add a key.
	s.Apply(backend.FollowChange{Keys: []string{"a"}, DropKeys: []string{"a"}, DropPrefixes: []string{"p/"}})
	if !s.Has("a") || s.Has("p/x") {
		t.Fatalf("after drop and re-add: Has(a)=%v Has(p/x)=%v, want true, false", s.Has("a"), s.Has("p/x"))
	}
	s.Apply(backend.FollowChange{DropKeys: []string{"a"}})
	if !s.Empty() {
		t.Fatal("not empty after dropping everything")
	}
	s.Apply(backend.FollowChange{Prefixes: []string{""}})
	if !s.Has("anything") {
		t.Fatal(`prefix "" does not follow every key`)
	}
}
