package harness

import "sync"

// FencedResource is what a lock protects, for judging safety where it
// matters: it accepts a write only with a fencing token above every token it
// accepted before (the watermark), and it counts critical sections that
// overlap. A correct lock service, with correct clients, leaves Rejected and
// Overlaps at zero. It is safe for concurrent use.
type FencedResource struct {
	mu        sync.Mutex
	watermark uint64
	busy      bool
	writes    int
	rejected  int
	overlaps  int
}

// Enter starts a critical section holding token and writes with it: it
// reports whether the write was accepted.
func (r *FencedResource) Enter(token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		r.overlaps++
	}
	r.busy = true
	if token <= r.watermark {
		r.rejected++
		return false
	}
	r.watermark = token
	r.writes++
	return true
}

// Leave ends the critical section.
func (r *FencedResource) Leave() {
	r.mu.Lock()
	r.busy = false
	r.mu.Unlock()
}

// Counts returns the accepted writes, the rejected ones and the overlapping
// critical sections so far.
func (r *FencedResource) Counts() (writes, rejected, overlaps int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes, r.rejected, r.overlaps
}
