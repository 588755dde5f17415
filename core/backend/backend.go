// Package backend is the contract between holdfast and a lock backend: the
// Backend interface (and two optional ones: FairBackend, for a store that
// keeps waiters in order across servers, and BatchBackend, for a store that
// can carry many independent calls in one write), the plain types it speaks,
// the sentinel errors the engine branches on, and NextStamp. It imports nothing but the standard
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
//
// # Optional promises, declared in Info
//
//   - Sets of keys (Info.MaxKeys > 1, SetBackend): AcquireSet stores a lock
//     on every claimed key under one owner token, or on none, in one atomic
//     step of the store (one transaction, one script); ReleaseSet and
//     ExtendSet act on every named key or on none, in one step too. Each key
//     keeps its own fencing token and its own chain of stamps; the keys of
//     one set share one stamp, one TTL, one lock-delay and one request
//     identity. A set is not an object of the store: it is N locks sharing an
//     owner token, and Get, List and Watch report each key on its own.
//   - Request identities (Info.RequestIDs): each held lock keeps the Request
//     (ID and Fingerprint, opaque strings from the engine) of the last
//     Acquire or Extend applied to it, and the Replay of its Acquire; a
//     released key keeps the Request of its Release until its next release.
//     A mutating call whose Request.ID equals the one kept is a repeat: with
//     the same Fingerprint it is answered as the first was (Acquire:
//     Replayed with the stored Replay; Extend: renewed again; Release: true)
//     and with another one it fails with ErrRequestConflict and changes
//     nothing. An Acquire answered as a replay marks its lock claimed; a
//     Release with Abandon leaves a claimed lock alone. What is kept is
//     bounded by the keys: one identity per key, gone with the key's record.
//   - Lock-delay (Info.MaxLockDelay > 0): a lock taken with LockDelay d that
//     expires (its TTL runs out; not a Release) leaves its key refusing new
//     holders until d after the expiry, by the store's clock; Get and Acquire
//     report the time left in Record.DelayRemaining.
//   - Kinds beyond a mutex (Info.Kinds: KindSemaphore, KindRWLock,
//     KindElection): see below. KindElection needs ElectionBackend.
//
// # Keys with more than one lease
//
// Every key has a Kind and a Limit (its capacity), and every grant on it
// holds Permits of that limit: a mutex has limit 1 and grants of 1 permit; a
// semaphore has a limit of 1 to MaxLimit and grants of 1 to limit permits;
// an rwlock has limit RWLockReaders, a shared (read) grant of 1 permit and
// an exclusive (write) grant of all RWLockReaders. So a backend implements
// one rule for every kind: it grants, in one atomic step, only if the key's
// kind and limit are the request's (or it has none kept) and the permits
// held on the key plus the request's are at most the limit.
//
//   - The kind and limit are fixed by the key's first grant and kept with its
//     fencing counter and last stamp, for as long as those are kept. An
//     Acquire whose Kind or Limit differs from the kept ones is answered
//     Acquired=false with a Record carrying the kept Kind and Limit (and the
//     holders, when held; Key, Kind and Limit alone when not): the engine
//     refuses it with failed_precondition naming both.
//   - Every grant is a lease of its own: its own owner token (Release and
//     Extend find the grant by it), TTL, fencing token (one above the
//     key's counter, over every grant of every kind) and stamp (NextStamp
//     of the key's last stamp, which it then becomes). The expiry of one grant
//     frees its permits only.
//   - Records of such keys carry every grant held (Record.Holders, in
//     fencing-token order) and the permits held (InUse). The record's own
//     grant fields (FencingToken to LockDelay) describe one grant: the one
//     the call made or renewed or the event is about, and otherwise (Get,
//     List, a refused Acquire) the grant that ends first. The record of an
//     Acquire that acquired, and of an Extend, may carry that grant alone
//     (no Holders): the engine reads nothing else of it, and a key of 1024
//     holders need not travel with every grant.
//   - Watch sends one event per grant acquired, released or expired; its
//     Record describes that grant and may leave Holders and InUse unset.
//   - List's PageSize counts grants (a mutex key counts one): a page ends
//     once its records hold PageSize grants or more, so one key's grants
//     are never split across pages.
//   - A key of another kind than a mutex blocks every AcquireSet claiming
//     it (Blocker is its record, with its Kind and Limit), and never has a
//     lock-delay (the engine sends LockDelay for mutexes only).
//   - Request identities: a key is held under Request.ID when one of its
//     grants is; a released key keeps the Request of its last Release.
//   - The waiting order is the engine's (or, for a FairBackend, the
//     queue's): a backend grants whoever asks while the request fits.
//   - AcquireRequest.CheckGrant refuses, with ErrInvalidArgument naming the
//     field, a grant request outside these bounds (the engine sends none).
//
// # Elections
//
// An election key (KindElection) is a key of limit 1 whose one grant, of 1
// permit, is its leadership: the rule above decides it unchanged, and the
// grant's fencing token is the leader's term. The grant carries a Value
// (AcquireRequest.Value, at most MaxValueBytes of UTF-8, checked by the
// engine), kept with it and returned in Record.Value and Grant.Value by
// Acquire, Extend, Get, List and Watch. An ElectionBackend's Proclaim
// replaces the value, in one atomic step, only if the owner token holds
// the grant; it changes neither the fencing token, the expiry nor the
// grant's stamp, and Watch then sends an EventProclaimed carrying the new
// value, seen by every server sharing the store (it comes from the
// store's change feed like every other event). A backend lists
// KindElection in Info.Kinds only if it implements ElectionBackend
// (backendserver refuses to serve one that does not).
package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// The engine reuses a waiterID once its entries are gone (removed by its
// winning Acquire or a Dequeue that succeeded), so an entry waited behind
// must be told from a later one under the same waiterID.
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

