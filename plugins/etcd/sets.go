package etcd

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// MaxKeys is the most keys one AcquireSet takes. A set's transaction
// compares and writes about four etcd keys per key, and etcd refuses a
// transaction of more than --max-txn-ops operations (128 by default).
const MaxKeys = 16

var _ backend.FairSetBackend = (*Backend)(nil)

// Sets of keys (backend.SetBackend). Every key of a set is stored as a
// single key is (lock record, owner key, stamp key), all on one lease of
// the set's TTL, by one transaction; the records say so (recordValue.Set),
// so that the lease, which several records share, is never pooled or
// revoked on behalf of one key alone.

// setKeys checks a set's keys.
func setKeys(keys []string) error {
	if len(keys) < 1 || len(keys) > MaxKeys {
		return fmt.Errorf("etcd: a set names %d keys; the etcd backend takes 1 to %d: %w", len(keys), MaxKeys, backend.ErrInvalidArgument)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if k == "" {
			return fmt.Errorf("etcd: key must not be empty: %w", backend.ErrInvalidArgument)
		}
		if i > 0 && sorted[i-1] == k {
			return fmt.Errorf("etcd: key %q is named twice in one set: %w", k, backend.ErrInvalidArgument)
		}
	}
	return nil
}

// AcquireSet takes one lease of the TTL and stores every key's lock on it
// in one transaction, which compares, for every key: no lock record, the
// stamp key unchanged since it was read (so the one stamp the set stores
// is later than every key's last), and the queue as a single Acquire
// requires it. Each key's fencing token is its lock record's
// CreateRevision: the transaction's revision, above every earlier token of
// every key.
func (b *Backend) AcquireSet(ctx context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	keys := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		keys[i] = c.Key
	}
	if err := setKeys(keys); err != nil {
		return backend.AcquireSetResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.AcquireSetResult{}, fmt.Errorf("etcd: owner_token must not be empty: %w", backend.ErrInvalidArgument)
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.AcquireSetResult{}, err
	}
	if err := checkDelay(req.LockDelay); err != nil {
		return backend.AcquireSetResult{}, err
	}
	if req.ReplayOnly {
		return b.replayOnly(ctx, keys, req.Request)
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	myRevs := make([]int64, len(keys))
	if req.WaiterID != "" {
		for i, k := range keys {
			queued, err := b.knowRev(cctx, ctx, backend.AcquireRequest{Key: k, WaiterID: req.WaiterID})
			if err != nil || !queued {
				return backend.AcquireSetResult{}, err // gone from a queue: not acquired
			}
			myRevs[i], _ = b.rev(b.queueKey(k, req.WaiterID))
		}
	}
	leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
	if err != nil {
		return backend.AcquireSetResult{}, wrap(ctx, "acquire set: lease", err)
	}
	dl, until, err := b.delayLease(cctx, req.TTL, req.LockDelay)
	if err != nil {
		b.pool.put(leaseID, int64(granted/time.Second), start)
		return backend.AcquireSetResult{}, wrap(ctx, "acquire set: lock-delay lease", err)
	}
	expires := start.Add(granted)
	res, attached, err := b.attachSet(cctx, ctx, req, keys, myRevs, leaseID, expires, granted, delaySpec{dl, until})
	switch {
	case err != nil:
		b.revokeLater(leaseID) // unknown outcome: nobody has the owner token
	case !attached:
		b.pool.put(leaseID, int64(granted/time.Second), start)
		b.revokeLater(dl) // no key is on it
	}
	return res, err
}

// setReads is how many reads attachSet makes per key: lock, stamp, queue
// head, delay and meta key.
const setReads = 5

