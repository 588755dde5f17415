package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Keys with more than one lease: semaphores and read-write locks.
//
// One model serves the three kinds. Every key has a kind and a limit (its
// capacity), fixed by its first grant and kept by the backend with the
// key's fencing counter, and every grant holds permits of that limit: the
// backend grants only while the permits held plus the request's fit. A mutex
// is limit 1 with grants of 1; a semaphore is limit N (1 to
// backend.MaxLimit) with grants of 1 to N; a read-write lock is limit
// backend.RWLockReaders with shared grants of 1 and exclusive grants of the
// whole limit. So every backend implements one check, and every grant,
// whatever its kind, is a lease like a mutex's: its own owner token,
// fencing token (strictly increasing over every grant of the key), TTL and
// stamp (chained after the key's previous grant). Modes (shared/exclusive as
// a flag beside the count) were the alternative; weights make the rwlock a
// semaphore whose writer takes everything, so the stores need no second
// rule and no second code path.
//
// Waiting is strictly FIFO per key within a server, as for a mutex: only
// the head of the key's queue tries, and a try-once Acquire does not pass
// queued waiters. A later request that would fit does not overtake the head,
// so a large semaphore request or a writer is never starved by a stream of
// small requests or readers, and readers that arrive behind a writer wait
// for it (no reader starvation either: the writer's turn ends). When the
// head wins, the next waiter becomes head and tries at once (it may fit
// beside the winner); a release or an expiry of any grant wakes the head.
//
// Kept out on purpose: sets of keys (claims) take mutexes only, and
// lock_delay applies to mutexes only (a delay per permit would leave a
// semaphore partly refusing, which no client could reason about; refused
// with invalid_argument). A key's kind or limit is never changed by a
// request: a request that names another is refused with
// failed_precondition naming both, so two services configured with
// different limits for one semaphore find out at once.

// shape is how an Acquire holds its key: kind, limit and this grant's
// permits, as the backend gets them (limit and permits at least 1).
type shape struct {
	kind    backend.Kind
	limit   int
	permits int
}

var mutex = shape{kind: backend.KindMutex, limit: 1, permits: 1}

// kindName names a kind in messages.
func kindName(k backend.Kind) string { return k.String() }

// aKind names a kind with its article: "a semaphore", "an election".
func aKind(k backend.Kind) string {
	if n := kindName(k); strings.ContainsRune("aeiou", rune(n[0])) {
		return "an " + n
	}
	return "a " + kindName(k)
}

// fromKind maps the API's kind; ok is false for a value it does not know.
func fromKind(k lockv1.Kind) (backend.Kind, bool) {
	switch k {
	case lockv1.Kind_KIND_UNSPECIFIED, lockv1.Kind_KIND_MUTEX:
		return backend.KindMutex, true
	case lockv1.Kind_KIND_SEMAPHORE:
		return backend.KindSemaphore, true
	case lockv1.Kind_KIND_RWLOCK:
		return backend.KindRWLock, true
	case lockv1.Kind_KIND_ELECTION:
		return backend.KindElection, true
	}
	return 0, false
}

func toKind(k backend.Kind) lockv1.Kind {
	switch k {
	case backend.KindSemaphore:
		return lockv1.Kind_KIND_SEMAPHORE
	case backend.KindRWLock:
		return lockv1.Kind_KIND_RWLOCK
	case backend.KindElection:
		return lockv1.Kind_KIND_ELECTION
	}
	return lockv1.Kind_KIND_MUTEX
}

