package engine

// BatchQueued is the number of calls waiting for a batch, of every kind.
func (e *Engine) BatchQueued() int {
	if e.calls.bb == nil {
		return 0
	}
	return e.calls.acquire.Queued() + e.calls.release.Queued() + e.calls.extend.Queued()
}
