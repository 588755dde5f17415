package etcd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// maxTxnAttempts bounds the optimistic retries of one Acquire or Extend when
// other servers keep changing the key's stamp or record between attempts.
const maxTxnAttempts = 16

func (b *Backend) checkTTL(ttl time.Duration) error {
	if ttl < b.minTTL || ttl > MaxTTL {
		return fmt.Errorf("etcd: ttl %s outside [%s, %s]: %w", ttl, b.minTTL, MaxTTL, backend.ErrInvalidArgument)
	}
	return nil
}

// Acquire takes a lease of the TTL and stores the lock in one transaction
// if the key is free; see the package doc. With a pooled lease, its renewal
// runs beside the transaction instead of before it: one etcd round trip
// less on the way to a lock.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Key == "" || req.OwnerToken == "" {
		// A lock under the empty token is one the empty token would release.
		return backend.AcquireResult{}, fmt.Errorf("etcd: key and owner_token must not be empty: %w", backend.ErrInvalidArgument)
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	if err := checkDelay(req.LockDelay); err != nil {
		return backend.AcquireResult{}, err
	}
	if req.Kind != backend.KindMutex {
		return b.acquireGrant(ctx, req)
	}
	if req.ReplayOnly {
		res, err := b.replayOnly(ctx, []string{req.Key}, req.Request)
		return single(res), err
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	secs := ttlSeconds(req.TTL)
	if req.WaiterID != "" {
		queued, err := b.knowRev(cctx, ctx, req)
		if err != nil || !queued {
			return backend.AcquireResult{}, err // gone from the queue: not acquired
		}
	}
	dl, until, err := b.delayLease(cctx, req.TTL, req.LockDelay)
	if err != nil {
		return backend.AcquireResult{}, wrap(ctx, "acquire: lock-delay lease", err)
	}
	res, attached, err := b.acquireOn(cctx, ctx, req, secs, delaySpec{dl, until})
	if !attached {
		b.revokeLater(dl) // no key is on it
	}
	return res, err
}

// delaySpec is the lease and estimated end of a lock's delay keys (a zero
// lease: no lock-delay).
type delaySpec struct {
	lease clientv3.LeaseID
	until time.Time
}

// acquireOn is Acquire with its lock-delay lease in hand.
func (b *Backend) acquireOn(cctx, ctx context.Context, req backend.AcquireRequest, secs int64, delay delaySpec) (backend.AcquireResult, bool, error) {

	if id, r, sent, ok := b.renewAsync(cctx, secs); ok {
		granted := time.Duration(secs) * time.Second
		res, attached, err := b.attach(cctx, ctx, req, id, sent.Add(granted), granted, delay)
		<-r.done
		if r.err == nil {
			switch {
			case err != nil:
				// Unknown outcome: a lock created on the lease would be
				// held by an owner token nobody received; revoke it.
				b.revokeLater(id)
				return backend.AcquireResult{}, true, err // the delay keys may be on their lease: left to expire
			case attached:
				res.Record.ExpiresAt = sent.Add(time.Duration(r.ttl) * time.Second)
				res.Record.Remaining = max(0, time.Until(res.Record.ExpiresAt))
				return res, true, nil
			default: // held by someone else; the renewed lease was not attached
				b.pool.put(id, secs, sent)
				return res, false, nil
			}
		}
		// The renewal failed: the lease is gone, or etcd did not answer.
		b.revokeLater(id)
		if attached {
			// Never hand out a lock whose lease's TTL is not vouched for:
			// take it back (nobody has its owner token yet).
			b.undo(req)
			return backend.AcquireResult{}, false, wrap(ctx, "acquire: lease renewal", r.err)
		}
		if err == nil {
			return res, false, nil // held by someone else: the answer stands
		}
		if cctx.Err() != nil {
			return backend.AcquireResult{}, true, err
		}
		// Most likely the pooled lease had expired (the put failed for
		// it): take a fresh grant.
	}

	leaseID, granted, start, err := b.lease(cctx, secs)
	if err != nil {
		return backend.AcquireResult{}, false, wrap(ctx, "acquire: lease", err)
	}
	res, attached, err := b.attach(cctx, ctx, req, leaseID, start.Add(granted), granted, delay)
	switch {
	case err != nil:
		b.revokeLater(leaseID) // as above: unknown outcome
		return res, true, err
	case attached:
	default: // held by someone else: our lease was never attached; pool it
		b.pool.put(leaseID, int64(granted/time.Second), start)
	}
	return res, attached, err
}