func (b *Backend) attachSet(cctx, parent context.Context, req backend.AcquireSetRequest, keys []string, myRevs []int64,
	leaseID clientv3.LeaseID, expires time.Time, granted time.Duration, delay delaySpec) (backend.AcquireSetResult, bool, error) {
	for attempt := 1; ; attempt++ {
		// Read every key's lock record, stamp key and queue head at one
		// revision.
		reads := make([]clientv3.Op, 0, setReads*len(keys))
		for _, k := range keys {
			reads = append(reads, clientv3.OpGet(b.lockKey(k)), clientv3.OpGet(b.stampKey(k)),
				clientv3.OpGet(b.queuePrefix(k), clientv3.WithFirstCreate()...), clientv3.OpGet(b.delayKey(k)),
				clientv3.OpGet(b.metaKey(k)))
		}
		cur, err := b.cli.Txn(cctx).Then(reads...).Commit()
		if err != nil {
			return backend.AcquireSetResult{}, false, wrap(parent, "acquire set: read", err)
		}
		var held []*mvccpb.KeyValue
		for i := range keys {
			if kvs := cur.Responses[setReads*i].GetResponseRange().Kvs; len(kvs) > 0 {
				held = append(held, kvs[0])
			}
		}
		if len(held) == len(keys) {
			recs, replay, ok, err := b.replay(cctx, parent, keys, held, req.Request)
			if err != nil || ok {
				return backend.AcquireSetResult{Acquired: ok, Records: recs, Replayed: ok, Replay: replay}, false, err
			}
		}
		for i, k := range keys {
			if kvs := cur.Responses[setReads*i+4].GetResponseRange().Kvs; len(kvs) > 0 {
				// A semaphore or rwlock key (grants.go): sets are mutexes.
				kind, limit, err := readMeta(kvs[0])
				return backend.AcquireSetResult{Blocker: backend.Record{Key: k, Kind: kind, Limit: limit}}, false, err
			}
		}
		stored := req.Stamp
		stampRevs := make([]int64, len(keys))
		for i, k := range keys {
			if kvs := cur.Responses[setReads*i].GetResponseRange().Kvs; len(kvs) > 0 {
				rec, err := decodeRecord(k, kvs[0])
				return backend.AcquireSetResult{Blocker: rec}, false, err
			}
		}
		for i, k := range keys {
			if kvs := cur.Responses[setReads*i+3].GetResponseRange().Kvs; len(kvs) > 0 {
				return backend.AcquireSetResult{Blocker: delayed(k, kvs[0])}, false, nil // in its lock-delay
			}
		}
		for i, k := range keys {
			first := cur.Responses[setReads*i+2].GetResponseRange().Kvs
			qk := b.queueKey(k, req.WaiterID)
			if req.WaiterID == "" && len(first) > 0 ||
				req.WaiterID != "" && (len(first) == 0 || string(first[0].Key) != qk || first[0].CreateRevision != myRevs[i]) {
				return backend.AcquireSetResult{}, false, nil // free, but not this caller's turn
			}
			if kvs := cur.Responses[setReads*i+1].GetResponseRange().Kvs; len(kvs) > 0 {
				last, err := decodeStamp(kvs[0].Value)
				if err != nil {
					return backend.AcquireSetResult{}, false, err
				}
				stored = backend.NextStamp(last, stored)
				stampRevs[i] = kvs[0].ModRevision
			}
		}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		rec := newRecord(req.Holder, stored, true, req.Request, req.Replay, req.LockDelay).encode(expires, granted)
		for i, k := range keys {
			pfx := b.queuePrefix(k)
			cmps = append(cmps,
				clientv3.Compare(clientv3.CreateRevision(b.lockKey(k)), "=", 0),
				clientv3.Compare(clientv3.ModRevision(b.stampKey(k)), "=", stampRevs[i]),
				clientv3.Compare(clientv3.CreateRevision(b.metaKey(k)), "=", 0),
				b.noDelay(k))
			if delay.lease != clientv3.NoLease {
				ops = append(ops, b.putDelay(k, delay.lease, delay.until))
			}
			if req.WaiterID == "" {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix())
			} else {
				qk := b.queueKey(k, req.WaiterID)
				cmps = append(cmps,
					clientv3.Compare(clientv3.CreateRevision(qk), "=", myRevs[i]),
					clientv3.Compare(clientv3.CreateRevision(pfx), ">", myRevs[i]-1).WithPrefix())
				ops = append(ops, clientv3.OpDelete(qk))
			}
			ops = append(ops,
				clientv3.OpPut(b.lockKey(k), rec, clientv3.WithLease(leaseID)),
				clientv3.OpPut(b.ownerKey(k), req.OwnerToken, clientv3.WithLease(leaseID)),
				clientv3.OpPut(b.stampKey(k), encodeStamp(stored)))
		}
		resp, err := b.cli.Txn(cctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return backend.AcquireSetResult{}, false, wrap(parent, "acquire set", err)
		}
		if resp.Succeeded {
			out := backend.AcquireSetResult{Acquired: true, Records: make([]backend.Record, len(keys))}
			for i, k := range keys {
				if req.WaiterID != "" {
					b.setRev(b.queueKey(k, req.WaiterID), 0)
				}
				out.Records[i] = backend.Record{
					Key:          k,
					FencingToken: uint64(resp.Header.Revision), // every record's CreateRevision
					Holder:       req.Holder,
					ExpiresAt:    expires,
					Remaining:    max(0, time.Until(expires)),
					Stamp:        stored,
					LockDelay:    req.LockDelay,
				}
			}
			return out, true, nil
		}
		// A key changed between the read and the transaction: read again.
		if attempt == maxTxnAttempts {
			return backend.AcquireSetResult{}, false, fmt.Errorf("etcd acquire set: the keys kept changing over %d attempts: %w", attempt, backend.ErrUnavailable)
		}
	}
}

