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
}

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
	}
	if p.GetExpiresAt() != nil {
		s.ExpiresAt = p.GetExpiresAt().AsTime()
	}
	return s
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
	}
}

// newRequestID draws a request id: 128 random bits, base64url. One is sent
// with every Acquire, Extend and Release, the same on each retry of one
// call, so that a retry whose first attempt's answer was lost is answered
// as that attempt was (the same lease, a release confirmed).
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
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
	}
	return 0
}