// attach runs the acquire transaction with leaseID: if the key is free,
// store the lock on that lease (attached=true); else report the holder.
// parent is the caller's context (for wrap), cctx the bounded one.
func (b *Backend) attach(cctx, parent context.Context, req backend.AcquireRequest, leaseID clientv3.LeaseID, expires time.Time, granted time.Duration,
	delay delaySpec) (res backend.AcquireResult, attached bool, err error) {
	return b.attachFrom(cctx, parent, b.newAcquireTxn(req, leaseID, expires, granted, delay, false), 1)
}

// attachFrom runs a's transaction until it is decided, counting attempts
// from attempt (a batch made the first one).
func (b *Backend) attachFrom(cctx, parent context.Context, a *acquireTxn, attempt int) (backend.AcquireResult, bool, error) {
	for ; ; attempt++ {
		cmps, then, els := a.ops()
		resp, err := b.cli.Txn(cctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			return backend.AcquireResult{}, false, wrap(parent, "acquire", err)
		}
		res, attached, again, err := b.acquireDecided(cctx, parent, a, resp.Succeeded, resp.Header.Revision, resp.Responses)
		if !again {
			return res, attached, err
		}
		if attempt >= maxTxnAttempts {
			return backend.AcquireResult{}, false, fmt.Errorf("etcd acquire %q: stamp kept changing over %d attempts: %w", a.req.Key, attempt, backend.ErrUnavailable)
		}
	}
}

// acquireTxn is an Acquire's transaction on one lease, attempt after
// attempt: if the key has no lock, no meta key, no lock-delay, its queue
// lets the caller in and its stored stamp is below the one to store, put
// the record, the owner and the stamp; else read what refused it.
type acquireTxn struct {
	b       *Backend
	req     backend.AcquireRequest
	lease   clientv3.LeaseID
	expires time.Time
	granted time.Duration
	// shared: the lease carries other records too (a batch's), so that no
	// Release or Extend of this one key pools or revokes it.
	shared bool
	// stored is the stamp this attempt stores, if the stored one is below
	// it or the key has none.
	stored hlc.Timestamp
	guards []clientv3.Cmp // the queue's, the lock-delay's, the kind's
	leave  []clientv3.Op  // a waiter's leaving the queue; the delay key
	myRev  int64          // a waiter's entry's create revision
	// stamped: the key is known to have a stamp key (stampSeen), so the
	// attempt leaves out the branch for a key without one.
	stamped bool
}

func (b *Backend) newAcquireTxn(req backend.AcquireRequest, leaseID clientv3.LeaseID, expires time.Time, granted time.Duration,
	delay delaySpec, shared bool) *acquireTxn {
	// First attempt: propose the engine's stamp (the common case: the
	// engine's clock has moved on since the last holder). The transaction
	// tells us otherwise.
	a := &acquireTxn{b: b, req: req, lease: leaseID, expires: expires, granted: granted, shared: shared, stored: req.Stamp,
		stamped: b.stamps.seen(req.Key)}
	a.guards, a.leave, a.myRev = b.queueGuards(req.Key, req.WaiterID)
	// A key with a meta key holds grants (grants.go): never a mutex.
	a.guards = append(a.guards, b.noDelay(req.Key), clientv3.Compare(clientv3.CreateRevision(b.metaKey(req.Key)), "=", 0))
	if delay.lease != clientv3.NoLease {
		a.leave = append(a.leave, b.putDelay(req.Key, delay.lease, delay.until))
	}
	return a
}

