package holdfast

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// LockState describes a held lock as anyone may see it. It never carries the
// owner token.
type LockState struct {
	Key          string
	FencingToken uint64
	// Holder is the free-text label the holder gave at acquire.
	Holder string
	// ExpiresAt is the server's view of the expiry (its wall clock);
	// informational only.
	ExpiresAt time.Time
	// Stamp is the HLC stamp of the holder's acquisition.
	Stamp hlc.Timestamp
	// Waiters is how many callers queue for the key on the answering server.
	Waiters uint32
	// LockDelay is the lock-delay that follows this lease if it expires.
	LockDelay time.Duration
	// Kind and Limit are the key's (KindMutex and 1 for a lock);
	// PermitsInUse is the permits its holders hold together.
	Kind         Kind
	Limit        int
	PermitsInUse int
	// Holders is every lease held on the key, in fencing-token order: one
	// for a mutex (the same as the fields above). For a semaphore or a
	// read-write lock, the fields above describe the lease that ends
	// first (in a watch event: the lease the event is about).
	Holders []Grant
}

// Grant is one lease held on a key, as anyone may see it (never with its
// owner token).
type Grant struct {
	FencingToken uint64
	Holder       string
	// ExpiresAt is the server's view of the expiry; informational.
	ExpiresAt time.Time
	Stamp     hlc.Timestamp
	// Permits is the share of the key's limit the lease holds: a
	// semaphore grant's permits, 1 for a mutex or a reader, the limit for
	// a writer.
	Permits int
	// Mode is ModeShared for a read-write lock's reader.
	Mode Mode
	// LockDelay is the lock-delay that follows the lease if it expires
	// (mutex only).
	LockDelay time.Duration
	// Value is an election leader's value (KindElection); "" otherwise.
	Value string
}

// KeyDelay is a key nobody holds that refuses new holders for a while: the
// lock-delay after the expiry of a lease taken with one.
type KeyDelay struct {
	Key string
	// Until is the server's view of when the key takes holders again
	// (informational); Remaining is the time left when it answered.
	Until     time.Time
	Remaining time.Duration
}

func keyDelayFromProto(p *lockv1.KeyDelay) *KeyDelay {
	if p == nil {
		return nil
	}
	return &KeyDelay{Key: p.GetKey(), Until: p.GetUntil().AsTime(), Remaining: p.GetRemaining().AsDuration()}
}

// BackendInfo states what the server's backend promises.
type BackendInfo struct {
	Name    string
	Version string
	// Shared is true when several servers see the same locks. A memory
	// backend behind several servers is several independent locks.
	Shared bool
	// Durable is true when locks survive a restart of the backend.
	Durable bool
	// TTLGranularity is the resolution of the backend's expiry: a lock is
	// free again within its TTL plus this.
	TTLGranularity time.Duration
	MinTTL         time.Duration
	MaxTTL         time.Duration
	// Fair is true when waiters are served first-in first-out across
	// servers, not only within one server.
	Fair bool
	// MaxKeys is the most keys one multi-key Lock may take (1: the backend
	// takes one key per lock).
	MaxKeys int
	// RequestIDs is true when the backend recognises repeats of a request
	// (the SDK sends a request id on every call and its retries).
	RequestIDs bool
	// MaxLockDelay is the longest LockDelay accepted (0: none).
	MaxLockDelay time.Duration
	// Kinds are the kinds of key the backend keeps: always KindMutex, and
	// KindSemaphore, KindRWLock, KindElection when it keeps those.
	Kinds []Kind
	// MaxLimit is the largest semaphore limit (0: no semaphores).
	MaxLimit int
	// RWLockReaders is a read-write lock's limit, the most readers at once
	// (0: no read-write locks).
	RWLockReaders int
}

// Keeps reports whether the backend keeps keys of kind k.
func (b BackendInfo) Keeps(k Kind) bool { return k == KindMutex || slices.Contains(b.Kinds, k) }

// ServerInfo is what Client.ServerInfo reports.
type ServerInfo struct {
	Version string
	Backend BackendInfo
	// MaxClockOffset: client stamps further ahead of the server's clock are
	// refused.
	MaxClockOffset time.Duration
	// MaxWait is the longest wait one Acquire may ask for (the server's
	// --max-wait); 0 when the server does not say.
	MaxWait time.Duration
	// Stamp is the server's HLC reading when it answered.
	Stamp hlc.Timestamp
}

// EventType says what happened to a lock.
type EventType int

const (
	// EventSynced is the first event of every watch: every change after it
	// is reported. It carries no LockState.
	EventSynced EventType = iota + 1
	// EventAcquired: someone acquired the lock.
	EventAcquired
	// EventReleased: the holder released the lock.
	EventReleased
	// EventExpired: the lease ran out.
	EventExpired
	// EventProclaimed: an election's leader replaced its value (State
	// carries it in Holders[0].Value); its term and expiry are unchanged.
	EventProclaimed
)

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
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change reported by Watch.
type Event struct {
	Type EventType
	// State is the lock the event is about (for released and expired, as it
	// was last held). Zero for EventSynced.
	State LockState
	// Stamp is the server's HLC reading when it sent the event.
	Stamp hlc.Timestamp
}

