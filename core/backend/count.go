package backend

import "context"

// CountBackend is a Backend that counts the leases it holds without
// listing them: the server's holdfast_locks_held gauge reads it at scrape
// time, so a scrape costs one call and does not page through every lock
// beside the Acquires and Releases it would slow. It is optional: the
// gauge lists the backend (up to a cap) when a backend lacks it.
//
// Count is every lease held under the backend's locks, each grant of a
// semaphore, rwlock or election counted once (as a List page counts
// them). It may include leases whose TTL ran out moments ago and that the
// store has not yet deleted: the gauge is an estimate of the moment, not a
// promise about any one key. On a shared backend it is every server's
// leases.
//
// A Count method may return errors.ErrUnsupported (and nothing else) when
// it cannot count after all; the caller then lists. The plugin host does so
// for a plugin that does not serve the call.
type CountBackend interface {
	Backend
	Count(ctx context.Context) (int64, error)
}
