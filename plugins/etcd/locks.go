package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
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

// Acquire grants a lease of the TTL and stores the lock in one transaction
// if the key is free; see the package doc.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	cctx, cancel := b.call(ctx)
	defer cancel()

	leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
	if err != nil {
		return backend.AcquireResult{}, wrap(ctx, "acquire: lease", err)
	}
	// Unless the lock is ours, revoke the lease: after a lost race, and also
	// after an error of unknown outcome, where a lock created on it would be
	// held by an owner token nobody received.
	kept := false
	defer func() {
		if !kept {
			b.revokeLater(leaseID)
		}
	}()
	expires := start.Add(granted)

	lockKey, ownerKey, stampKey := b.lockKey(req.Key), b.ownerKey(req.Key), b.stampKey(req.Key)
	// First attempt: assume the key has a stamp below the engine's proposal
	// (the common case: the engine's clock has moved on since the last
	// holder). The else branch tells us otherwise.
	stored := req.Stamp
	stampCmp := clientv3.Compare(clientv3.Value(stampKey), "<", encodeStamp(stored))
	for attempt := 1; ; attempt++ {
		resp, err := b.cli.Txn(cctx).If(
			clientv3.Compare(clientv3.CreateRevision(lockKey), "=", 0),
			stampCmp,
		).Then(
			clientv3.OpPut(lockKey, encodeRecord(req.Holder, stored, expires, granted), clientv3.WithLease(leaseID)),
			clientv3.OpPut(ownerKey, req.OwnerToken, clientv3.WithLease(leaseID)),
			clientv3.OpPut(stampKey, encodeStamp(stored)),
		).Else(
			clientv3.OpGet(lockKey),
			clientv3.OpGet(stampKey),
		).Commit()
		if err != nil {
			return backend.AcquireResult{}, wrap(ctx, "acquire", err)
		}
		if resp.Succeeded {
			kept = true
			return backend.AcquireResult{Acquired: true, Record: backend.Record{
				Key:          req.Key,
				FencingToken: uint64(resp.Header.Revision), // the lock key's CreateRevision
				Holder:       req.Holder,
				ExpiresAt:    expires,
				Remaining:    max(0, time.Until(expires)),
				Stamp:        stored,
			}}, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			// Held by someone else. Our lease was never attached: pool it.
			kept = true
			b.pool.put(leaseID, int64(granted/time.Second), start)
			rec, err := decodeRecord(req.Key, kvs[0])
			return backend.AcquireResult{Record: rec}, err
		}
		// The key is free; our stamp condition failed. Propose the successor
		// of what is stored (or, for a key never locked, the proposal as is).
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 0 {
			stored = req.Stamp
			stampCmp = clientv3.Compare(clientv3.CreateRevision(stampKey), "=", 0)
		} else {
			last, err := decodeStamp(kvs[0].Value)
			if err != nil {
				return backend.AcquireResult{}, err
			}
			stored = backend.NextStamp(last, req.Stamp)
			stampCmp = clientv3.Compare(clientv3.Value(stampKey), "<", encodeStamp(stored))
		}
		if attempt == maxTxnAttempts {
			return backend.AcquireResult{}, fmt.Errorf("etcd acquire %q: stamp kept changing over %d attempts: %w", req.Key, attempt, backend.ErrUnavailable)
		}
	}
}

