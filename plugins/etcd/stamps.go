package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// stampsSeenMax bounds the keys remembered as stamped; past it the memory
// starts over (a forgotten key costs one larger transaction, no more).
const stampsSeenMax = 1 << 16

// stampsSeen remembers keys this process knows to be mutex keys with a
// stamp key (a mutex Acquire wrote or read it, or a mutex Release wrote
// it), so that their Acquire sends the short form of its transaction
// (acquireTxn.ops) and their Release leaves out the else branch for a
// grant's release (a key keeps its kind: a mutex key never has grants).
// Only a hint for the Acquire: a stamp key is never deleted, and should one
// be missing all the same, the short form writes nothing, reads no stamp,
// and the attempt goes again in the full form.
type stampsSeen struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (s *stampsSeen) seen(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	return ok
}

func (s *stampsSeen) saw(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= stampsSeenMax {
		s.m = make(map[string]struct{})
	}
	s.m[key] = struct{}{}
}

func (s *stampsSeen) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// heldStampsMax bounds the locks remembered in heldStamps; past it the
// memory starts over (a forgotten lock's Release sends the nested form).
const heldStampsMax = 1 << 16

// heldStamp is what a mutex Acquire of this process stored: the encoded
// stamp in its key's stamp key and the record, both at the transaction's
// revision, for the owner token it granted; the record's lease (its ID,
// TTL, when it was renewed, whether other records share it) and whether
// the lock has a lock-delay (so a delay key may exist).
type heldStamp struct {
	token   string
	rev     int64
	stamp   string
	lease   clientv3.LeaseID
	secs    int64
	renewed time.Time
	shared  bool
	delay   bool
}

// heldStamps lets a Release of a lock this process granted raise the stamp
// key without a nested transaction (releaseOps). While a mutex lock is
// held nothing writes its stamp key (every other write of it creates or
// deletes the lock, under compares the held lock fails), so the Release
// knows the stored stamp and puts the later of it and its own, comparing
// the stamp key's ModRevision with the Acquire's revision. It compares the
// record's ModRevision with that revision too: a record not written since
// is still this token's (the owner key is only ever written with the
// record), on the Acquire's lease, with the Acquire's lock-delay, so the
// Release needs neither the owner compare, nor the record back from its
// delete (the lease to pool is known), nor, for a lock without a
// lock-delay, a delete of a delay key that cannot exist. Only a hint: when
// a compare fails (an entry of an older lock of the key, an Extend or a
// replay's claim that rewrote the record, another plugin version's write)
// the Release goes again in the nested form.
type heldStamps struct {
	mu sync.Mutex
	m  map[string]heldStamp
}

func (h *heldStamps) set(key string, s heldStamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= heldStampsMax {
		h.m = make(map[string]heldStamp)
	}
	h.m[key] = s
}

// get returns the entry of key if it is token's.
func (h *heldStamps) get(key, token string) (heldStamp, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.m[key]
	return s, ok && s.token == token
}

// forget drops the entry of key if it is token's.
func (h *heldStamps) forget(key, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.m[key]; ok && s.token == token {
		delete(h.m, key)
	}
}
