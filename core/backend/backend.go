// Package backend is the contract between holdfast and a lock backend: the
// Backend interface (and FairBackend, for a store that keeps waiters in
// order across servers), the plain types it speaks, the sentinel errors the
// engine branches on, and NextStamp. It imports nothing but the standard
// library and proto/hlc, so a backend's own packages, and their tests, stay
// free of the plugin transport.
//
// A backend runs as a plugin process through package
// core/backend/backendserver; its main is a few lines:
//
//	func main() {
//		backendserver.Serve(mystore.Open) // func(ctx, opts map[string]string) (backend.Backend, error)
//	}
//
// # What a backend promises
//
//   - Acquire stores the lock only if the key is absent or expired, decided
//     in one atomic step of the store, never by a read followed by a write.
//   - Release and Extend compare the owner token in the same atomic step
//     that deletes or renews the lock; a token that does not hold changes
//     nothing and answers false, not an error.
//   - The backend is the authority on expiry: a lock is held for at least
//     its TTL and is free again within TTL + Info.TTLGranularity.
//   - Fencing tokens are strictly increasing per key over every acquisition,
//     across restarts of the plugin and of the store.
//   - Stamps: the backend keeps the key's last stamp and stores on Acquire the
//     later of the proposed stamp and the successor of the last one
//     (NextStamp), so stamps strictly increase along a key's holders.
//   - Watch reports acquisitions, releases and expiries, after first
//     sending one EventSynced.
package backend

import (
	"context"
	"errors"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
)

// Backend stores locks. Implementations must be safe for concurrent use.
// Errors other than the sentinels below are reported to callers as
// unavailable; wrap ErrUnavailable or ErrInvalidArgument to be explicit.
type Backend interface {
	// Info states what the backend promises. It is called once at start-up
	// and after every restart of the plugin.
	Info(ctx context.Context) (Info, error)
	// Acquire stores the lock if key is free or expired (Acquired=true,
	// Record = the new lock), or reports the current holder (Acquired=false).
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)
	// Release deletes the lock if req.OwnerToken holds it, and reports
	// whether it did.
	Release(ctx context.Context, req ReleaseRequest) (bool, error)
	// Extend renews the lock for req.TTL from now if req.OwnerToken holds it.
	Extend(ctx context.Context, req ExtendRequest) (ExtendResult, error)
	// Get returns the lock on key, if held.
	Get(ctx context.Context, key string) (Record, bool, error)
	// List returns held locks whose keys start with req.Prefix, in key
	// order, one page at a time.
	List(ctx context.Context, req ListRequest) (ListPage, error)
	// Watch calls send for every change to keys under prefix until ctx is
	// done or send returns an error, and then returns. Its first call of send
	// must be an EventSynced, made once every later change will be seen.
	Watch(ctx context.Context, prefix string, send func(Event) error) error
}

// FairBackend is a Backend that serves waiters in order across servers
// (Info.Fair): it keeps one queue per key in the store, and its Acquire
// honours AcquireRequest.WaiterID. The engine uses it only when Info.Fair.
type FairBackend interface {
	Backend
	// Enqueue puts waiterID at the tail of key's queue. The entry lives as
	// long as the backend process (a crashed server's waiters leave the
	// queue on their own) or until Dequeue or a winning Acquire removes it.
	Enqueue(ctx context.Context, key, waiterID string) error
	// WaitTurn blocks until waiterID is the head of key's queue (true), or
	// answers false at once when its entry is gone. It is woken by the
	// store (the deletion of the entry before it), not by polling.
	WaitTurn(ctx context.Context, key, waiterID string) (bool, error)
	// Dequeue removes waiterID's entry; it is a no-op when it is gone.
	Dequeue(ctx context.Context, key, waiterID string) error
}

// Info is what a backend promises; the server reports it to clients.
type Info struct {
	Name    string
	Version string
	// Shared: several servers see the same locks.
	Shared bool
	// Durable: locks survive a restart of the store.
	Durable bool
	// TTLGranularity: a lock is free again within TTL + TTLGranularity.
	TTLGranularity time.Duration
	MinTTL         time.Duration
	MaxTTL         time.Duration
	// Fair: waiters are served in order across servers. Only a backend
	// that implements FairBackend may say so.
	Fair bool
}

// Record is a held lock, without its owner token.
type Record struct {
	Key          string
	FencingToken uint64
	Holder       string
	// ExpiresAt is the backend's view of the expiry.
	ExpiresAt time.Time
	// Remaining is the time left when the backend answered. The engine
	// times waiters with it, on its own monotonic clock.
	Remaining time.Duration
	Stamp     hlc.Timestamp
}

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Key        string
	OwnerToken string
	TTL        time.Duration
	Holder     string
	// Stamp is the engine's proposed stamp; store NextStamp(last, Stamp).
	Stamp hlc.Timestamp
	// WaiterID is for a FairBackend only (the engine leaves it empty for
	// the others). Empty: acquire only if key's queue is empty, so a try
	// never jumps ahead of queued waiters. Set: acquire only if this waiter
	// is the head of key's queue, and remove its entry in the same step.
	WaiterID string
}

// AcquireResult is the new lock (Acquired) or the current holder.
type AcquireResult struct {
	Acquired bool
	Record   Record
}

// ReleaseRequest gives a lock up.
type ReleaseRequest struct {
	Key        string
	OwnerToken string
	// Stamp is kept as the key's last stamp when it is later.
	Stamp hlc.Timestamp
}

// ExtendRequest renews a lock for TTL from now.
type ExtendRequest struct {
	Key        string
	OwnerToken string
	TTL        time.Duration
	Stamp      hlc.Timestamp
}

// ExtendResult is the renewed lock when Extended.
type ExtendResult struct {
	Extended bool
	Record   Record
}

// ListRequest asks for one page of held locks.
type ListRequest struct {
	Prefix string
	// PageSize is at least 1; the engine bounds it.
	PageSize int
	// PageToken is the NextPageToken of the previous page, or empty.
	PageToken string
}

// ListPage is one page of held locks, in key order.
type ListPage struct {
	Records []Record
	// NextPageToken is empty on the last page.
	NextPageToken string
}

// EventType says what happened to a lock.
type EventType int

const (
	// EventSynced: the watch is established; every later change is sent.
	EventSynced EventType = iota + 1
	// EventAcquired: Record is the new lock.
	EventAcquired
	// EventReleased: Record is the lock as it was held.
	EventReleased
	// EventExpired: Record is the lock as it was held.
	EventExpired
)

// String names the event type.
func (t EventType) String() string {
	switch t {
	case EventSynced:
		return "synced"
	case EventAcquired:
		return "acquired"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	}
	return "unknown"
}

// Event is one change seen by Watch.
type Event struct {
	Type   EventType
	Record Record // zero for EventSynced
}

// Sentinel errors. Backends wrap them with %w; the engine and the plugin host
// branch on them with errors.Is.
var (
	// ErrUnavailable: the store cannot be reached now; the call may be
	// retried. Clients see Connect code unavailable.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrInvalidArgument: the request is outside what this backend accepts
	// (for example a TTL beyond its range). Clients see invalid_argument.
	ErrInvalidArgument = errors.New("invalid argument")
)

// NextStamp is the stamp a backend stores on Acquire: the later of the
// engine's proposal and the successor of the key's last stamp, so that stamps
// strictly increase along a key's chain of holders even when several servers
// with different clocks share the backend.
func NextStamp(last, proposed hlc.Timestamp) hlc.Timestamp {
	return hlc.Max(proposed, last.Next())
}