// Release deletes the lock in one transaction if the owner token holds it,
// raising the key's stamp to req.Stamp when later, then revokes the lease in
// the background.
func (b *Backend) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	lockKey, ownerKey, stampKey := b.lockKey(req.Key), b.ownerKey(req.Key), b.stampKey(req.Key)
	stamp := encodeStamp(req.Stamp)
	resp, err := b.cli.Txn(cctx).If(
		clientv3.Compare(clientv3.Value(ownerKey), "=", req.OwnerToken),
	).Then(
		clientv3.OpDelete(lockKey, clientv3.WithPrevKV()),
		clientv3.OpDelete(ownerKey),
		// The stamp key is always written: Watch tells a release (record
		// deleted with a stamp write) from an expiry (record deleted alone).
		clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(stampKey), "<", stamp)},
			[]clientv3.Op{clientv3.OpPut(stampKey, stamp)},
			[]clientv3.Op{clientv3.OpPut(stampKey, "", clientv3.WithIgnoreValue())},
		),
	).Commit()
	if err != nil {
		return false, wrap(ctx, "release", err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) > 0 {
		b.detached(prev[0])
	}
	return true, nil
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
		cur, err := b.cli.Txn(cctx).Then(clientv3.OpGet(lockKey), clientv3.OpGet(ownerKey)).Commit()
		if err != nil {
			return backend.ExtendResult{}, wrap(ctx, "extend: read", err)
		}
		lockKVs := cur.Responses[0].GetResponseRange().Kvs
		ownerKVs := cur.Responses[1].GetResponseRange().Kvs
		if len(lockKVs) == 0 || len(ownerKVs) == 0 || string(ownerKVs[0].Value) != req.OwnerToken {
			return backend.ExtendResult{}, nil
		}
		rec, err := decodeRecord(req.Key, lockKVs[0])
		if err != nil {
			return backend.ExtendResult{}, err
		}

		leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
		if err != nil {
			return backend.ExtendResult{}, wrap(ctx, "extend: lease", err)
		}
		expires := start.Add(granted)
		resp, err := b.cli.Txn(cctx).If(
			clientv3.Compare(clientv3.Value(ownerKey), "=", req.OwnerToken),
			clientv3.Compare(clientv3.ModRevision(lockKey), "=", lockKVs[0].ModRevision),
		).Then(
			clientv3.OpPut(lockKey, encodeRecord(rec.Holder, rec.Stamp, expires, granted), clientv3.WithLease(leaseID)),
			clientv3.OpPut(ownerKey, req.OwnerToken, clientv3.WithLease(leaseID)),
		).Commit()
		if err != nil {
			// Unknown outcome: the record may be on the new lease now, so
			// the new lease is left to expire rather than revoked (revoking
			// it could drop a lock that is still validly held).
			return backend.ExtendResult{}, wrap(ctx, "extend", err)
		}
		if resp.Succeeded {
			b.detached(lockKVs[0])
			rec.ExpiresAt = expires
			rec.Remaining = max(0, time.Until(expires))
			return backend.ExtendResult{Extended: true, Record: rec}, nil
		}
		// Released, expired, or extended concurrently by the same owner:
		// read again and decide. The new lease was not attached.
		b.pool.put(leaseID, int64(granted/time.Second), start)
		if attempt == maxTxnAttempts {
			return backend.ExtendResult{}, fmt.Errorf("etcd extend %q: record kept changing over %d attempts: %w", req.Key, attempt, backend.ErrUnavailable)
		}
	}
}

// Get returns the lock on key, if held.
func (b *Backend) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	resp, err := b.cli.Get(cctx, b.lockKey(key))
	if err != nil {
		return backend.Record{}, false, wrap(ctx, "get", err)
	}
	if len(resp.Kvs) == 0 {
		return backend.Record{}, false, nil
	}
	rec, err := decodeRecord(key, resp.Kvs[0])
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
	// The range also holds stamp keys (of held and of free keys): read in
	// batches until a page and one more record are found, or the range ends.
	// Every read is at the first read's revision, so a page is one snapshot.
	var rev int64
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
			k := string(kv.Key)
			if strings.HasSuffix(k, stampSuffix) {
				continue
			}
			if len(page.Records) == req.PageSize {
				page.NextPageToken = page.Records[len(page.Records)-1].Key
				return page, nil
			}
			rec, err := decodeRecord(strings.TrimPrefix(k, b.locks), kv)
			if err != nil {
				return backend.ListPage{}, err
			}
			page.Records = append(page.Records, rec)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return page, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// detached hands the lease of a lock record that a committed transaction
// just detached from it (deleted or moved the record and the owner key) to
// the pool.
func (b *Backend) detached(kv *mvccpb.KeyValue) {
	id, secs, renewed, ok := detachedLease(kv)
	if !ok {
		if kv != nil {
			b.revokeLater(clientv3.LeaseID(kv.Lease))
		}
		return
	}
	b.pool.put(clientv3.LeaseID(id), secs, renewed)
}