// checkShape validates an Acquire's kind, limit, permits and mode against
// what the request also asks (claims, lock_delay) and what the backend
// keeps.
func (e *Engine) checkShape(req *lockv1.AcquireRequest, ks keySet) (shape, error) {
	kind, ok := fromKind(req.GetKind())
	if !ok {
		return shape{}, invalidf("kind: %d is not a kind (KIND_MUTEX, KIND_SEMAPHORE, KIND_RWLOCK or KIND_ELECTION)", req.GetKind())
	}
	if err := checkValue(kind, req.GetValue()); err != nil {
		return shape{}, err
	}
	limit, permits, mode := req.GetLimit(), req.GetPermits(), req.GetMode()
	switch kind {
	case backend.KindMutex:
		switch {
		case limit > 1:
			return shape{}, invalidf("limit: a mutex has limit 1, got %d (use KIND_SEMAPHORE for more holders)", limit)
		case permits > 1:
			return shape{}, invalidf("permits: a mutex lease takes 1 permit, got %d", permits)
		case mode != lockv1.Mode_MODE_UNSPECIFIED:
			return shape{}, invalidf("mode: %s is for KIND_RWLOCK only", mode)
		}
		return mutex, nil
	case backend.KindSemaphore:
		switch {
		case limit == 0:
			return shape{}, invalidf("limit: required for a semaphore, 1 to %d", backend.MaxLimit)
		case limit > backend.MaxLimit:
			return shape{}, invalidf("limit: %d exceeds the maximum %d", limit, backend.MaxLimit)
		case permits > limit:
			return shape{}, invalidf("permits: %d exceeds the semaphore's limit %d", permits, limit)
		case mode != lockv1.Mode_MODE_UNSPECIFIED:
			return shape{}, invalidf("mode: %s is for KIND_RWLOCK only", mode)
		}
		permits = max(permits, 1)
	case backend.KindRWLock:
		switch {
		case mode != lockv1.Mode_MODE_SHARED && mode != lockv1.Mode_MODE_EXCLUSIVE:
			return shape{}, invalidf("mode: an rwlock lease is MODE_SHARED or MODE_EXCLUSIVE, got %s", mode)
		case limit != 0 && limit != backend.RWLockReaders:
			return shape{}, invalidf("limit: an rwlock's limit is %d (its readers), got %d; leave it 0", backend.RWLockReaders, limit)
		case permits != 0:
			return shape{}, invalidf("permits: an rwlock lease takes its permits from mode; leave permits 0, got %d", permits)
		}
		limit, permits = backend.RWLockReaders, 1
		if mode == lockv1.Mode_MODE_EXCLUSIVE {
			permits = backend.RWLockReaders
		}
	case backend.KindElection:
		switch {
		case limit > 1:
			return shape{}, invalidf("limit: an election has limit 1 (one leader), got %d; leave it 0", limit)
		case permits > 1:
			return shape{}, invalidf("permits: a campaign takes 1 permit, got %d; leave it 0", permits)
		case mode != lockv1.Mode_MODE_UNSPECIFIED:
			return shape{}, invalidf("mode: %s is for KIND_RWLOCK only", mode)
		}
		limit, permits = 1, 1
	}
	switch {
	case ks.multi:
		return shape{}, invalidf("kind: sets of keys (claims) take mutexes only; %s takes key", aKind(kind))
	case req.GetLockDelay().AsDuration() != 0:
		return shape{}, invalidf("lock_delay: applies to mutexes only, not to %s", aKind(kind))
	case !e.Info().Keeps(kind):
		return shape{}, newErr(ErrUnimplemented, "kind: the backend %q keeps no %s keys (BackendInfo.kinds)", e.Info().Name, kindName(kind))
	}
	return shape{kind: kind, limit: int(limit), permits: int(permits)}, nil
}

// checkValue validates an Acquire's value: elections only, at most
// backend.MaxValueBytes of UTF-8 without NUL (as holder: PostgreSQL's text
// cannot keep a NUL, and one rule in every store beats one per store).
func checkValue(kind backend.Kind, value string) error {
	if value != "" && kind != backend.KindElection {
		return invalidf("value: applies to elections only (KIND_ELECTION), not to %s", aKind(kind))
	}
	return checkText("value", value, backend.MaxValueBytes)
}

// describe names a kind and limit in messages: "a mutex", "a semaphore of
// limit 3", "an rwlock".
func describe(kind backend.Kind, limit int) string {
	switch kind {
	case backend.KindSemaphore:
		return fmt.Sprintf("a semaphore of limit %d", limit)
	case backend.KindRWLock:
		return "an rwlock"
	case backend.KindElection:
		return "an election"
	}
	return "a mutex"
}

// mismatch is the error for an Acquire of key as s when the backend keeps
// key as rec's kind and limit (nil when they agree, or rec is none).
func mismatch(key string, s shape, rec backend.Record) error {
	if rec.Key == "" || rec.DelayRemaining > 0 {
		return nil
	}
	limit := max(rec.Limit, 1)
	if rec.Kind == s.kind && limit == s.limit {
		return nil
	}
	return newErr(ErrFailedPrecondition, "key %q is %s; the request asks for %s (a key keeps its kind and limit while the backend keeps its fencing counter)",
		key, describe(rec.Kind, limit), describe(s.kind, s.limit))
}

// setMismatch is the error for a set of keys blocked by a key the backend
// keeps as another kind than a mutex (nil otherwise).
func setMismatch(rec backend.Record) error {
	if rec.Key == "" || rec.DelayRemaining > 0 || rec.Kind == backend.KindMutex {
		return nil
	}
	return newErr(ErrFailedPrecondition, "claims: key %q is %s; sets of keys take mutexes only", rec.Key, describe(rec.Kind, max(rec.Limit, 1)))
}

