package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// recorder is an engine.Observer that remembers what it was told.
type recorder struct {
	mu        sync.Mutex
	acquires  []string // "acquired"/"contended", with "+queued"
	waited    []time.Duration
	releases  []bool
	extends   []bool
	events    map[backend.EventType]int
	sets      []int
	replays   []string
	delayed   int
	grants    []string // kind, with "/mode" for an rwlock
	proclaims []bool
}

func (r *recorder) Granted(kind backend.Kind, mode lockv1.Mode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := kind.String()
	if mode != lockv1.Mode_MODE_UNSPECIFIED {
		g += "/" + mode.String()
	}
	r.grants = append(r.grants, g)
}

func (r *recorder) ProclaimDone(ok bool) {
	r.mu.Lock()
	r.proclaims = append(r.proclaims, ok)
	r.mu.Unlock()
}

func (r *recorder) SetAcquired(n int)  { r.mu.Lock(); r.sets = append(r.sets, n); r.mu.Unlock() }
func (r *recorder) Replayed(op string) { r.mu.Lock(); r.replays = append(r.replays, op); r.mu.Unlock() }
func (r *recorder) LockDelayed()       { r.mu.Lock(); r.delayed++; r.mu.Unlock() }

func (r *recorder) AcquireDone(acquired, queued bool, waited time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := "contended"
	if acquired {
		s = "acquired"
	}
	if queued {
		s += "+queued"
	}
	r.acquires = append(r.acquires, s)
	r.waited = append(r.waited, waited)
}

func (r *recorder) ReleaseDone(ok bool) {
	r.mu.Lock()
	r.releases = append(r.releases, ok)
	r.mu.Unlock()
}
func (r *recorder) ExtendDone(ok bool) { r.mu.Lock(); r.extends = append(r.extends, ok); r.mu.Unlock() }
func (r *recorder) BackendEvent(t backend.EventType) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[t]++
}

func (r *recorder) event(t backend.EventType) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[t]
}

func TestObserverSeesOutcomes(t *testing.T) {
	rec := &recorder{events: map[backend.EventType]int{}}
	e, _ := newEngine(t, engine.Config{Observer: rec})
	ctx := context.Background()
	// A watcher of every key: the backend feed carries every event then,
	// also when it is a Follow (which carries only the keys followed).
	all := watchOn(t, e, &lockv1.WatchRequest{}, nil)
	expect(t, all, lockv1.EventType_EVENT_TYPE_SYNCED, "")

	l := mustAcquire(t, e, "k", time.Minute)
	if resp, err := e.Acquire(ctx, acq("k", time.Minute, 0)); err != nil || resp.GetAcquired() {
		t.Fatalf("contended acquire: %v %v", resp, err)
	}
	// A queued waiter that gets the lock when it is released.
	got := make(chan *lockv1.AcquireResponse, 1)
	go func() {
		resp, _ := e.Acquire(ctx, acq("k", time.Minute, 10*time.Second))
		got <- resp
	}()
	eventually(t, "the waiter queues", func() bool { return e.QueueDepth() == 1 })
	ext, err := e.Extend(ctx, &lockv1.ExtendRequest{Key: "k", OwnerToken: l.GetOwnerToken(), Ttl: durationpb.New(time.Minute)})
	if err != nil || !ext.GetExtended() {
		t.Fatalf("extend: %v %v", ext, err)
	}
	release(t, e, l)
	l2 := (<-got).GetLease()
	if l2 == nil {
		t.Fatal("the waiter did not get the lock")
	}
	if e.QueueDepth() != 0 {
		t.Fatalf("queue depth %d after the waiter left", e.QueueDepth())
	}
	// The first lease is stale now.
	if resp, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: "k", OwnerToken: l.GetOwnerToken()}); err != nil || resp.GetReleased() {
		t.Fatalf("stale release: %v %v", resp, err)
	}
	if resp, err := e.Extend(ctx, &lockv1.ExtendRequest{Key: "k", OwnerToken: l.GetOwnerToken(), Ttl: durationpb.New(time.Minute)}); err != nil || resp.GetExtended() {
		t.Fatalf("stale extend: %v %v", resp, err)
	}
	// A lease that runs out: the backend's expired event.
	mustAcquire(t, e, "short", 20*time.Millisecond)
	eventually(t, "an expired event", func() bool { return rec.event(backend.EventExpired) >= 1 })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"acquired", "contended", "acquired+queued", "acquired"}
	if len(rec.acquires) != len(want) {
		t.Fatalf("acquires %v, want %v", rec.acquires, want)
	}
	for i := range want {
		if rec.acquires[i] != want[i] {
			t.Fatalf("acquires %v, want %v", rec.acquires, want)
		}
	}
	if g := strings.Join(rec.grants, " "); g != "mutex mutex mutex" {
		t.Fatalf("grants %q, want three of a mutex", g)
	}
	if rec.waited[2] <= 0 {
		t.Fatalf("queued acquire waited %s", rec.waited[2])
	}
	if len(rec.releases) != 2 || !rec.releases[0] || rec.releases[1] {
		t.Fatalf("releases %v, want [true false]", rec.releases)
	}
	if len(rec.extends) != 2 || !rec.extends[0] || rec.extends[1] {
		t.Fatalf("extends %v, want [true false]", rec.extends)
	}
	if rec.events[backend.EventSynced] < 1 || rec.events[backend.EventAcquired] < 3 || rec.events[backend.EventReleased] < 1 {
		t.Fatalf("backend events %v", rec.events)
	}
}