// ReleaseSet deletes every key's lock in one transaction if the owner token
// holds every one, writing every key's stamp key as Release does; the
// set's one lease goes back to the pool once.
func (b *Backend) ReleaseSet(ctx context.Context, req backend.ReleaseSetRequest) (bool, error) {
	if err := setKeys(req.Keys); err != nil {
		return false, err
	}
	if req.OwnerToken == "" {
		return false, nil
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	stamp := encodeStamp(req.Stamp)
	cmps, kept, spared, err := b.releaseGuards(cctx, ctx, req.Keys, req.Request, req.Abandon)
	if err != nil || spared {
		return false, err
	}
	ops := kept
	for _, k := range req.Keys {
		stampKey := b.stampKey(k)
		cmps = append(cmps, clientv3.Compare(clientv3.Value(b.ownerKey(k)), "=", req.OwnerToken))
		ops = append(ops,
			clientv3.OpDelete(b.lockKey(k), clientv3.WithPrevKV()),
			clientv3.OpDelete(b.ownerKey(k)),
			clientv3.OpDelete(b.delayKey(k)),
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(stampKey), "<", stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, "", clientv3.WithIgnoreValue())},
			))
	}
	resp, err := b.cli.Txn(cctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, wrap(ctx, "release set", err)
	}
	if !resp.Succeeded {
		if req.Abandon {
			return false, nil
		}
		return b.releasedBefore(cctx, ctx, req.Keys, req.Request)
	}
	b.detachedSet(resp.Responses[len(kept)].GetResponseDeleteRange().PrevKvs)
	return true, nil
}

