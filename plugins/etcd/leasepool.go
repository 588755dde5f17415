package etcd

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lease grant is a raft write: a disk sync on a quorum before the lock's
// own transaction can even start; so is a revoke. Renewing a lease is not
// (the leader keeps lease deadlines in memory). So the backend keeps a pool
// of unattached leases per TTL: leases detached from released locks (and
// from lost acquire races) go back into it instead of being revoked, and
// leases are granted ahead of need in the background, in batches (raft
// commits concurrent grants together). An Acquire or Extend takes one and
// renews it, which resets its TTL from now: the lock then lives exactly as
// long as with a fresh grant, and the caller waits for one cheap round trip
// instead of a disk sync. In steady state a lock costs two raft writes (its
// creation and its deletion) instead of four.
//
// Safety does not rest on the pool's bookkeeping: a lease enters the pool
// only once no key is attached to it (a committed Release or Extend detached
// it, or the Acquire transaction that would have used it definitely failed),
// and a pooled lease is used only after etcd confirmed its renewal.
const (
	// poolMin and poolMax bound how many leases of one TTL are kept ready.
	// The target doubles whenever a caller finds the pool empty.
	poolMin = 2
	poolMax = 64
	// poolIdle: a TTL not asked for in this long loses its pool.
	poolIdle = 10 * time.Second
	// poolRefill is how often the pool is topped up and aged leases dropped.
	poolRefill = 200 * time.Millisecond
	// poolGrantParallel bounds concurrent background grants.
	poolGrantParallel = 16
)

type pooledLease struct {
	id      clientv3.LeaseID
	granted time.Time // when the grant was sent (monotonic)
}

type ttlPool struct {
	free    []pooledLease // in the order they came
	target  int
	lastUse time.Time
}

// leasePool keeps granted, unattached leases per TTL (in whole seconds).
type leasePool struct {
	b    *Backend
	mu   sync.Mutex
	ttls map[int64]*ttlPool
	kick chan struct{}
}

func newLeasePool(b *Backend) *leasePool {
	return &leasePool{b: b, ttls: map[int64]*ttlPool{}, kick: make(chan struct{}, 1)}
}

// fresh reports whether a lease granted at granted with secs seconds is
// young enough to be renewed safely: at most half its TTL old, so it cannot
// expire (etcd checks every 500ms) before the renewal reaches the leader.
func fresh(l pooledLease, secs int64, now time.Time) bool {
	return now.Sub(l.granted) < time.Duration(secs)*time.Second/2
}

// take returns a pooled lease of secs seconds, if one is ready.
func (p *leasePool) take(secs int64) (clientv3.LeaseID, bool) {
	now := time.Now()
	p.mu.Lock()
	tp := p.ttls[secs]
	if tp == nil {
		tp = &ttlPool{target: poolMin}
		p.ttls[secs] = tp
	}
	tp.lastUse = now
	var stale []clientv3.LeaseID
	var got pooledLease
	ok := false
	// Newest first: the freshest lease is the least likely to be gone.
	for len(tp.free) > 0 {
		l := tp.free[len(tp.free)-1]
		tp.free = tp.free[:len(tp.free)-1]
		if fresh(l, secs, now) {
			got, ok = l, true
			break
		}
		stale = append(stale, l.id)
	}
	if !ok && tp.target < poolMax {
		tp.target = min(2*tp.target, poolMax)
	}
	p.mu.Unlock()
	for _, id := range stale {
		p.b.revokeLater(id)
	}
	if !ok {
		// Ran dry: grant ahead now rather than at the next tick. Not on
		// every take: leases in use come back on release, and topping the
		// pool up whenever one is out would grant leases that the next
		// releases then overflow the pool with (a grant and a revoke, two
		// raft writes, per lock under steady concurrency).
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return got.id, ok
}

// put offers a lease that no lock uses any more (detached by Release or
// Extend, or left over by a lost Acquire race) for reuse: reusing it saves
// both a grant and a revoke, two raft writes. A lease that is not fresh, or
// that no pool wants, is revoked.
func (p *leasePool) put(id clientv3.LeaseID, secs int64, renewed time.Time) {
	l := pooledLease{id: id, granted: renewed}
	p.mu.Lock()
	tp := p.ttls[secs]
	if tp != nil && len(tp.free) < poolMax && fresh(l, secs, time.Now()) {
		tp.free = append(tp.free, l)
		id = clientv3.NoLease
	}
	p.mu.Unlock()
	p.b.revokeLater(id)
}

// loop tops the pools up until the backend closes.
func (p *leasePool) loop() {
	defer p.b.wg.Done()
	tick := time.NewTicker(poolRefill)
	defer tick.Stop()
	for {
		select {
		case <-p.b.done:
			p.drain()
			return
		case <-p.kick:
		case <-tick.C:
		}
		p.refill()
	}
}

// refill drops aged leases and idle pools and grants what is missing.
func (p *leasePool) refill() {
	now := time.Now()
	need := map[int64]int{}
	var drop []clientv3.LeaseID
	p.mu.Lock()
	for secs, tp := range p.ttls {
		if now.Sub(tp.lastUse) > poolIdle {
			for _, l := range tp.free {
				drop = append(drop, l.id)
			}
			delete(p.ttls, secs)
			continue
		}
		kept := tp.free[:0]
		aged := 0
		for _, l := range tp.free {
			if fresh(l, secs, now) {
				kept = append(kept, l)
			} else {
				drop = append(drop, l.id)
				aged++
			}
		}
		tp.free = kept
		// Leases that aged out unused were more than the demand: shrink
		// the target by as many, so a burst of concurrency does not leave
		// the pool granting and revoking poolMax leases every TTL/2 (raft
		// writes that queue up with the callers' own).
		tp.target = max(poolMin, tp.target-aged)
		if n := tp.target - len(tp.free); n > 0 {
			need[secs] = n
		}
	}
	p.mu.Unlock()
	for _, id := range drop {
		p.b.revokeLater(id)
	}
	p.b.shared.sweep(now)
	if len(need) == 0 {
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), p.b.callTimeout)
	defer cancel()
	sem := make(chan struct{}, poolGrantParallel)
	var wg sync.WaitGroup
	for secs, n := range need {
		for range n {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				sent := time.Now()
				resp, err := p.b.cli.Grant(ctx, secs)
				if err != nil {
					return // etcd unreachable: callers grant for themselves
				}
				p.mu.Lock()
				if tp := p.ttls[secs]; tp != nil && len(tp.free) < poolMax {
					tp.free = append(tp.free, pooledLease{id: resp.ID, granted: sent})
					resp = nil
				}
				p.mu.Unlock()
				if resp != nil {
					p.b.revokeLater(resp.ID)
				}
			}()
		}
	}
	wg.Wait()
}