// ops is the attempt's transaction: its compares, its writes, and the
// reads of its else branch (acquireDecided reads them by position). The
// writes sit in a nested transaction that stores the stamp only if the
// stored one is below it, and in that one's else branch another that
// stores it if the key has no stamp key yet (a key never locked: a value
// compare on a missing key fails), else reads the stamp: one round trip
// decides both cases. For a key known to have a stamp key (stamped), the
// else branch only reads the stamp: the writes go once, not twice, and a
// stamp key found missing after all (read: none) sends the attempt again
// in the full form.
func (a *acquireTxn) ops() (cmps []clientv3.Cmp, then, els []clientv3.Op) {
	b, req := a.b, a.req
	lockKey, stampKey := b.lockKey(req.Key), b.stampKey(req.Key)
	rec := newRecord(req.Holder, a.stored, false, req.Request, req.Replay, req.LockDelay)
	rec.SharedLease = a.shared
	stamp := encodeStamp(a.stored)
	cmps = append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lockKey), "=", 0)}, a.guards...)
	writes := append([]clientv3.Op{
		clientv3.OpPut(lockKey, rec.encode(a.expires, a.granted), clientv3.WithLease(a.lease)),
		clientv3.OpPut(b.ownerKey(req.Key), req.OwnerToken, clientv3.WithLease(a.lease)),
		clientv3.OpPut(stampKey, stamp),
	}, a.leave...)
	refused := []clientv3.Op{clientv3.OpGet(stampKey)}
	if !a.stamped {
		refused = []clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(stampKey), "=", 0)},
			writes,
			refused,
		)}
	}
	then = []clientv3.Op{clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(stampKey), "<", stamp)},
		writes,
		refused,
	)}
	// No read of the queue: a refusal that none of these explains is the
	// queue's, which acquireDecided needs no more of (the proposal goes
	// into etcd's log with every Acquire, refused or not).
	els = []clientv3.Op{
		clientv3.OpGet(lockKey),
		clientv3.OpGet(b.delayKey(req.Key)),
		clientv3.OpGet(b.metaKey(req.Key)),
	}
	return cmps, then, els
}

// stampRefused reads the nested stamp transactions of a taken branch
// (rs: its responses, of an attempt in the full form or, stamped, the
// short one): the stamp stored when one of them wrote, else (refused=true)
// the stamp the key keeps. missing: the short form found no stamp key
// (nothing was written; the attempt goes again in the full form).
func stampRefused(key string, stamped bool, rs []*etcdserverpb.ResponseOp) (last hlc.Timestamp, refused, missing bool, err error) {
	bad := fmt.Errorf("etcd acquire %q: the stamp transaction's answer is not the one sent: %w", key, backend.ErrUnavailable)
	if len(rs) != 1 || rs[0].GetResponseTxn() == nil {
		return hlc.Timestamp{}, false, false, bad
	}
	below := rs[0].GetResponseTxn()
	if below.Succeeded {
		return hlc.Timestamp{}, false, false, nil
	}
	if len(below.Responses) != 1 {
		return hlc.Timestamp{}, false, false, bad
	}
	read := below.Responses[0]
	if !stamped {
		first := below.Responses[0].GetResponseTxn()
		if first == nil {
			return hlc.Timestamp{}, false, false, bad
		}
		if first.Succeeded {
			return hlc.Timestamp{}, false, false, nil
		}
		if len(first.Responses) != 1 {
			return hlc.Timestamp{}, false, false, bad
		}
		read = first.Responses[0]
	}
	if read.GetResponseRange() == nil {
		return hlc.Timestamp{}, false, false, bad
	}
	kvs := read.GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		if stamped {
			return hlc.Timestamp{}, false, true, nil
		}
		return hlc.Timestamp{}, false, false, bad
	}
	last, err = decodeStamp(kvs[0].Value)
	return last, true, false, err
}

