package holdfast

import (
	"fmt"

	"connectrpc.com/connect"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Semaphores and read-write locks are locks with more than one lease per
// key: every key has a kind and a limit, fixed by the server at the key's
// first grant, and a grant holds some of that limit. They use the same
// builder (Lock) and the same Guard as a lock: each grant is a lease of
// its own, with its own owner token, a fencing token that strictly
// increases per key over every grant of every kind, a TTL renewed by the
// watchdog and the same poisoning when it is lost. The server queues
// waiters of one key strictly in arrival order, so a large request or a
// writer is never overtaken by later small requests or readers.

// Kind is what a key is: a mutex (one holder: Client.Lock), a semaphore
// (holders sharing a limit of permits) or a read-write lock (many readers
// or one writer). The zero Kind is KindMutex.
type Kind int

const (
	// KindMutex is a lock: one holder at a time.
	KindMutex Kind = iota
	// KindSemaphore is a semaphore: grants of 1..limit permits, never more
	// than the limit in use at once.
	KindSemaphore
	// KindRWLock is a read-write lock: many shared (read) grants, or one
	// exclusive (write) grant and nobody else.
	KindRWLock
	// KindElection is a leader election (Client.Election): one leader at
	// a time, whose lease carries a value and whose fencing token is its
	// term.
	KindElection
)

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
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Mode says whether a grant shares its key with others. The zero Mode is
// ModeExclusive.
type Mode int

const (
	// ModeExclusive: a mutex, a semaphore grant (which shares the key with
	// other grants only within the limit) or a read-write lock's writer.
	ModeExclusive Mode = iota
	// ModeShared: a read-write lock's reader, which shares the key with
	// other readers.
	ModeShared
)

func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeShared:
		return "shared"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Semaphore starts describing a grant of one permit (Permits sets more) of
// the semaphore key, whose limit is the most permits in use at once. The
// server fixes a key's kind and limit at its first grant: asking with
// another limit, or for a key used as a lock or read-write lock, is
// refused with failed_precondition (ErrServer, ErrorCode
// "failed_precondition"), at once and not retried. The limit must be at
// least 1 (the server's maximum is BackendInfo.MaxLimit, 1024 by default),
// and the backend must keep semaphores (BackendInfo.Kinds; else the server
// answers unimplemented). Everything else is as Client.Lock: TTL, Wait,
// Holder, Lock, TryLock, WithLock, TryWithLock and the Guard; a semaphore
// is one key and takes no lock-delay.
//
//	g, err := client.Semaphore("jobs/encode", 3).Permits(2).TTL(30 * time.Second).Lock(ctx)
func (c *Client) Semaphore(key string, limit int) Lock {
	l := c.Lock(key)
	l.kind, l.limit, l.permits = KindSemaphore, limit, 1
	return l
}

// Permits sets how many of a semaphore's permits the grant takes (default
// 1), from 1 to the semaphore's limit. Only a semaphore takes permits.
func (l Lock) Permits(n int) Lock { l.permits, l.permitsSet = n, true; return l }

// RWLock names a read-write lock: many readers at once (Read) or one writer
// and nobody else (Write). The server serves its waiters strictly in
// arrival order: a reader that arrives after a waiting writer waits behind
// it, so writers never starve, nor do readers.
type RWLock struct {
	c   *Client
	key string
}

// RWLock names the read-write lock key; Read and Write describe a grant of
// it. A key used as a lock or a semaphore is refused with
// failed_precondition, and a backend that keeps no read-write locks
// (BackendInfo.Kinds) answers unimplemented. Its limit is the server's
// fixed reader capacity (BackendInfo.RWLockReaders): a reader holds one
// permit of it, a writer all of them.
//
//	g, err := client.RWLock("config/routes").Read().Lock(ctx)
func (c *Client) RWLock(key string) RWLock { return RWLock{c: c, key: key} }

// Read describes a shared grant: held together with other readers, never
// with a writer.
func (rw RWLock) Read() Lock { return rw.grant(ModeShared) }

// Write describes an exclusive grant: held by nobody else, reader or
// writer.
func (rw RWLock) Write() Lock { return rw.grant(ModeExclusive) }

// Key is the read-write lock's key.
func (rw RWLock) Key() string { return rw.key }

func (rw RWLock) grant(mode Mode) Lock {
	if rw.c == nil {
		return Lock{key: rw.key, kind: KindRWLock, mode: mode}
	}
	l := rw.c.Lock(rw.key)
	l.kind, l.mode = KindRWLock, mode
	return l
}

// Kind is what the lock describes: a mutex, a semaphore grant or a
// read-write lock grant.
func (l Lock) Kind() Kind { return l.kind }

// checkKind refuses, before anything is sent, a semaphore without a
// usable limit or permits, and permits on anything else.
func (l Lock) checkKind() error {
	switch l.kind {
	case KindSemaphore:
		if l.limit < 1 {
			return invalidArgument("limit: %d: a semaphore needs a limit of at least 1 (Client.Semaphore(key, limit))", l.limit)
		}
		if l.permits < 1 {
			return invalidArgument("permits: %d is below 1: a grant takes 1 to the semaphore's limit (%d) permits", l.permits, l.limit)
		}
		if l.permits > l.limit {
			return invalidArgument("permits: %d is above the semaphore's limit %d", l.permits, l.limit)
		}
	default:
		if l.permitsSet {
			return invalidArgument("permits: only a semaphore takes permits (Client.Semaphore); this is a %s", l.kind)
		}
	}
	if l.kind != KindMutex && len(l.more) > 0 {
		return invalidArgument("keys: a %s is one key; only a lock (Client.Lock) takes several", l.kind)
	}
	if l.kind != KindMutex && l.lockDelay != 0 {
		return invalidArgument("lock_delay: only a lock (Client.Lock) takes a lock-delay; this is a %s", l.kind)
	}
	if l.kind == KindElection {
		return checkValue(l.value)
	}
	return nil
}

// fill sets the kind of grant l describes on an Acquire; a mutex leaves
// every field unset, as before kinds.
func (l Lock) fill(req *lockv1.AcquireRequest) {
	switch l.kind {
	case KindSemaphore:
		req.Kind, req.Limit, req.Permits = lockv1.Kind_KIND_SEMAPHORE, uint32(l.limit), uint32(l.permits)
	case KindRWLock:
		req.Kind, req.Mode = lockv1.Kind_KIND_RWLOCK, modeToProto(l.mode)
	case KindElection:
		req.Kind, req.Value = lockv1.Kind_KIND_ELECTION, l.value
	}
}

// grant is what one lease holds of its key.
type grant struct {
	kind    Kind
	limit   int
	permits int
	mode    Mode
}

// grantOf reads what a granted lease holds. A server older than kinds says
// nothing (a mutex); one whose answer names another kind than the request
// did gets an error, so that no one holds a mutex believing it a
// semaphore.
func (l Lock) grantOf(lease *lockv1.Lease) (grant, error) {
	g := grant{
		kind:    kindFromProto(lease.GetKind()),
		limit:   int(max(lease.GetLimit(), 1)),
		permits: int(max(lease.GetPermits(), 1)),
		mode:    modeFromProto(lease.GetMode()),
	}
	if g.kind != l.kind {
		return g, &rpcError{op: "Acquire", code: connect.CodeUnimplemented.String(), kind: ErrServer,
			message: fmt.Sprintf("asked for a %s, the server granted a %s: it does not serve kinds (a server older than semaphores and read-write locks?)", l.kind, g.kind)}
	}
	return g, nil
}

func kindFromProto(k lockv1.Kind) Kind {
	switch k {
	case lockv1.Kind_KIND_SEMAPHORE:
		return KindSemaphore
	case lockv1.Kind_KIND_RWLOCK:
		return KindRWLock
	case lockv1.Kind_KIND_ELECTION:
		return KindElection
	}
	return KindMutex
}

func modeFromProto(m lockv1.Mode) Mode {
	if m == lockv1.Mode_MODE_SHARED {
		return ModeShared
	}
	return ModeExclusive
}

func modeToProto(m Mode) lockv1.Mode {
	if m == ModeShared {
		return lockv1.Mode_MODE_SHARED
	}
	return lockv1.Mode_MODE_EXCLUSIVE
}