// SetBackend is a Backend that takes several keys in one atomic step
// (Info.MaxKeys > 1). The engine uses it only then, and only for two keys or
// more: a single key goes through Backend.Acquire, Release and Extend.
type SetBackend interface {
	Backend
	// AcquireSet stores a lock on every claimed key if every one is free or
	// expired (Acquired=true, Records = the new locks in the order of
	// Claims), or on none (Blocker = the holder of one of them, when known).
	AcquireSet(ctx context.Context, req AcquireSetRequest) (AcquireSetResult, error)
	// ReleaseSet deletes the locks on req.Keys if req.OwnerToken holds every
	// one of them, and reports whether it did.
	ReleaseSet(ctx context.Context, req ReleaseSetRequest) (bool, error)
	// ExtendSet renews the locks on req.Keys for req.TTL from now if
	// req.OwnerToken holds every one of them.
	ExtendSet(ctx context.Context, req ExtendSetRequest) (ExtendSetResult, error)
}

// ElectionBackend is a Backend that keeps election keys (Info.Kinds lists
// KindElection). The engine calls Proclaim only on such a backend.
type ElectionBackend interface {
	Backend
	// Proclaim replaces the value of the grant req.OwnerToken holds on
	// req.Key, in one atomic step (Proclaimed=true, Record = the grant with
	// its new value), or changes nothing and answers Proclaimed=false when
	// the token holds no grant there now. It emits EventProclaimed.
	Proclaim(ctx context.Context, req ProclaimRequest) (ProclaimResult, error)
}

// FairSetBackend is a FairBackend that takes sets of keys: a waiter for a
// set has an entry in every key's queue, put there in one step.
type FairSetBackend interface {
	FairBackend
	SetBackend
	// EnqueueSet puts waiterID at the tail of every key's queue in one
	// atomic step, so that two waiters stand in the same order in every
	// queue they share (and a set waiter is the head of all of its queues
	// once every earlier waiter has gone). WaitTurn and Dequeue work per key
	// as for a single key; AcquireSet with WaiterID needs the waiter at the
	// head of every key's queue and removes its entries in the same step.
	EnqueueSet(ctx context.Context, keys []string, waiterID string) error
}