// acquireDecided reads the outcome of one attempt of a (committed at
// revision rev; rs: its branch's responses). again: the key is free but
// its stamp was not below the proposal; a now proposes the successor of
// the stored stamp, for the next attempt.
func (b *Backend) acquireDecided(cctx, parent context.Context, a *acquireTxn, succeeded bool, rev int64, rs []*etcdserverpb.ResponseOp) (
	res backend.AcquireResult, attached, again bool, err error) {
	req := a.req
	if succeeded {
		last, refused, missing, err := stampRefused(req.Key, a.stamped, rs)
		if err != nil {
			return backend.AcquireResult{}, false, false, err
		}
		if missing {
			// Not stamped after all: go again in the full form.
			b.stamps.forget(req.Key)
			a.stamped = false
			return backend.AcquireResult{}, false, true, nil
		}
		b.stamps.saw(req.Key) // written now, or read
		a.stamped = true
		if refused {
			// The key is free but its stamp is not below the proposal:
			// propose its successor.
			a.stored = backend.NextStamp(last, req.Stamp)
			return backend.AcquireResult{}, false, true, nil
		}
		if req.WaiterID != "" {
			b.setRev(b.queueKey(req.Key, req.WaiterID), 0)
		}
		// The transaction wrote the stamp key at its revision.
		b.held.set(req.Key, heldStamp{token: req.OwnerToken, rev: rev, stamp: encodeStamp(a.stored),
			lease: a.lease, secs: int64(a.granted / time.Second), renewed: a.expires.Add(-a.granted), shared: a.shared,
			delay: req.LockDelay > 0})
		return backend.AcquireResult{Acquired: true, Record: backend.Record{
			Key:          req.Key,
			FencingToken: uint64(rev), // the lock key's CreateRevision
			Holder:       req.Holder,
			ExpiresAt:    a.expires,
			Remaining:    max(0, time.Until(a.expires)),
			Stamp:        a.stored,
			LockDelay:    req.LockDelay,
		}}, true, false, nil
	}
	if len(rs) != 3 {
		return backend.AcquireResult{}, false, false, fmt.Errorf("etcd acquire %q: %d reads in the refusal, want 3: %w", req.Key, len(rs), backend.ErrUnavailable)
	}
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
		// Held: by this request's earlier attempt (a replay), or by
		// someone else.
		recs, replay, ok, err := b.replay(cctx, parent, []string{req.Key}, kvs, req.Request)
		if err != nil || ok {
			return single(backend.AcquireSetResult{Acquired: ok, Records: recs, Replayed: ok, Replay: replay}), false, false, err
		}
		rec, err := decodeRecord(req.Key, kvs[0])
		return backend.AcquireResult{Record: rec}, false, false, err
	}
	if kvs := rs[2].GetResponseRange().Kvs; len(kvs) > 0 {
		res, err := b.keptOther(parent, req.Key, kvs[0]) // a semaphore's or rwlock's
		return res, false, false, err
	}
	if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 0 {
		return backend.AcquireResult{Record: delayed(req.Key, kvs[0])}, false, false, nil // in its lock-delay
	}
	// Free, but others are queued ahead (or this waiter's entry is
	// gone): not acquired, and no holder to report. (Only the queue's
	// compares are left to have refused it.)
	return backend.AcquireResult{}, false, false, nil
}

// queueGuards are an Acquire's compares for the fair queue (queue.go): a
// caller with no entry needs an empty queue; a queued waiter needs its own
// entry (whose create revision is myRev) to be the oldest, and leaves the
// queue in the same step (leave).
func (b *Backend) queueGuards(key, waiterID string) (cmps []clientv3.Cmp, leave []clientv3.Op, myRev int64) {
	pfx := b.queuePrefix(key)
	if waiterID == "" {
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()}, nil, 0
	}
	qk := b.queueKey(key, waiterID)
	myRev, _ = b.rev(qk)
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(qk), "=", myRev),
		clientv3.Compare(clientv3.CreateRevision(pfx), ">", myRev-1).WithPrefix(),
	}, []clientv3.Op{clientv3.OpDelete(qk)}, myRev
}

// keptOther answers a mutex Acquire of a key kept as a semaphore or rwlock
// (its meta key): not acquired, with the key's kind and limit and its
// grants, read after the refusal (informational, as every holder is).
func (b *Backend) keptOther(ctx context.Context, key string, meta *mvccpb.KeyValue) (backend.AcquireResult, error) {
	kind, limit, err := readMeta(meta)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	rec, held, err := b.Get(ctx, key)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if !held {
		rec = backend.Record{Key: key}
	}
	rec.Kind, rec.Limit = kind, limit
	return backend.AcquireResult{Record: rec}, nil
}

// single is the answer of a set of one as an Acquire's.
func single(res backend.AcquireSetResult) backend.AcquireResult {
	out := backend.AcquireResult{Acquired: res.Acquired, Record: res.Blocker, Replayed: res.Replayed, Replay: res.Replay}
	if res.Acquired && len(res.Records) > 0 {
		out.Record = res.Records[0]
	}
	return out
}