func lockStateFromProto(p *lockv1.LockState) LockState {
	if p == nil {
		return LockState{}
	}
	s := LockState{
		Key:          p.GetKey(),
		FencingToken: p.GetFencingToken(),
		Holder:       p.GetHolder(),
		Stamp:        hlc.FromProto(p.GetStamp()),
		Waiters:      p.GetWaiters(),
		LockDelay:    p.GetLockDelay().AsDuration(),
		Kind:         kindFromProto(p.GetKind()),
		Limit:        int(max(p.GetLimit(), 1)),
		PermitsInUse: int(p.GetPermitsInUse()),
	}
	if p.GetExpiresAt() != nil {
		s.ExpiresAt = p.GetExpiresAt().AsTime()
	}
	for _, h := range p.GetHolders() {
		s.Holders = append(s.Holders, grantFromProto(h))
	}
	if len(s.Holders) == 0 && s.FencingToken != 0 {
		// A server older than kinds lists no holders: the one it has.
		s.Holders = []Grant{{FencingToken: s.FencingToken, Holder: s.Holder, ExpiresAt: s.ExpiresAt, Stamp: s.Stamp, Permits: 1, LockDelay: s.LockDelay}}
	}
	if s.PermitsInUse == 0 {
		for _, h := range s.Holders {
			s.PermitsInUse += h.Permits
		}
	}
	return s
}

func grantFromProto(p *lockv1.Grant) Grant {
	g := Grant{
		FencingToken: p.GetFencingToken(),
		Holder:       p.GetHolder(),
		Stamp:        hlc.FromProto(p.GetStamp()),
		Permits:      int(max(p.GetPermits(), 1)),
		Mode:         modeFromProto(p.GetMode()),
		LockDelay:    p.GetLockDelay().AsDuration(),
		Value:        p.GetValue(),
	}
	if p.GetExpiresAt() != nil {
		g.ExpiresAt = p.GetExpiresAt().AsTime()
	}
	return g
}

func backendInfoFromProto(p *lockv1.BackendInfo) BackendInfo {
	if p == nil {
		return BackendInfo{}
	}
	return BackendInfo{
		Name:           p.GetName(),
		Version:        p.GetVersion(),
		Shared:         p.GetShared(),
		Durable:        p.GetDurable(),
		TTLGranularity: p.GetTtlGranularity().AsDuration(),
		MinTTL:         p.GetMinTtl().AsDuration(),
		MaxTTL:         p.GetMaxTtl().AsDuration(),
		Fair:           p.GetFair(),
		MaxKeys:        int(max(p.GetMaxKeys(), 1)),
		RequestIDs:     slices.Contains(p.GetCapabilities(), lockv1.Capability_CAPABILITY_REQUEST_ID),
		MaxLockDelay:   p.GetMaxLockDelay().AsDuration(),
		Kinds:          kindsFromProto(p.GetKinds()),
		MaxLimit:       int(p.GetMaxLimit()),
		RWLockReaders:  int(p.GetRwlockReaders()),
	}
}

// kindsFromProto lists the kinds a backend keeps; a server older than
// kinds keeps mutexes only.
func kindsFromProto(ks []lockv1.Kind) []Kind {
	out := []Kind{KindMutex}
	for _, k := range ks {
		if k := kindFromProto(k); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// newRequestID draws a request id: 128 random bits, base64url. One is sent
// with every Acquire, Extend and Release, the same on each retry of one
// call, so that a retry whose first attempt's answer was lost is answered
// as that attempt was (the same lease, a release confirmed).
func newRequestID() string {
	var b [requestIDBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// requestIDBytes is the random bytes of one request id.
const requestIDBytes = 16

// newRequestIDs draws n request ids, each as newRequestID draws one, from
// one read of the random source into one string: a watchdog's renewal
// draws an id per lease, hundreds at once.
func newRequestIDs(n int) []string {
	raw := make([]byte, n*requestIDBytes)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	size := base64.RawURLEncoding.EncodedLen(requestIDBytes)
	text := make([]byte, 0, n*size)
	for b := range slices.Chunk(raw, requestIDBytes) {
		text = base64.RawURLEncoding.AppendEncode(text, b)
	}
	all := string(text)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = all[i*size : (i+1)*size]
	}
	return ids
}

func eventTypeFromProto(t lockv1.EventType) EventType {
	switch t {
	case lockv1.EventType_EVENT_TYPE_SYNCED:
		return EventSynced
	case lockv1.EventType_EVENT_TYPE_ACQUIRED:
		return EventAcquired
	case lockv1.EventType_EVENT_TYPE_RELEASED:
		return EventReleased
	case lockv1.EventType_EVENT_TYPE_EXPIRED:
		return EventExpired
	case lockv1.EventType_EVENT_TYPE_PROCLAIMED:
		return EventProclaimed
	}
	return 0
}
