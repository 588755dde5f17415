package backend

import "context"

// BatchBackend is a Backend that can carry many independent calls to its
// store at once: the engine gathers the Acquires and Releases that its
// callers make at the same moment, and the leases a client renews together
// (the public ExtendBatch call), into one call of the plugin and, in the
// store, into one write (one etcd transaction, one Redis pipeline, one SQL
// statement). It is optional: the engine makes the calls one by one on a
// backend without it.
//
// A batch is not a transaction over its items. Each item is decided on its
// own, in one atomic step of the store, exactly as the single call would
// decide it (the promises above hold per item), and gets its own outcome:
// one item's key being held, or its token being stale, changes nothing for
// the others. What the store's single write buys is cost, not atomicity
// across items.
//
// The rules of every batch method:
//
//   - It answers one Outcome per request, in the requests' order.
//   - Keys within one batch are distinct: the engine never sends two
//     requests for one key in a batch. A backend may answer
//     ErrInvalidArgument for an item whose key repeats an earlier one.
//   - An item the store could not decide carries its own error in its
//     Outcome (for example ErrUnavailable when the part of the store that
//     holds its key is down); the method's error is for a batch that could
//     not be sent at all, and then no item's outcome is known.
//   - A batch method may return errors.ErrUnsupported (and nothing else)
//     when it cannot batch after all; the engine then makes the calls one
//     by one. The plugin host does so for a plugin that does not serve the
//     batch calls.
type BatchBackend interface {
	Backend
	// AcquireBatch is Acquire for each request.
	AcquireBatch(ctx context.Context, reqs []AcquireRequest) ([]Outcome[AcquireResult], error)
	// ReleaseBatch is Release for each request: Value reports whether the
	// request's owner token held its lock and it was deleted.
	ReleaseBatch(ctx context.Context, reqs []ReleaseRequest) ([]Outcome[bool], error)
	// ExtendBatch is Extend for each request.
	ExtendBatch(ctx context.Context, reqs []ExtendRequest) ([]Outcome[ExtendResult], error)
}

// Outcome is one item's answer in a batch: its result, or the error that
// kept the store from deciding it (Value is then the zero value).
type Outcome[T any] struct {
	Value T
	Err   error
}