// mode is the API's mode of a grant of permits on a key of kind and limit.
func mode(kind backend.Kind, limit, permits int) lockv1.Mode {
	if kind != backend.KindRWLock {
		return lockv1.Mode_MODE_UNSPECIFIED
	}
	if permits >= limit {
		return lockv1.Mode_MODE_EXCLUSIVE
	}
	return lockv1.Mode_MODE_SHARED
}

// setShape fills a lease's kind, limit, permits and mode from the record of
// its grant.
func setShape(l *lockv1.Lease, r backend.Record) {
	limit, permits := max(r.Limit, 1), max(r.Permits, 1)
	l.Kind, l.Limit, l.Permits = toKind(r.Kind), uint32(limit), uint32(permits)
	l.Mode = mode(r.Kind, limit, permits)
	l.Value = r.Value
}

// grantOf is the API's view of the grant a record describes itself.
// Its stamp, expiry and lock-delay are s's own messages (s is the state of
// r): the same values, and a List page of a thousand mutexes is then two
// thousand messages fewer to make and for the GC to sweep. Messages of an
// answer are read only, so sharing them is safe (as a Watch event is shared
// by its watchers).
func (m *msgs) grantOf(s *lockv1.LockState, r backend.Record) *lockv1.Grant {
	limit, permits := max(r.Limit, 1), max(r.Permits, 1)
	out := m.grants.new()
	out.FencingToken, out.Holder, out.Value = r.FencingToken, r.Holder, r.Value
	out.Stamp, out.ExpiresAt, out.LockDelay = s.Stamp, s.ExpiresAt, s.LockDelay
	out.Permits, out.Mode = uint32(permits), mode(r.Kind, limit, permits)
	return out
}

func (m *msgs) grant(kind backend.Kind, limit int, g backend.Grant, lockDelay time.Duration) *lockv1.Grant {
	permits := max(g.Permits, 1)
	out := m.grants.new()
	out.FencingToken, out.Holder, out.Value = g.FencingToken, g.Holder, g.Value
	out.Stamp = m.stamp(g.Stamp)
	out.Permits, out.Mode = uint32(permits), mode(kind, limit, permits)
	if !g.ExpiresAt.IsZero() {
		out.ExpiresAt = m.time(g.ExpiresAt)
	}
	if lockDelay > 0 {
		out.LockDelay = m.duration(lockDelay)
	}
	return out
}

// one is a holders list of g alone.
func (m *msgs) one(g *lockv1.Grant) []*lockv1.Grant {
	s := m.holders.slice(1)
	s[0] = g
	return s
}

// setHolders fills a state's kind, limit, permits in use and holders from
// r: every holder of a Get or List record (a mutex's record is its one
// holder). For a watch event (ev set) holders is the one grant the event is
// about, and permits_in_use what the key holds after it, when known (the
// backend may not say for a semaphore or rwlock: 0).
func (m *msgs) setHolders(s *lockv1.LockState, r backend.Record, ev backend.EventType) {
	limit := max(r.Limit, 1)
	s.Kind, s.Limit = toKind(r.Kind), uint32(limit)
	switch {
	case ev != 0 && r.Kind == backend.KindMutex:
		s.Holders = m.one(m.grantOf(s, r))
		if ev == backend.EventAcquired {
			s.PermitsInUse = 1
		}
	case ev != 0:
		s.Holders = m.one(m.grantOf(s, r))
		s.PermitsInUse = uint32(r.InUse)
	case len(r.Holders) == 0:
		s.Holders = m.one(m.grantOf(s, r))
		s.PermitsInUse = uint32(max(r.InUse, r.Permits, 1))
	default:
		s.Holders = m.holders.slice(len(r.Holders))
		for i, g := range r.Holders {
			s.Holders[i] = m.grant(r.Kind, limit, g, 0)
		}
		s.PermitsInUse = uint32(r.InUse)
	}
}

// refused is the error for an Acquire the backend refused because of the
// key's kind or limit (rec: what blocked it), or nil when it was refused
// for contention (or a lock-delay) only.
func (s *acquireSpec) refused(rec backend.Record) error {
	if s.keys.set() {
		return setMismatch(rec)
	}
	return mismatch(s.keys.keys[0], s.shape, rec)
}

// kinds are the kinds the server offers on its backend, with their bounds.
func kinds(info backend.Info) []lockv1.Kind {
	out := []lockv1.Kind{lockv1.Kind_KIND_MUTEX}
	for _, k := range []backend.Kind{backend.KindSemaphore, backend.KindRWLock, backend.KindElection} {
		if info.Keeps(k) {
			out = append(out, toKind(k))
		}
	}
	return out
}

// limitIf is the API's bound for kind k (max_limit, rwlock_readers): 0 when
// the backend does not keep k.
func limitIf(info backend.Info, k backend.Kind) uint32 {
	if !info.Keeps(k) {
		return 0
	}
	return backend.MaxLimit
}