// ExtendSet moves every key's lock onto one new lease of req.TTL in one
// transaction that compares every key's owner token and record
// ModRevision; the old lease goes back to the pool once.
func (b *Backend) ExtendSet(ctx context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	if err := setKeys(req.Keys); err != nil {
		return backend.ExtendSetResult{}, err
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.ExtendSetResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.ExtendSetResult{}, nil
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		reads := make([]clientv3.Op, 0, 2*len(req.Keys))
		for _, k := range req.Keys {
			reads = append(reads, clientv3.OpGet(b.lockKey(k)), clientv3.OpGet(b.ownerKey(k)))
		}
		cur, err := b.cli.Txn(cctx).Then(reads...).Commit()
		if err != nil {
			return backend.ExtendSetResult{}, wrap(ctx, "extend set: read", err)
		}
		recs := make([]backend.Record, len(req.Keys))
		vals := make([]recordValue, len(req.Keys))
		lockKVs := make([]*mvccpb.KeyValue, len(req.Keys))
		for i, k := range req.Keys {
			lk := cur.Responses[2*i].GetResponseRange().Kvs
			ok := cur.Responses[2*i+1].GetResponseRange().Kvs
			if len(lk) == 0 || len(ok) == 0 || string(ok[0].Value) != req.OwnerToken {
				return backend.ExtendSetResult{}, nil
			}
			if recs[i], err = decodeRecord(k, lk[0]); err != nil {
				return backend.ExtendSetResult{}, err
			}
			if vals[i], err = decodeValue(lk[0]); err != nil {
				return backend.ExtendSetResult{}, err
			}
			if vals[i], err = extended(vals[i], req.Request); err != nil {
				return backend.ExtendSetResult{}, err
			}
			lockKVs[i] = lk[0]
		}
		leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
		if err != nil {
			return backend.ExtendSetResult{}, wrap(ctx, "extend set: lease", err)
		}
		var delay time.Duration // the set's one lock-delay
		for _, r := range recs {
			delay = max(delay, r.LockDelay)
		}
		dl, until, err := b.delayLease(cctx, req.TTL, delay)
		if err != nil {
			b.pool.put(leaseID, int64(granted/time.Second), start)
			return backend.ExtendSetResult{}, wrap(ctx, "extend set: lock-delay lease", err)
		}
		expires := start.Add(granted)
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for i, k := range req.Keys {
			if recs[i].LockDelay > 0 {
				ops = append(ops, b.putDelay(k, dl, until))
			}
			cmps = append(cmps,
				clientv3.Compare(clientv3.Value(b.ownerKey(k)), "=", req.OwnerToken),
				clientv3.Compare(clientv3.ModRevision(b.lockKey(k)), "=", lockKVs[i].ModRevision))
			ops = append(ops,
				clientv3.OpPut(b.lockKey(k), vals[i].encode(expires, granted), clientv3.WithLease(leaseID)),
				clientv3.OpPut(b.ownerKey(k), req.OwnerToken, clientv3.WithLease(leaseID)))
		}
		resp, err := b.cli.Txn(cctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			// Unknown outcome: as Extend, leave the new lease to expire.
			return backend.ExtendSetResult{}, wrap(ctx, "extend set", err)
		}
		if resp.Succeeded {
			b.detachedSet(lockKVs)
			for i := range recs {
				recs[i].ExpiresAt = expires
				recs[i].Remaining = max(0, time.Until(expires))
			}
			return backend.ExtendSetResult{Extended: true, Records: recs}, nil
		}
		b.pool.put(leaseID, int64(granted/time.Second), start)
		b.revokeLater(dl)
		if attempt == maxTxnAttempts {
			return backend.ExtendSetResult{}, fmt.Errorf("etcd extend set: the records kept changing over %d attempts: %w", attempt, backend.ErrUnavailable)
		}
	}
}

// EnqueueSet puts one entry in every key's queue in one transaction, on the
// session lease: the entries share one CreateRevision, so two waiters stand
// in the same order in every queue they share.
func (b *Backend) EnqueueSet(ctx context.Context, keys []string, waiterID string) error {
	if err := setKeys(keys); err != nil {
		return err
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		lease, err := b.session(cctx)
		if err != nil {
			return wrap(ctx, "enqueue set: session", err)
		}
		ops := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			ops[i] = clientv3.OpPut(b.queueKey(k, waiterID), "", clientv3.WithLease(lease))
		}
		resp, err := b.cli.Txn(cctx).Then(ops...).Commit()
		if err != nil {
			if attempt == 0 && isLeaseNotFound(err) {
				b.dropSession(lease)
				continue
			}
			for _, k := range keys {
				b.orphan(b.queueKey(k, waiterID)) // unknown outcome, as Enqueue
			}
			return wrap(ctx, "enqueue set", err)
		}
		for _, k := range keys {
			qk := b.queueKey(k, waiterID)
			b.setRev(qk, resp.Header.Revision)
			b.q.mu.Lock()
			delete(b.q.orphans, qk)
			b.q.mu.Unlock()
		}
		return nil
	}
}

// detachedSet hands the lease that a set's records (kvs, the deleted or
// moved records of one set) shared to the pool, once.
func (b *Backend) detachedSet(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		if kv != nil && kv.Lease != 0 {
			b.detachedLease(kv)
			return
		}
	}
}
