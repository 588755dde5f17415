package scaleout_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
)

// fencedStore is the shared resource the critical sections write to: per
// key, it accepts a write only with a fencing token above the last accepted
// one (the watermark), and it notices two writers inside one key at once.
// It judges safety where it matters, at the resource, not at the lock.
type fencedStore struct {
	mu        sync.Mutex
	watermark map[string]uint64
	stamp     map[string]hlc.Timestamp
	inside    map[string]string
	writes    int
	rejected  []string
	overlaps  []string
	stampsBad []string
}

func newFencedStore() *fencedStore {
	return &fencedStore{watermark: map[string]uint64{}, stamp: map[string]hlc.Timestamp{}, inside: map[string]string{}}
}

// enter starts a critical section of who on key with its fencing token and
// acquisition stamp; the write is rejected when the token is not above the
// watermark.
func (s *fencedStore) enter(key, who string, token uint64, stamp hlc.Timestamp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, ok := s.inside[key]; ok {
		s.overlaps = append(s.overlaps, fmt.Sprintf("%s: %s entered while %s inside", key, who, other))
	}
	s.inside[key] = who
	if token <= s.watermark[key] {
		s.rejected = append(s.rejected, fmt.Sprintf("%s: token %d <= watermark %d (%s)", key, token, s.watermark[key], who))
		return
	}
	if !stamp.After(s.stamp[key]) {
		s.stampsBad = append(s.stampsBad, fmt.Sprintf("%s: stamp %s not after %s (%s)", key, stamp, s.stamp[key], who))
	}
	s.watermark[key], s.stamp[key] = token, stamp
	s.writes++
}

// work is the critical section's duration: long enough for contenders to
// pile up, short against the TTL.
const work = 2 * time.Millisecond

func (s *fencedStore) exit(key, who string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inside[key] == who {
		delete(s.inside, key)
	}
}

func (s *fencedStore) report() (writes int, rejected, overlaps, stampsBad []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes, append([]string(nil), s.rejected...), append([]string(nil), s.overlaps...), append([]string(nil), s.stampsBad...)
}
