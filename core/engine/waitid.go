package engine

import (
	"strconv"
	"sync"
)

// waiterIDs names the fair waiters' entries in the store's queues, and
// reuses the name of a waiter whose entries are surely gone. Why: a store
// such as etcd keeps every key it ever deleted in its index until the next
// compaction, and its acquire transaction and WaitTurn range over a key's
// whole queue prefix, deleted entries included. With a new name per waiter,
// a hot key's queue gathers one dead entry per handoff, and each handoff
// costs more than the last (about 1 ms more per acquire after 4,000
// handoffs in BenchmarkHandoff; without compaction, for ever). Reused names
// keep the names ever used under a key's prefix to the most waiters this
// server had at once.
//
// A name goes back only when nothing of its last waiter can still reach the
// store: its entries were deleted (by its winning Acquire, or by a Dequeue
// that succeeded) and no try of its is still on its way. A name whose
// Enqueue or Dequeue failed, or whose try outlived its wait, is dropped:
// its old entry may still be there (or come back), and a new waiter queued
// under it would inherit that entry's place (Enqueue of a queued name keeps
// its entry) or lose its own to a late delete.
type waiterIDs struct {
	prefix string // this engine's, so no two servers' names meet

	mu   sync.Mutex
	next uint64
	free []string
}

func newWaiterIDs() waiterIDs {
	return waiterIDs{prefix: newOwnerToken()[:22] + "."}
}

// get returns a name no waiter of this engine uses.
func (w *waiterIDs) get() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.free); n > 0 {
		id := w.free[n-1]
		w.free = w.free[:n-1]
		return id
	}
	w.next++
	return w.prefix + strconv.FormatUint(w.next, 10)
}

// put gives back a name whose entries are gone.
func (w *waiterIDs) put(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.free = append(w.free, id)
}
