package holdfast

import (
	"fmt"

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

// Kind is what a key is: a lock (one holder), a semaphore (holders sharing
// a limit of permits) or a read-write lock (many readers or one writer).
// The zero Kind is KindLock.
type Kind int

const (
	// KindLock is a mutex: one holder at a time.
	KindLock Kind = iota
	// KindSemaphore is a semaphore: grants of 1..limit permits, never more
	// than the limit in use at once.
	KindSemaphore
	// KindRWLock is a read-write lock: many shared (read) grants, or one
	// exclusive (write) grant and nobody else.
	KindRWLock
)

func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
	case KindRWLock:
		return "rwlock"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Mode says whether a grant shares its key with others. The zero Mode is
// ModeExclusive.
type Mode int

const (
	// ModeExclusive: a lock, a semaphore grant (which shares the key with
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
// refused with failed_precondition (ErrServer, ErrorCode "failed_precondition").
// The limit must be at least 1. Everything else is as Client.Lock: TTL,
// Wait, Holder, Lock, TryLock, WithLock, TryWithLock and the Guard.
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
// failed_precondition.
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

// Kind is what the lock describes: a lock, a semaphore grant or a
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
	if l.kind != KindLock && len(l.more) > 0 {
		return invalidArgument("keys: a %s is one key; only a lock takes several", l.kind)
	}
	return nil
}

// grant is what one lease holds of its key.
type grant struct {
	kind    Kind
	limit   int
	permits int
	mode    Mode
}

// grantOf is what the lease the server granted for l holds.
// TODO(contract): read kind/limit/permits/mode from the lease once lock.v1 carries them.
func (l Lock) grantOf(_ *lockv1.Lease) grant {
	switch l.kind {
	case KindSemaphore:
		return grant{kind: KindSemaphore, limit: l.limit, permits: l.permits}
	case KindRWLock:
		return grant{kind: KindRWLock, permits: 1, mode: l.mode}
	}
	return grant{kind: KindLock, limit: 1, permits: 1}
}