// Kind is how a key is held (see the package doc). The zero Kind is a mutex,
// what every request and record without a kind means.
type Kind int

const (
	// KindMutex: one holder at a time; limit 1, grants of 1 permit.
	KindMutex Kind = iota
	// KindSemaphore: a limit of 1 to MaxLimit; grants of 1 to limit permits.
	KindSemaphore
	// KindRWLock: limit RWLockReaders; a shared grant takes 1 permit, an
	// exclusive grant all of them.
	KindRWLock
	// KindElection: limit 1, grants of 1 permit carrying a Value; the one
	// grant is the leadership and its fencing token the term.
	KindElection
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindMutex:
		return "mutex"
	case KindSemaphore:
		return "semaphore"
	case KindRWLock:
		return "rwlock"
	case KindElection:
		return "election"
	}
	return "unknown"
}

const (
	// MaxLimit is the largest limit the engine asks for: a backend that
	// keeps KindSemaphore or KindRWLock keeps up to MaxLimit grants on one
	// key.
	MaxLimit = 1024
	// RWLockReaders is the limit of every KindRWLock key: the most shared
	// grants held at once, and the permits of an exclusive grant.
	RWLockReaders = MaxLimit
	// MaxValueBytes is the longest value of a KindElection grant, in bytes
	// of UTF-8.
	MaxValueBytes = 4096
)

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
	// MaxKeys is the most keys one AcquireSet may claim. Above 1 only for a
	// SetBackend (and, when Fair, a FairSetBackend); 0 or 1: single keys.
	MaxKeys int
	// RequestIDs: the backend keeps request identities (Request) with its
	// locks and answers repeats (see the package doc).
	RequestIDs bool
	// MaxLockDelay is the longest LockDelay the backend keeps; 0: it keeps
	// none.
	MaxLockDelay time.Duration
	// Kinds are the kinds of key the backend keeps beside KindMutex, which
	// every backend keeps (see the package doc).
	Kinds []Kind
}

// Keeps reports whether the backend keeps keys of kind k.
func (i Info) Keeps(k Kind) bool {
	return k == KindMutex || slices.Contains(i.Kinds, k)
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
	// LockDelay is the lock-delay that follows this lock if it expires.
	LockDelay time.Duration
	// DelayRemaining is set only on the record of a key nobody holds (Get
	// answering false, an Acquire that did not acquire): the key is in its
	// lock-delay for this much longer. Only Key is set beside it.
	DelayRemaining time.Duration
	// Kind and Limit are the key's (the zero Kind and a Limit of 0 or 1: a
	// mutex). On the record of a refused Acquire they are the kept ones.
	Kind  Kind
	Limit int
	// Permits are the permits of the grant this record describes (0: 1).
	Permits int
	// InUse is the permits held on the key when the backend answered (0:
	// unknown, or a mutex).
	InUse int
	// Holders is every grant held on the key, in fencing-token order, for a
	// kind other than a mutex (empty for a mutex: the record is its holder).
	Holders []Grant
	// Value is the value of the grant this record describes (KindElection;
	// empty otherwise).
	Value string
}

// Grant is one lease held on a key of a kind other than a mutex, without
// its owner token.
type Grant struct {
	FencingToken uint64
	Holder       string
	ExpiresAt    time.Time
	// Remaining is the time left when the backend answered.
	Remaining time.Duration
	Stamp     hlc.Timestamp
	Permits   int
	// Value is the grant's value (KindElection; empty otherwise).
	Value string
}

// Request identifies a retry-safe mutating call (Info.RequestIDs). Both
// fields are opaque strings made by the engine; the zero Request is a call
// that is not retry-safe.
type Request struct {
	// ID is the same for every repeat of one request.
	ID string
	// Fingerprint stands for the request's arguments: a repeat with another
	// one is a conflict (ErrRequestConflict).
	Fingerprint string
}

