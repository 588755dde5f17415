package fakebackend

import (
	"context"
	"slices"

	"github.com/holdfast/holdfast/core/backend"
)

// Fair is a fake that serves waiters in order across every engine that uses
// it: a backend.FairBackend.
type Fair struct {
	*Backend
}

var _ backend.FairSetBackend = (*Fair)(nil)

// NewFair returns a fair fake.
func NewFair() *Fair { return &Fair{Backend: New()} }

// Info implements backend.Backend: a fair fake says it is shared and fair.
func (f *Fair) Info(ctx context.Context) (backend.Info, error) {
	info, err := f.Backend.Info(ctx)
	info.Shared, info.Fair = true, true
	return info, err
}

// Enqueue implements backend.FairBackend.
func (f *Fair) Enqueue(_ context.Context, key, waiterID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	if !slices.Contains(f.queues[key], waiterID) {
		f.queues[key] = append(f.queues[key], waiterID)
		f.changed()
	}
	return nil
}

// EnqueueSet implements backend.FairSetBackend: one step for every queue.
func (f *Fair) EnqueueSet(_ context.Context, keys []string, waiterID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	for _, key := range keys {
		if !slices.Contains(f.queues[key], waiterID) {
			f.queues[key] = append(f.queues[key], waiterID)
		}
	}
	f.changed()
	return nil
}

// WaitTurn implements backend.FairBackend.
func (f *Fair) WaitTurn(ctx context.Context, key, waiterID string) (bool, error) {
	for {
		f.mu.Lock()
		if err := f.check(); err != nil {
			f.mu.Unlock()
			return false, err
		}
		q := f.queues[key]
		switch {
		case !slices.Contains(q, waiterID):
			f.mu.Unlock()
			return false, nil
		case q[0] == waiterID:
			f.mu.Unlock()
			return true, nil
		}
		turn := f.turn
		f.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// Dequeue implements backend.FairBackend.
func (f *Fair) Dequeue(_ context.Context, key, waiterID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	f.removeWaiter(key, waiterID)
	return nil
}

// Queue is key's queue now, head first: what tests check of the store's
// side.
func (f *Fair) Queue(key string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.queues[key])
}

// DropQueue forgets key's queue, as a store does whose queue entries went
// with a lost session: every waiter in WaitTurn is answered false.
func (f *Fair) DropQueue(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.queues, key)
	f.changed()
}

// removeWaiter deletes waiterID from key's queue. b.mu must be held.
func (b *Backend) removeWaiter(key, waiterID string) {
	q := b.queues[key]
	i := slices.Index(q, waiterID)
	if i < 0 {
		return
	}
	if q = slices.Delete(q, i, i+1); len(q) == 0 {
		delete(b.queues, key)
	} else {
		b.queues[key] = q
	}
	b.changed()
}

// changed wakes every WaitTurn to look at its queue again. b.mu must be
// held.
func (b *Backend) changed() {
	if b.closed {
		return // Close woke every WaitTurn for good
	}
	close(b.turn)
	b.turn = make(chan struct{})
}