// knowRev makes sure the waiter's entry's create revision is known (it is
// when this process enqueued it); false when the entry is gone.
func (b *Backend) knowRev(cctx, parent context.Context, req backend.AcquireRequest) (bool, error) {
	qk := b.queueKey(req.Key, req.WaiterID)
	if _, ok := b.rev(qk); ok {
		return true, nil
	}
	resp, err := b.cli.Get(cctx, qk)
	if err != nil {
		return false, wrap(parent, "acquire: queue", err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	b.setRev(qk, resp.Kvs[0].CreateRevision)
	return true, nil
}

// undo deletes a lock this Acquire just stored, if its owner token still
// holds it, writing the stamp key as Release does (so watchers see a
// release and wake their waiters). Best effort: if etcd cannot be reached,
// the lock expires with its lease, and nobody has its owner token.
func (b *Backend) undo(req backend.AcquireRequest) {
	b.held.forget(req.Key, req.OwnerToken)
	ctx, cancel := context.WithTimeout(context.Background(), b.callTimeout)
	defer cancel()
	_, _ = b.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.Value(b.ownerKey(req.Key)), "=", req.OwnerToken),
	).Then(
		clientv3.OpDelete(b.lockKey(req.Key)),
		clientv3.OpDelete(b.ownerKey(req.Key)),
		clientv3.OpDelete(b.delayKey(req.Key)),
		clientv3.OpPut(b.stampKey(req.Key), "", clientv3.WithIgnoreValue()),
	).Commit()
}

// Release deletes the lock in one transaction if the owner token holds it,
// raising the key's stamp to req.Stamp when later, then revokes the lease in
// the background.
func (b *Backend) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	if req.Abandon {
		if released, held, err := b.abandonGrant(cctx, ctx, req); err != nil || held {
			return released, err
		}
	}
	guards, kept, spared, err := b.releaseGuards(cctx, ctx, []string{req.Key}, req.Request, req.Abandon)
	if err != nil || spared {
		return false, err
	}
	for {
		cmps, then, els, known := b.releaseOps(req, guards, kept)
		resp, err := b.cli.Txn(cctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			return false, wrap(ctx, "release", err)
		}
		released, again, err := b.releaseDecided(cctx, ctx, req, len(kept), known, resp.Succeeded, resp.Responses)
		if !again {
			return released, err
		}
		// The stamp key moved since this process's Acquire: the hint is
		// gone, and the next attempt is the nested form.
	}
}

// releaseOps is a Release's transaction: if the owner key holds the token
// (and guards hold), delete the lock and write the stamp key; else release
// the token's grant of the key, if it has one. kept are the writes of the
// release's identity. known: the lock is one this process granted, whose
// stored stamp, record revision, lease and lock-delay it knows
// (heldStamps). Then the stamp key is put as the later of that stamp and
// the Release's, comparing that the stamp key and the record are still
// the Acquire's writes, instead of the owner key and a nested transaction
// (about 0.1 ms of etcd's time); the record is deleted without reading it
// back (the lease to pool is known), and the delay key only when the lock
// has a lock-delay. Its Else branch reads the owner key, so that a moved
// stamp key or a rewritten record (the owner still this token) sends the
// nested form.
func (b *Backend) releaseOps(req backend.ReleaseRequest, guards []clientv3.Cmp, kept []clientv3.Op) (cmps []clientv3.Cmp, then, els []clientv3.Op, known *heldStamp) {
	lockKey, ownerKey, stampKey := b.lockKey(req.Key), b.ownerKey(req.Key), b.stampKey(req.Key)
	stamp := encodeStamp(req.Stamp)
	if h, ok := b.held.get(req.Key, req.OwnerToken); ok && len(guards) == 0 {
		known = &h
	}
	then = slices.Clip(kept)
	if h := known; h != nil {
		cmps = []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(lockKey), "=", h.rev),
			clientv3.Compare(clientv3.ModRevision(stampKey), "=", h.rev),
		}
		then = append(then, clientv3.OpDelete(lockKey), clientv3.OpDelete(ownerKey))
		if h.delay {
			then = append(then, clientv3.OpDelete(b.delayKey(req.Key)))
		}
		// Stamps encode so that byte order is their order. The stamp
		// key is always written: Watch tells a release (record deleted
		// with a stamp write) from an expiry (record deleted alone).
		then = append(then, clientv3.OpPut(stampKey, max(h.stamp, stamp)))
	} else {
		cmps = append(slices.Clip(guards), clientv3.Compare(clientv3.Value(ownerKey), "=", req.OwnerToken))
		then = append(then,
			clientv3.OpDelete(lockKey, clientv3.WithPrevKV()),
			clientv3.OpDelete(ownerKey),
			clientv3.OpDelete(b.delayKey(req.Key)), // a released key has no lock-delay
			// Raised to the release stamp when that is later.
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(stampKey), "<", stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, "", clientv3.WithIgnoreValue())},
			),
		)
	}
	switch {
	case known != nil:
		// A lock this process granted as a mutex: the key has no grants.
		els = []clientv3.Op{clientv3.OpGet(ownerKey)}
	case !b.stamps.seen(req.Key):
		// Not this token's mutex lock: perhaps its grant (grants.go),
		// unless the key is known to be a mutex (stamps.go): a key
		// keeps its kind.
		els = []clientv3.Op{b.releaseGrantOps(req.Key, req.OwnerToken, stamp, kept)}
	}
	return cmps, then, els, known
}

