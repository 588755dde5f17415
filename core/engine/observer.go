package engine

import (
	"time"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Observer is told what the engine decided, so that a server can count it
// (metrics) without the engine knowing how. Its methods are called
// synchronously, on the request's goroutine or on the backend watch's, so
// they must be quick and must not call back into the engine.
type Observer interface {
	// AcquireDone reports an Acquire that answered: acquired, or not
	// (contended: someone else held the key for the whole wait). queued is
	// true for an Acquire with wait > 0; waited is the time from the
	// request to the answer. Acquires that fail with an error are not
	// reported.
	AcquireDone(acquired, queued bool, waited time.Duration)
	// ReleaseDone reports a Release that answered: released, or not (the
	// owner token no longer held the key: a stale release).
	ReleaseDone(released bool)
	// ExtendDone reports an Extend that answered: extended, or not (the
	// lease was lost).
	ExtendDone(extended bool)
	// BackendEvent reports each event of the engine's one backend feed
	// (synced, acquired, released, expired), including those of keys
	// taken through other servers of a shared backend: of every key the
	// backend holds when the feed is a Watch, and only of the keys this
	// engine follows (its waiters' and API watchers') when it is a Follow
	// (see the package doc), except expired events, which a Follow sends
	// for every key. An expired event is a lease lost to its TTL.
	BackendEvent(t backend.EventType)
	// SetAcquired reports a multi-key Acquire (claims) that acquired, with
	// the number of its keys.
	SetAcquired(keys int)
	// Replayed reports a repeat of a request (same request_id) answered as
	// its first attempt was; op is "acquire".
	Replayed(op string)
	// LockDelayed reports an Acquire that answered not acquired because a
	// key was in its lock-delay.
	LockDelayed()
	// Granted reports an Acquire that acquired, by the kind of its key and,
	// for an rwlock, its mode (MODE_UNSPECIFIED for the other kinds).
	Granted(kind backend.Kind, mode lockv1.Mode)
	// ProclaimDone reports a Proclaim that answered: proclaimed, or not
	// (the owner token did not hold the leadership: a stale leader).
	ProclaimDone(proclaimed bool)
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) AcquireDone(bool, bool, time.Duration) {}
func (nopObserver) ReleaseDone(bool)                      {}
func (nopObserver) ExtendDone(bool)                       {}
func (nopObserver) BackendEvent(backend.EventType)        {}
func (nopObserver) SetAcquired(int)                       {}
func (nopObserver) Replayed(string)                       {}
func (nopObserver) LockDelayed()                          {}
func (nopObserver) Granted(backend.Kind, lockv1.Mode)     {}
func (nopObserver) ProclaimDone(bool)                     {}

// QueueDepth is the number of callers queued on this server, over every
// key.
func (e *Engine) QueueDepth() int { return e.q.Total() }
