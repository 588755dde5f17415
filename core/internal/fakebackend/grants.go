package fakebackend

import (
	"context"
	"slices"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// Semaphores, rwlocks and elections, once KeepKinds is called: a key held by grants
// keeps its kind, limit and grants in a pool (the key's fencing counter and
// stamp are the ones a mutex uses, kept forever); a grant is taken only if
// the pool's kind and limit are the request's and the permits fit, and, for
// a fair fake, in the queue's order as a mutex is.

type pool struct {
	kind   backend.Kind
	limit  int
	grants []*lock // in fencing-token order
}

func (p *pool) inUse() int {
	n := 0
	for _, g := range p.grants {
		n += g.permits
	}
	return n
}

// record is the pool's record about subject (nil: the grant that ends
// first), with every holder.
func (p *pool) record(key string, subject *lock, now time.Time) backend.Record {
	if subject == nil {
		subject = slices.MinFunc(p.grants, func(a, b *lock) int { return a.expires.Compare(b.expires) })
	}
	r := subject.record(now)
	r.Kind, r.Limit, r.Permits, r.InUse = p.kind, p.limit, subject.permits, p.inUse()
	for _, g := range p.grants {
		r.Holders = append(r.Holders, backend.Grant{FencingToken: g.fence, Holder: g.holder, ExpiresAt: g.expires.Round(0),
			Remaining: max(g.expires.Sub(now), 0), Stamp: g.stamp, Permits: g.permits, Value: g.value})
	}
	return r
}

// KeepKinds makes the fake keep semaphores, rwlocks and elections
// (Info.Kinds); call it before the first call.
func (b *Backend) KeepKinds() *Backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.kinds = []backend.Kind{backend.KindSemaphore, backend.KindRWLock, backend.KindElection}
	return b
}

// Proclaim implements backend.ElectionBackend.
func (b *Backend) Proclaim(_ context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.check(); err != nil {
		return backend.ProclaimResult{}, err
	}
	now := time.Now()
	p, g := b.grantOf(req.Key, req.OwnerToken, now)
	if g == nil || p.kind != backend.KindElection {
		return backend.ProclaimResult{}, nil
	}
	g.value = req.Value
	rec := p.record(req.Key, g, now)
	b.emit(backend.Event{Type: backend.EventProclaimed, Record: rec})
	return backend.ProclaimResult{Proclaimed: true, Record: rec}, nil
}

// livePool is key's pool with its unexpired grants (nil: none). b.mu must
// be held.
func (b *Backend) livePool(key string, now time.Time) *pool {
	p := b.pools[key]
	if p == nil {
		return nil
	}
	for _, g := range slices.Clone(p.grants) {
		if !now.Before(g.expires) {
			b.dropGrant(p, g, backend.EventExpired, now)
		}
	}
	return b.pools[key]
}

// dropGrant ends g and reports it as ended by typ; the pool goes with its
// last grant. b.mu must be held.
func (b *Backend) dropGrant(p *pool, g *lock, typ backend.EventType, now time.Time) {
	g.timer.Stop()
	p.grants = slices.DeleteFunc(p.grants, func(x *lock) bool { return x == g })
	if len(p.grants) == 0 {
		delete(b.pools, g.key)
	}
	rec := g.record(now)
	rec.Kind, rec.Limit, rec.Permits, rec.InUse = p.kind, p.limit, g.permits, p.inUse()
	b.emit(backend.Event{Type: typ, Record: rec})
}

// acquireGrant takes a grant of req.Key's pool. b.mu must be held.
func (b *Backend) acquireGrant(req backend.AcquireRequest, now time.Time) (backend.AcquireResult, error) {
	if err := req.CheckGrant(b.kinds); err != nil {
		return backend.AcquireResult{}, err
	}
	if l := b.held(req.Key, now); l != nil {
		return backend.AcquireResult{Record: l.record(now)}, nil
	}
	p := b.livePool(req.Key, now)
	if p != nil {
		if p.kind != req.Kind || p.limit != req.Limit {
			return backend.AcquireResult{Record: p.record(req.Key, nil, now)}, nil
		}
		for _, g := range p.grants {
			repeat, err := backend.Repeat(g.request, req.Request)
			if err != nil {
				return backend.AcquireResult{}, err
			}
			if repeat {
				g.claimed = true
				return backend.AcquireResult{Acquired: true, Record: p.record(req.Key, g, now), Replayed: true, Replay: g.replay}, nil
			}
		}
		if p.inUse()+req.Permits > p.limit {
			return backend.AcquireResult{Record: p.record(req.Key, nil, now)}, nil
		}
	}
	if req.ReplayOnly {
		return backend.AcquireResult{}, nil
	}
	if q := b.queues[req.Key]; len(q) > 0 && q[0] != req.WaiterID || req.WaiterID != "" && len(q) == 0 {
		return backend.AcquireResult{}, nil // room, but not this caller's turn
	}
	if req.WaiterID != "" {
		b.removeWaiter(req.Key, req.WaiterID)
	}
	if p == nil {
		p = &pool{kind: req.Kind, limit: req.Limit}
		b.pools[req.Key] = p
	}
	b.fences[req.Key] = max(b.fences[req.Key]+1, uint64(now.UnixNano()))
	b.stamps[req.Key] = backend.NextStamp(b.stamps[req.Key], req.Stamp)
	g := &lock{key: req.Key, token: req.OwnerToken, holder: req.Holder, fence: b.fences[req.Key], stamp: b.stamps[req.Key],
		expires: now.Add(req.TTL), request: req.Request, replay: req.Replay, permits: req.Permits, value: req.Value}
	g.timer = time.AfterFunc(req.TTL, func() { b.expireGrant(g) })
	p.grants = append(p.grants, g)
	rec := p.record(req.Key, g, now)
	b.emit(backend.Event{Type: backend.EventAcquired, Record: rec})
	return backend.AcquireResult{Acquired: true, Record: rec}, nil
}

// expireGrant is g's timer.
func (b *Backend) expireGrant(g *lock) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if p := b.pools[g.key]; !b.closed && p != nil && slices.Contains(p.grants, g) && !now.Before(g.expires) {
		b.dropGrant(p, g, backend.EventExpired, now)
	}
}

// grantOf is the grant of key that token holds (nil, nil: none). b.mu must
// be held.
func (b *Backend) grantOf(key, token string, now time.Time) (*pool, *lock) {
	p := b.livePool(key, now)
	if p == nil || token == "" {
		return p, nil
	}
	for _, g := range p.grants {
		if g.token == token {
			return p, g
		}
	}
	return p, nil
}