// Claim is one key an AcquireSet takes.
type Claim struct {
	Key string
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
	// Request (Info.RequestIDs): when key is held under Request.ID, answer
	// that lock as a replay (same Fingerprint) or fail with
	// ErrRequestConflict; a lock taken now keeps Request and Replay.
	Request Request
	// Replay is opaque; a replay of this Acquire answers it.
	Replay string
	// LockDelay (Info.MaxLockDelay): once this lock expires, key refuses
	// holders for this long.
	LockDelay time.Duration
	// ReplayOnly: answer a replay, or report the holder; never take key.
	ReplayOnly bool
	// Kind, Limit and Permits say how key is held and what this grant
	// takes (see the package doc). Limit and Permits are at least 1 (a
	// mutex: 1 and 1); Kind is one of Info.Kinds or KindMutex.
	Kind    Kind
	Limit   int
	Permits int
	// Value is stored with a KindElection grant (empty for other kinds).
	Value string
}

// CheckGrant refuses a grant request (Kind other than KindMutex) that no
// backend keeping kinds should take: a Kind not among kinds, a Limit outside
// 1 to MaxLimit (1 for an election), Permits outside 1 to Limit, a
// LockDelay, or a Value on a kind other than an election or longer than
// MaxValueBytes. The error
// wraps ErrInvalidArgument and names the field. The engine never sends such
// a request; a backend checks anyway, as it checks TTLs.
func (r AcquireRequest) CheckGrant(kinds []Kind) error {
	switch {
	case r.Kind == KindMutex || !slices.Contains(kinds, r.Kind):
		return fmt.Errorf("%w: kind %s is not one this backend keeps as a grant (it keeps %v)", ErrInvalidArgument, r.Kind, kinds)
	case r.Limit < 1 || r.Limit > MaxLimit:
		return fmt.Errorf("%w: limit %d is outside 1 to %d", ErrInvalidArgument, r.Limit, MaxLimit)
	case r.Permits < 1 || r.Permits > r.Limit:
		return fmt.Errorf("%w: permits %d is outside 1 to the limit %d", ErrInvalidArgument, r.Permits, r.Limit)
	case r.LockDelay != 0:
		return fmt.Errorf("%w: lock_delay applies to mutexes only, not to a %s", ErrInvalidArgument, r.Kind)
	case r.Kind == KindElection && r.Limit != 1:
		return fmt.Errorf("%w: limit %d: an election's limit is 1", ErrInvalidArgument, r.Limit)
	case r.Kind != KindElection && r.Value != "":
		return fmt.Errorf("%w: value applies to elections only, not to a %s", ErrInvalidArgument, r.Kind)
	case len(r.Value) > MaxValueBytes:
		return fmt.Errorf("%w: value of %d bytes exceeds the maximum %d", ErrInvalidArgument, len(r.Value), MaxValueBytes)
	}
	return nil
}

// AcquireResult is the new lock (Acquired) or the current holder.
type AcquireResult struct {
	Acquired bool
	Record   Record
	// Replayed: Acquired is true for a lock an earlier Acquire with the same
	// Request took; Replay is what that Acquire stored.
	Replayed bool
	Replay   string
}

// ReleaseRequest gives a lock up.
type ReleaseRequest struct {
	Key        string
	OwnerToken string
	// Stamp is kept as the key's last stamp when it is later.
	Stamp hlc.Timestamp
	// Request (Info.RequestIDs) is kept with the key once released: a
	// repeat then answers true.
	Request Request
	// Abandon: the engine gives back a lock whose acquirer was never told
	// of it. Release it only if no replay of its Acquire was answered.
	Abandon bool
}

// ExtendRequest renews a lock for TTL from now.
type ExtendRequest struct {
	Key        string
	OwnerToken string
	TTL        time.Duration
	Stamp      hlc.Timestamp
	// Request (Info.RequestIDs): a repeat renews again; one with another
	// Fingerprint is a conflict. Kept with the lock in place of the one
	// kept before; a zero Request keeps the lock's own (the engine renews a
	// replayed lease so, and later repeats of its Acquire still match).
	Request Request
}

