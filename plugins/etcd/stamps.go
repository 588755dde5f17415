package etcd

import "sync"

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