// releaseDecided reads the outcome of releaseOps (rs: its branch's
// responses; nKept: how many writes of the identity lead its Then; known:
// releaseOps's). again: the token still holds the lock but its stamp key
// or its record was written since the Acquire; the hint is dropped, and
// the Release goes again, in the nested form.
func (b *Backend) releaseDecided(cctx, parent context.Context, req backend.ReleaseRequest, nKept int, known *heldStamp, succeeded bool, rs []*etcdserverpb.ResponseOp) (
	released, again bool, err error) {
	if !succeeded && known != nil {
		if len(rs) != 1 || rs[0].GetResponseRange() == nil {
			return false, false, fmt.Errorf("etcd release %q: the owner read is not the one sent: %w", req.Key, backend.ErrUnavailable)
		}
		if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 && string(kvs[0].Value) == req.OwnerToken {
			b.held.forget(req.Key, req.OwnerToken)
			return false, true, nil
		}
		b.held.forget(req.Key, req.OwnerToken)
		released, err := b.releasedBefore(cctx, parent, []string{req.Key}, req.Request)
		return released, false, err
	}
	if !succeeded {
		if len(rs) > 0 {
			if g := rs[0].GetResponseTxn(); g != nil && g.Succeeded {
				b.grantReleased(g, nKept)
				return true, false, nil
			}
		}
		if req.Abandon {
			return false, false, nil
		}
		released, err := b.releasedBefore(cctx, parent, []string{req.Key}, req.Request)
		return released, false, err
	}
	b.stamps.saw(req.Key) // a release writes the stamp key
	if known != nil {
		// Only the one transaction that deleted the record pools its
		// lease.
		b.held.forget(req.Key, req.OwnerToken)
		b.detachedKnown(*known)
		return true, false, nil
	}
	b.held.forget(req.Key, req.OwnerToken)
	if len(rs) > nKept {
		if prev := rs[nKept].GetResponseDeleteRange().PrevKvs; len(prev) > 0 {
			b.detached(prev[0])
		}
	}
	return true, false, nil
}

