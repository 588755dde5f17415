package engine

import "time"

// BatchQueued is the number of calls waiting for a batch, of every kind.
func (e *Engine) BatchQueued() int {
	if e.calls.bb == nil {
		return 0
	}
	return e.calls.acquire.Queued() + e.calls.release.Queued() + e.calls.extend.Queued()
}

// SetFollowLinger sets how long a key nobody needs stays followed
// (followLinger).
func (e *Engine) SetFollowLinger(d time.Duration) {
	e.interest.mu.Lock()
	e.interest.linger = d
	e.interest.mu.Unlock()
	e.interest.poke()
}

// Followed is how many keys and prefixes the engine counts as needed
// (or lets linger).
func (e *Engine) Followed() int {
	e.interest.mu.Lock()
	defer e.interest.mu.Unlock()
	return len(e.interest.keys.want) + len(e.interest.prefixes.want)
}
