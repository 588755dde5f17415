package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The records a batch stores or moves share one lease (batch.go). No single
// Release or Extend of one of them may pool that lease, since the others are
// still on it; left alone, it would cost a background grant to refill the
// pool and an expiry in etcd (two raft writes) per batch. So the process
// that attached the records counts them, and the detach of the last one
// hands the lease to the pool, as a single lock's release does.
//
// The count is only ever an upper bound of the records still on the lease,
// never below it: a lease is registered only when the outcome of every item
// of its transaction is known (the count is exactly the records it
// attached), and only a committed transaction of this process that detached
// one of them (a Release's delete, an Extend's move, whose previous record
// names the lease) takes one off. Records released through another process,
// or deleted by an expiry, are never taken off: the count then stays above
// zero and the lease expires in etcd as before, and its entry is dropped
// once its TTL has passed.
const (
	// sharedMax bounds the leases counted at once; past it a batch's lease
	// is left to expire, as before.
	sharedMax = 4096
	// sharedGrace is how long past its TTL an entry is kept, so that a
	// release committed just before the lease's end still finds it.
	sharedGrace = 2 * time.Second
)

type sharedLease struct {
	records int
	secs    int64
	renewed time.Time // when its grant or last renewal was sent
}

// sharedLeases counts the records on the leases this process's batches
// attached.
type sharedLeases struct {
	mu sync.Mutex
	m  map[clientv3.LeaseID]*sharedLease
}

// add registers n records just attached to lease id (of secs seconds,
// granted or renewed at renewed). It reports false when it is not counted.
func (s *sharedLeases) add(id clientv3.LeaseID, n int, secs int64, renewed time.Time) bool {
	if n <= 0 || id == clientv3.NoLease {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[clientv3.LeaseID]*sharedLease{}
	}
	if _, dup := s.m[id]; dup || len(s.m) >= sharedMax {
		// A lease counted twice would be a bookkeeping error; never
		// risk pooling it early: forget it, so that it expires.
		delete(s.m, id)
		return false
	}
	s.m[id] = &sharedLease{records: n, secs: secs, renewed: renewed}
	return true
}

// detached takes one record off lease id; when it was the last, it
// returns the lease's TTL and renewal time for the pool (last=true).
func (s *sharedLeases) detached(id clientv3.LeaseID) (secs int64, renewed time.Time, last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.m[id]
	if !ok {
		return 0, time.Time{}, false
	}
	l.records--
	if l.records > 0 {
		return 0, time.Time{}, false
	}
	delete(s.m, id)
	return l.secs, l.renewed, true
}

// sweep forgets the leases whose TTL has passed (their records expired, or
// were released elsewhere).
func (s *sharedLeases) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, l := range s.m {
		if now.Sub(l.renewed) > time.Duration(l.secs)*time.Second+sharedGrace {
			delete(s.m, id)
		}
	}
}