// Extend moves the lock onto a new lease of req.TTL if the owner token still
// holds it; see the package doc.
func (b *Backend) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	lockKey, ownerKey := b.lockKey(req.Key), b.ownerKey(req.Key)
	for attempt := 1; ; attempt++ {
		cur, err := b.cli.Txn(cctx).Then(clientv3.OpGet(lockKey), clientv3.OpGet(ownerKey),
			clientv3.OpGet(b.grantKey(req.Key, req.OwnerToken))).Commit()
		if err != nil {
			return backend.ExtendResult{}, wrap(ctx, "extend: read", err)
		}
		lockKVs := cur.Responses[0].GetResponseRange().Kvs
		ownerKVs := cur.Responses[1].GetResponseRange().Kvs
		if g := cur.Responses[2].GetResponseRange().Kvs; len(g) > 0 && req.OwnerToken != "" {
			res, done, err := b.extendGrant(cctx, ctx, req, g[0])
			if err != nil || done {
				return res, err
			}
			if attempt == maxTxnAttempts {
				return backend.ExtendResult{}, fmt.Errorf("etcd extend %q: the grant kept changing over %d attempts: %w", req.Key, attempt, backend.ErrUnavailable)
			}
			continue // the grant changed meanwhile: read again
		}
		if len(lockKVs) == 0 || len(ownerKVs) == 0 || string(ownerKVs[0].Value) != req.OwnerToken {
			return backend.ExtendResult{}, nil
		}
		rec, err := decodeRecord(req.Key, lockKVs[0])
		if err != nil {
			return backend.ExtendResult{}, err
		}
		val, err := decodeValue(lockKVs[0])
		if err != nil {
			return backend.ExtendResult{}, err
		}
		if val, err = extended(val, req.Request); err != nil {
			return backend.ExtendResult{}, err
		}
		// The record moves onto a lease of its own, which its release
		// may pool (a batch's record shared the one it leaves).
		val.SharedLease = false

		leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
		if err != nil {
			return backend.ExtendResult{}, wrap(ctx, "extend: lease", err)
		}
		dl, until, err := b.delayLease(cctx, req.TTL, rec.LockDelay)
		if err != nil {
			b.pool.put(leaseID, int64(granted/time.Second), start)
			return backend.ExtendResult{}, wrap(ctx, "extend: lock-delay lease", err)
		}
		expires := start.Add(granted)
		ops := []clientv3.Op{
			clientv3.OpPut(lockKey, val.encode(expires, granted), clientv3.WithLease(leaseID)),
			clientv3.OpPut(ownerKey, req.OwnerToken, clientv3.WithLease(leaseID)),
		}
		if dl != clientv3.NoLease {
			ops = append(ops, b.putDelay(req.Key, dl, until))
		}
		resp, err := b.cli.Txn(cctx).If(
			clientv3.Compare(clientv3.Value(ownerKey), "=", req.OwnerToken),
			clientv3.Compare(clientv3.ModRevision(lockKey), "=", lockKVs[0].ModRevision),
		).Then(ops...).Commit()
		if err != nil {
			// Unknown outcome: the record may be on the new lease now, so
			// the new lease is left to expire rather than revoked (revoking
			// it could drop a lock that is still validly held).
			return backend.ExtendResult{}, wrap(ctx, "extend", err)
		}
		if resp.Succeeded {
			b.held.forget(req.Key, req.OwnerToken) // the record is rewritten: its Release goes the nested form
			b.detached(lockKVs[0])
			rec.ExpiresAt = expires
			rec.Remaining = max(0, time.Until(expires))
			return backend.ExtendResult{Extended: true, Record: rec}, nil
		}
		// Released, expired, or extended concurrently by the same owner:
		// read again and decide. The new leases were not attached.
		b.pool.put(leaseID, int64(granted/time.Second), start)
		b.revokeLater(dl)
		if attempt == maxTxnAttempts {
			return backend.ExtendResult{}, fmt.Errorf("etcd extend %q: record kept changing over %d attempts: %w", req.Key, attempt, backend.ErrUnavailable)
		}
	}
}

// Get returns the lock on key, if held.
func (b *Backend) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	resp, err := b.cli.Txn(cctx).Then(clientv3.OpGet(b.lockKey(key)), clientv3.OpGet(b.delayKey(key)),
		clientv3.OpGet(b.metaKey(key)), clientv3.OpGet(b.grantPrefix(key), clientv3.WithPrefix())).Commit()
	if err != nil {
		return backend.Record{}, false, wrap(ctx, "get", err)
	}
	if meta := resp.Responses[2].GetResponseRange().Kvs; len(meta) > 0 {
		return getGrants(key, meta, resp.Responses[3].GetResponseRange().Kvs)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		if d := resp.Responses[1].GetResponseRange().Kvs; len(d) > 0 {
			return delayed(key, d[0]), false, nil
		}
		return backend.Record{}, false, nil
	}
	rec, err := decodeRecord(key, kvs[0])
	return rec, err == nil, err
}