// ProclaimRequest replaces the value of an election's leader.
type ProclaimRequest struct {
	Key        string
	OwnerToken string
	// Value is the new value (at most MaxValueBytes of UTF-8; the engine
	// checks it).
	Value string
	// Stamp is the engine's HLC reading; the grant keeps its own stamp.
	Stamp hlc.Timestamp
}

// ProclaimResult is the grant with its new value when Proclaimed.
type ProclaimResult struct {
	Proclaimed bool
	Record     Record
}

// AcquireSetRequest asks for a lock on every claimed key, or none.
type AcquireSetRequest struct {
	// Claims are distinct keys in byte order (the engine sorts them), at
	// least two and at most Info.MaxKeys. A set takes mutexes only: a
	// claimed key kept with another kind blocks it (see the package doc).
	Claims     []Claim
	OwnerToken string
	TTL        time.Duration
	Holder     string
	// Stamp is the engine's proposal; every key stores the same stamp, the
	// latest of Stamp and NextStamp of each key's last stamp.
	Stamp hlc.Timestamp
	// WaiterID, Request, Replay, LockDelay and ReplayOnly mean what they
	// mean in AcquireRequest, for every key.
	WaiterID   string
	Request    Request
	Replay     string
	LockDelay  time.Duration
	ReplayOnly bool
}

// AcquireSetResult is the new locks (Acquired) or what blocked them.
type AcquireSetResult struct {
	Acquired bool
	// Records are the new locks, one per claim in the order of Claims.
	Records []Record
	// Blocker, when not acquired: the holder of a claimed key, or the
	// lock-delay of one (DelayRemaining); zero when unknown.
	Blocker  Record
	Replayed bool
	Replay   string
}

// ReleaseSetRequest gives up the locks on Keys, all or none.
type ReleaseSetRequest struct {
	Keys       []string // distinct, in byte order
	OwnerToken string
	Stamp      hlc.Timestamp
	Request    Request
	Abandon    bool
}

// ExtendSetRequest renews the locks on Keys, all or none.
type ExtendSetRequest struct {
	Keys       []string // distinct, in byte order
	OwnerToken string
	TTL        time.Duration
	Stamp      hlc.Timestamp
	Request    Request
}

// ExtendSetResult is the renewed locks, one per key in the order of Keys,
// when Extended.
type ExtendSetResult struct {
	Extended bool
	Records  []Record
}

// ExtendResult is the renewed lock when Extended.
type ExtendResult struct {
	Extended bool
	Record   Record
}

// ListRequest asks for one page of held locks.
type ListRequest struct {
	Prefix string
	// PageSize is at least 1; the engine bounds it. It counts grants: a
	// key of another kind than a mutex counts as many as its holders (see
	// the package doc).
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
	// EventProclaimed: Record is the election grant with its new value
	// (ElectionBackend.Proclaim).
	EventProclaimed
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
	case EventProclaimed:
		return "proclaimed"
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
	// ErrRequestConflict: a request's Request.ID is already kept with
	// another Fingerprint (a repeat with other arguments); nothing changed.
	// Clients see invalid_argument.
	ErrRequestConflict = errors.New("request id reused with other arguments")
	// ErrFailedPrecondition: the store, as configured, cannot do this
	// request (for example keys of one set in different Redis Cluster
	// slots). Clients see failed_precondition.
	ErrFailedPrecondition = errors.New("failed precondition")
)

// NextStamp is the stamp a backend stores on Acquire: the later of the
// engine's proposal and the successor of the key's last stamp, so that stamps
// strictly increase along a key's chain of holders even when several servers
// with different clocks share the backend.
func NextStamp(last, proposed hlc.Timestamp) hlc.Timestamp {
	return hlc.Max(proposed, last.Next())
}

// Repeat says what a backend does with a call carrying req when kept is the
// Request kept with the key: not a repeat (false, nil), a repeat to answer
// as the first attempt was (true, nil), or a conflict (ErrRequestConflict).
func Repeat(kept, req Request) (bool, error) {
	if req.ID == "" || kept.ID != req.ID {
		return false, nil
	}
	if kept.Fingerprint != req.Fingerprint {
		return false, ErrRequestConflict
	}
	return true, nil
}