// drain revokes every pooled lease as the backend closes (best effort).
func (p *leasePool) drain() {
	p.mu.Lock()
	var ids []clientv3.LeaseID
	for _, tp := range p.ttls {
		for _, l := range tp.free {
			ids = append(ids, l.id)
		}
	}
	p.ttls = map[int64]*ttlPool{}
	p.mu.Unlock()
	if len(ids) > 0 {
		p.b.revokeAll(ids)
	}
}

// renewal is a pooled lease's renewal running beside the transaction that
// attaches the lock to it.
type renewal struct {
	done chan struct{}
	ttl  int64 // granted TTL in seconds, when err is nil
	err  error
}

// renewAsync takes a pooled lease of secs seconds, if one is ready, and
// starts renewing it (on a reused stream, renew.go). The lease was granted or renewed less than secs/2
// ago, so it outlives the transaction that runs meanwhile; once the renewal
// succeeds, its TTL runs from no earlier than sent.
func (b *Backend) renewAsync(ctx context.Context, secs int64) (id clientv3.LeaseID, r *renewal, sent time.Time, ok bool) {
	pid, ok := b.pool.take(secs)
	if !ok {
		return 0, nil, time.Time{}, false
	}
	r = &renewal{done: make(chan struct{})}
	sent = time.Now()
	go func() {
		defer close(r.done)
		ttl, err := b.renew.once(ctx, pid)
		switch {
		case err != nil:
			r.err = err
		case ttl <= 0:
			r.err = fmt.Errorf("lease %x is gone", int64(pid))
		default:
			r.ttl = ttl
		}
	}()
	return pid, r, sent, true
}

// lease returns a lease of secs seconds whose TTL starts now: a pooled one,
// renewed, or else a fresh grant. It reports the TTL etcd granted and when
// the request was sent (the lease's TTL runs from no earlier than that).
func (b *Backend) lease(ctx context.Context, secs int64) (id clientv3.LeaseID, ttl time.Duration, sent time.Time, err error) {
	if pid, ok := b.pool.take(secs); ok {
		sent = time.Now()
		ttl, err := b.renew.once(ctx, pid)
		if err == nil && ttl > 0 {
			return pid, time.Duration(ttl) * time.Second, sent, nil
		}
		if ctx.Err() != nil {
			return 0, 0, sent, err
		}
		// The pooled lease is gone (or etcd hiccuped): grant afresh.
		b.revokeLater(pid)
	}
	sent = time.Now()
	resp, err := b.cli.Grant(ctx, secs)
	if err != nil {
		return 0, 0, sent, err
	}
	return resp.ID, time.Duration(resp.TTL) * time.Second, sent, nil
}