// List returns held locks under req.Prefix in key order. The page token is
// the last key of the previous page.
func (b *Backend) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	if req.PageSize < 1 {
		return backend.ListPage{}, fmt.Errorf("etcd: page size %d, want at least 1: %w", req.PageSize, backend.ErrInvalidArgument)
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	from := b.lockKey(req.Prefix)
	end := clientv3.GetPrefixRangeEnd(from)
	if req.PageToken != "" {
		// The smallest key after the token's own lock and stamp keys.
		if after := b.lockKey(req.PageToken) + "\x01"; after > from {
			from = after
		}
	}
	var page backend.ListPage
	// The range also holds stamp keys (of held and of free keys) and the
	// meta and grant keys of semaphores and rwlocks, each right after its
	// key: read in batches until a page is full at a key's end and one more
	// record is seen, or the range ends. Every read is at the first read's
	// revision, so a page is one snapshot. A page counts grants, and a
	// key's grants are never split across pages.
	var (
		rev     int64
		count   int
		pending *backend.Record // a key's grants, while they are read
		grants  []*mvccpb.KeyValue
	)
	flush := func() error {
		if pending == nil {
			return nil
		}
		rec, err := grantsRecord(pending.Key, pending.Kind, pending.Limit, grants, 0)
		if err != nil {
			return err
		}
		page.Records = append(page.Records, rec)
		count += len(rec.Holders)
		pending, grants = nil, nil
		return nil
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(2*(req.PageSize+1) + 8))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := b.cli.Get(cctx, from, opts...)
		if err != nil {
			return backend.ListPage{}, wrap(ctx, "list", err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			key, suffix := splitName(strings.TrimPrefix(string(kv.Key), b.locks))
			grant := isGrantSuffix(suffix)
			if suffix != "" && !grant {
				continue // a stamp or meta key
			}
			if pending != nil && pending.Key != key {
				if err := flush(); err != nil {
					return backend.ListPage{}, err
				}
			}
			if pending == nil && count >= req.PageSize {
				page.NextPageToken = page.Records[len(page.Records)-1].Key
				return page, nil
			}
			rec, err := decodeRecord(key, kv)
			if err != nil {
				return backend.ListPage{}, err
			}
			if !grant {
				page.Records = append(page.Records, rec)
				count++
				continue
			}
			if pending == nil {
				pending = &backend.Record{Key: key, Kind: rec.Kind, Limit: rec.Limit}
			}
			grants = append(grants, kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			if err := flush(); err != nil {
				return backend.ListPage{}, err
			}
			return page, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// detached hands the lease of a lock record that a committed transaction
// just detached from it (deleted or moved the record and the owner key) to
// the pool. The lease of a set's record is left alone: other records are
// still on it (a single-key Release or Extend of one key of a set detaches
// that key only; the lease expires with the rest). So is a batch's, until
// the last of the records this process counted on it is detached
// (sharedleases.go).
func (b *Backend) detached(kv *mvccpb.KeyValue) {
	if sharesLease(kv) {
		id := clientv3.LeaseID(kv.Lease)
		if secs, renewed, last := b.shared.detached(id); last {
			b.pool.put(id, secs, renewed)
		}
		return
	}
	b.detachedLease(kv)
}

// detachedKnown is detached for a lock this process granted, from what its
// Acquire stored (heldStamps) instead of the record read back.
func (b *Backend) detachedKnown(h heldStamp) {
	if h.shared {
		if secs, renewed, last := b.shared.detached(h.lease); last {
			b.pool.put(h.lease, secs, renewed)
		}
		return
	}
	b.pool.put(h.lease, h.secs, h.renewed)
}

// detachedLease hands the lease of kv, which no record uses any more, to
// the pool, or revokes it when it cannot be pooled.
func (b *Backend) detachedLease(kv *mvccpb.KeyValue) {
	id, secs, renewed, ok := detachedLease(kv)
	if !ok {
		if kv != nil {
			b.revokeLater(clientv3.LeaseID(kv.Lease))
		}
		return
	}
	b.pool.put(clientv3.LeaseID(id), secs, renewed)
}
