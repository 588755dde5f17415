package etcd

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// Kinds are the kinds of key the backend keeps beside a mutex.
var Kinds = []backend.Kind{backend.KindSemaphore, backend.KindRWLock, backend.KindElection}

// Semaphores and rwlocks. A key K of another kind than a mutex is, under
// P "locks/":
//
//	K "\x00"            the key's last stamp, as for a mutex; every grant
//	                    and every release of a grant writes it
//	K "\x00m"           the key's kind and limit (JSON), put by its first
//	                    grant and never changed; its presence is what makes
//	                    the key a semaphore or rwlock (a stamp key without it
//	                    is a mutex key's)
//	K "\x00g/" H        one grant, H = the hex SHA-256 of its owner token
//	                    (Release and Extend address it directly), on a lease
//	                    of its own: its CreateRevision is its fencing token,
//	                    and etcd deletes it when its lease ends
//
// A grant is one transaction, optimistic: it reads the stamp key, the meta
// key and every grant at one revision R, decides (the kind and limit; the
// sum of the grants' permits plus the request's within the limit; the fair
// queue as for a mutex), and commits only if no grant of the key was
// created after R (a compare over the grants' range: every CreateRevision
// <= R) and the stored stamp is still below the one it stores (for the
// key's first grant: no stamp key and no meta key), putting the grant and
// the stamp; otherwise it reads again. A release or an expiry since R only
// freed permits, so a decision on a read that still counted them is
// conservative, and they do not make a grant retry. The mutex Acquire, in
// turn, requires that the key has no meta key. Fencing tokens
// are revisions, so they increase over every grant of every kind; stamps
// are NextStamp of the stamp key, so they chain over every grant.
//
// Release of one key deletes the mutex lock if the token holds it, and
// otherwise, in the same transaction's else branch, the token's grant with
// the stamp key's write (so Watch tells its release from its expiry as for
// a mutex). Extend moves the grant onto a new lease, as for a mutex.
func (b *Backend) metaKey(key string) string { return b.locks + key + stampSuffix + "m" }

func (b *Backend) grantPrefix(key string) string { return b.locks + key + stampSuffix + "g/" }

func (b *Backend) grantKey(key, token string) string {
	return b.grantPrefix(key) + tokenHash(token)
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// countKey is a grant's entry under P "grants/", on the grant's lease, that
// Count counts (count.go): the grant keys themselves share P "locks/" with
// the stamp and meta keys, so no range holds grants alone.
func (b *Backend) countKey(key, token string) string {
	return b.grants + key + stampSuffix + tokenHash(token)
}

// splitName splits a key under P "locks/" into the holdfast key and what
// follows its first NUL: "" with none (a mutex record), then "\x00" (the
// stamp key), "\x00m" (meta), "\x00g/..." (a grant).
func splitName(rest string) (key, suffix string) {
	if i := strings.IndexByte(rest, 0); i >= 0 {
		return rest[:i], rest[i:]
	}
	return rest, ""
}

func isGrantSuffix(suffix string) bool { return strings.HasPrefix(suffix, stampSuffix+"g/") }

// metaValue is a meta key's value.
type metaValue struct {
	Kind  string `json:"kind"`
	Limit int    `json:"limit"`
}

func kindByName(name string) (backend.Kind, bool) {
	for _, k := range Kinds {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

// grantsRecord is the record of key from its grants' kvs: every grant in
// fencing-token order, and in the record's own fields the grant the call
// is about (about, a CreateRevision) or else the one that ends first.
func grantsRecord(key string, kind backend.Kind, limit int, kvs []*mvccpb.KeyValue, about int64) (backend.Record, error) {
	rec := backend.Record{Key: key, Kind: kind, Limit: limit}
	var own *backend.Record
	for _, kv := range kvs {
		g, err := decodeRecord(key, kv)
		if err != nil {
			return backend.Record{}, err
		}
		rec.Holders = append(rec.Holders, backend.Grant{FencingToken: g.FencingToken, Holder: g.Holder, ExpiresAt: g.ExpiresAt,
			Remaining: g.Remaining, Stamp: g.Stamp, Permits: g.Permits, Value: g.Value})
		rec.InUse += g.Permits
		if kv.CreateRevision == about || about == 0 && (own == nil || g.Remaining < own.Remaining) {
			own = &g
		}
	}
	slices.SortFunc(rec.Holders, func(a, b backend.Grant) int { return cmp.Compare(a.FencingToken, b.FencingToken) })
	if own != nil {
		rec.FencingToken, rec.Holder, rec.ExpiresAt, rec.Remaining = own.FencingToken, own.Holder, own.ExpiresAt, own.Remaining
		rec.Stamp, rec.Permits, rec.Value = own.Stamp, own.Permits, own.Value
	}
	return rec, nil
}

// readMeta reads a meta key's kind and limit.
func readMeta(kv *mvccpb.KeyValue) (backend.Kind, int, error) {
	var v metaValue
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return 0, 0, fmt.Errorf("etcd: meta key %q is not holdfast's: %w: %w", kv.Key, backend.ErrUnavailable, err)
	}
	kind, ok := kindByName(v.Kind)
	if !ok {
		return 0, 0, fmt.Errorf("etcd: meta key %q names an unknown kind %q: %w", kv.Key, v.Kind, backend.ErrUnavailable)
	}
	return kind, v.Limit, nil
}

// acquireGrant takes a lease of the TTL and runs the grant transaction
// (see above) until it commits or the answer is known.
func (b *Backend) acquireGrant(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := req.CheckGrant(Kinds); err != nil {
		return backend.AcquireResult{}, err
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	if req.WaiterID != "" {
		queued, err := b.knowRev(cctx, ctx, req)
		if err != nil || !queued {
			return backend.AcquireResult{}, err
		}
	}
	leave, err := b.gates.enter(cctx, req.Key)
	if err != nil {
		return backend.AcquireResult{}, wrap(ctx, "acquire", err)
	}
	defer leave()
	// The lease's TTL runs from here: after the wait at the gate, so that
	// the grant is held for its whole TTL from its transaction.
	leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
	if err != nil {
		return backend.AcquireResult{}, wrap(ctx, "acquire: lease", err)
	}
	res, attached, err := b.grantOn(cctx, ctx, req, leaseID, start.Add(granted), granted)
	switch {
	case err != nil:
		b.revokeLater(leaseID) // unknown outcome: a grant on it would be held by a token nobody has
	case !attached:
		b.pool.put(leaseID, int64(granted/time.Second), start)
	}
	return res, err
}

func (b *Backend) grantOn(cctx, parent context.Context, req backend.AcquireRequest, leaseID clientv3.LeaseID, expires time.Time,
	granted time.Duration) (backend.AcquireResult, bool, error) {
	lockKey, stampKey, metaKey, mine := b.lockKey(req.Key), b.stampKey(req.Key), b.metaKey(req.Key), b.grantKey(req.Key, req.OwnerToken)
	queueCmps, leave, myRev := b.queueGuards(req.Key, req.WaiterID)
	// What a grant decides on, read at one revision: by a read of its own
	// first, then by the else branch of a transaction that lost a race.
	reads := []clientv3.Op{
		clientv3.OpGet(lockKey),
		clientv3.OpGet(stampKey),
		clientv3.OpGet(metaKey),
		clientv3.OpGet(b.grantPrefix(req.Key), clientv3.WithPrefix()),
		clientv3.OpGet(b.queuePrefix(req.Key), clientv3.WithFirstCreate()...),
	}
	cur, err := b.cli.Txn(cctx).Then(reads...).Commit()
	if err != nil {
		return backend.AcquireResult{}, false, wrap(parent, "acquire: read", err)
	}
attempts:
	for attempt := 1; ; attempt++ {
		if attempt > maxGrantAttempts {
			return backend.AcquireResult{}, false, fmt.Errorf("etcd acquire %q: the key's grants kept changing over %d attempts: %w",
				req.Key, maxGrantAttempts, backend.ErrUnavailable)
		}
		lock := cur.Responses[0].GetResponseRange().Kvs
		stamp := cur.Responses[1].GetResponseRange().Kvs
		meta := cur.Responses[2].GetResponseRange().Kvs
		grants := cur.Responses[3].GetResponseRange().Kvs
		first := cur.Responses[4].GetResponseRange().Kvs
		if len(meta) == 0 && (len(lock) > 0 || len(stamp) > 0) {
			// A mutex key (held, or free with its stamp kept).
			rec := backend.Record{Key: req.Key}
			if len(lock) > 0 {
				if rec, err = decodeRecord(req.Key, lock[0]); err != nil {
					return backend.AcquireResult{}, false, err
				}
			}
			rec.Kind, rec.Limit = backend.KindMutex, 1
			return backend.AcquireResult{Record: rec}, false, nil
		}
		kind, limit := req.Kind, req.Limit
		if len(meta) > 0 {
			if kind, limit, err = readMeta(meta[0]); err != nil {
				return backend.AcquireResult{}, false, err
			}
		}
		state := func(about int64) (backend.Record, error) {
			return grantsRecord(req.Key, kind, limit, grants, about)
		}
		if kind != req.Kind || limit != req.Limit {
			rec, err := state(0)
			return backend.AcquireResult{Record: rec}, false, err
		}
		used := 0
		for _, kv := range grants {
			v, err := decodeValue(kv)
			if err != nil {
				return backend.AcquireResult{}, false, err
			}
			if rep, err := backend.Repeat(v.kept(), req.Request); err != nil || rep {
				if err != nil {
					return backend.AcquireResult{}, false, err
				}
				recs, replay, ok, err := b.replay(cctx, parent, []string{req.Key}, []*mvccpb.KeyValue{kv}, req.Request)
				if err != nil {
					return backend.AcquireResult{}, false, err
				}
				if !ok { // the grant changed meanwhile: read again
					if cur, err = b.cli.Txn(cctx).Then(reads...).Commit(); err != nil {
						return backend.AcquireResult{}, false, wrap(parent, "acquire: read", err)
					}
					continue attempts
				}
				rec, err := state(kv.CreateRevision)
				rec.ExpiresAt, rec.Remaining = recs[0].ExpiresAt, recs[0].Remaining
				return backend.AcquireResult{Acquired: true, Record: rec, Replayed: true, Replay: replay}, false, err
			}
			if string(kv.Key) == mine {
				rec, err := state(kv.CreateRevision) // a retry by the token that holds it
				return backend.AcquireResult{Acquired: true, Record: rec}, false, err
			}
			used += v.Permits
		}
		notMine := req.WaiterID == "" && len(first) > 0 ||
			req.WaiterID != "" && (len(first) == 0 || string(first[0].Key) != b.queueKey(req.Key, req.WaiterID) || first[0].CreateRevision != myRev)
		if req.ReplayOnly || notMine || used+req.Permits > limit {
			rec, err := state(0)
			return backend.AcquireResult{Record: rec}, false, err
		}
		stored := req.Stamp
		cmps := append([]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(lockKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(mine), "=", 0),
		}, queueCmps...)
		ops := leave
		if len(meta) == 0 {
			mv, _ := json.Marshal(metaValue{Kind: req.Kind.String(), Limit: req.Limit})
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(metaKey), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(stampKey), "=", 0))
			ops = append(slices.Clip(ops), clientv3.OpPut(metaKey, string(mv)))
		} else {
			if len(stamp) > 0 {
				last, err := decodeStamp(stamp[0].Value)
				if err != nil {
					return backend.AcquireResult{}, false, err
				}
				stored = backend.NextStamp(last, req.Stamp)
			}
			// The stamp chain: nobody stored a later stamp since the read.
			cmps = append(cmps, clientv3.Compare(clientv3.Value(stampKey), "<", encodeStamp(stored)))
		}
		// Capacity: no grant was created since the read (a release or an
		// expiry since only frees permits, and an Extend keeps the key's
		// CreateRevision).
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(b.grantPrefix(req.Key)), "<", cur.Header.Revision+1).WithPrefix())
		v := newRecord(req.Holder, stored, false, req.Request, req.Replay, 0)
		v.Permits, v.Kind, v.Limit, v.Value = req.Permits, req.Kind.String(), req.Limit, req.Value
		resp, err := b.cli.Txn(cctx).If(cmps...).Then(append(slices.Clip(ops),
			clientv3.OpPut(mine, v.encode(expires, granted), clientv3.WithLease(leaseID)),
			clientv3.OpPut(stampKey, encodeStamp(stored)),
			clientv3.OpPut(b.countKey(req.Key, req.OwnerToken), "", clientv3.WithLease(leaseID)),
		)...).Else(reads...).Commit()
		if err != nil {
			return backend.AcquireResult{}, false, wrap(parent, "acquire", err)
		}
		if resp.Succeeded {
			if req.WaiterID != "" {
				b.setRev(b.queueKey(req.Key, req.WaiterID), 0)
			}
			rec, err := state(0)
			if err != nil {
				return backend.AcquireResult{}, false, err
			}
			fence := uint64(resp.Header.Revision) // the grant key's CreateRevision
			rec.Holders = append(rec.Holders, backend.Grant{FencingToken: fence, Holder: req.Holder, ExpiresAt: expires,
				Remaining: max(0, time.Until(expires)), Stamp: stored, Permits: req.Permits, Value: req.Value})
			rec.InUse += req.Permits
			rec.FencingToken, rec.Holder, rec.ExpiresAt, rec.Remaining, rec.Stamp, rec.Permits, rec.Value =
				fence, req.Holder, expires, max(0, time.Until(expires)), stored, req.Permits, req.Value
			return backend.AcquireResult{Acquired: true, Record: rec}, true, nil
		}
		// Another grant won the race: decide again, at once, on what the
		// else branch read at the failed transaction's revision (a pause
		// would only widen the window in which the next grant can win).
		cur = &clientv3.TxnResponse{Header: resp.Header, Responses: resp.Responses}
	}
}

// maxGrantAttempts bounds the optimistic retries of one grant (call_timeout
// bounds them too): every grant that commits meanwhile makes the others
// decide again, so racers for a busy semaphore retry more often than a
// mutex's, whose losers just fail.
const maxGrantAttempts = 256

// releaseGrantOps is the else branch of a Release's transaction: if the
// token holds a grant of key, delete it and write the stamp key (raised to
// stamp when later), with the release's identity when it has one.
func (b *Backend) releaseGrantOps(key, token string, stamp string, kept []clientv3.Op) clientv3.Op {
	gk, stampKey := b.grantKey(key, token), b.stampKey(key)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(gk), ">", 0)},
		append(slices.Clip(kept),
			clientv3.OpDelete(gk, clientv3.WithPrevKV()),
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(stampKey), "<", stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, "", clientv3.WithIgnoreValue())},
			),
			clientv3.OpDelete(b.countKey(key, token))),
		nil)
}

// abandonGrant is a Release with Abandon of a grant: the engine gives back
// a grant whose acquirer was never told of it, so it releases the grant only
// if no replay of its Acquire was answered (compared by ModRevision). held
// is false when the token holds no grant of key.
func (b *Backend) abandonGrant(cctx, parent context.Context, req backend.ReleaseRequest) (released, held bool, err error) {
	gk := b.grantKey(req.Key, req.OwnerToken)
	resp, err := b.cli.Get(cctx, gk)
	if err != nil {
		return false, false, wrap(parent, "release", err)
	}
	if len(resp.Kvs) == 0 {
		return false, false, nil
	}
	v, err := decodeValue(resp.Kvs[0])
	if err != nil || v.Claimed {
		return false, true, err
	}
	tx, err := b.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(gk), "=", resp.Kvs[0].ModRevision)).
		Then(b.releaseGrantOps(req.Key, req.OwnerToken, encodeStamp(req.Stamp), nil)).Commit()
	if err != nil {
		return false, true, wrap(parent, "release", err)
	}
	if !tx.Succeeded {
		return false, true, nil
	}
	b.grantReleased(tx.Responses[0].GetResponseTxn(), 0)
	return true, true, nil
}

// grantReleased hands the lease of the grant a committed releaseGrantOps
// deleted (its delete is at index at) to the pool.
func (b *Backend) grantReleased(r *etcdserverpb.TxnResponse, at int) {
	if r == nil || len(r.Responses) <= at {
		return
	}
	if prev := r.Responses[at].GetResponseDeleteRange().PrevKvs; len(prev) > 0 {
		b.detachedLease(prev[0])
	}
}

// extendGrant moves the grant kv onto a new lease of ttl if it is still the
// one read (its ModRevision); the old lease goes to the pool.
func (b *Backend) extendGrant(cctx, parent context.Context, req backend.ExtendRequest, kv *mvccpb.KeyValue) (backend.ExtendResult, bool, error) {
	val, err := decodeValue(kv)
	if err != nil {
		return backend.ExtendResult{}, false, err
	}
	if val, err = extended(val, req.Request); err != nil {
		return backend.ExtendResult{}, false, err
	}
	leaseID, granted, start, err := b.lease(cctx, ttlSeconds(req.TTL))
	if err != nil {
		return backend.ExtendResult{}, false, wrap(parent, "extend: lease", err)
	}
	expires := start.Add(granted)
	resp, err := b.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
		Then(clientv3.OpPut(string(kv.Key), val.encode(expires, granted), clientv3.WithLease(leaseID)),
			clientv3.OpGet(b.grantPrefix(req.Key), clientv3.WithPrefix()),
			// The count key moves too: left on the old lease, which goes to
			// the pool, it would outlive the grant.
			clientv3.OpPut(b.countKey(req.Key, req.OwnerToken), "", clientv3.WithLease(leaseID))).Commit()
	if err != nil {
		return backend.ExtendResult{}, false, wrap(parent, "extend", err) // unknown outcome: the new lease is left to expire
	}
	if !resp.Succeeded {
		b.pool.put(leaseID, int64(granted/time.Second), start)
		return backend.ExtendResult{}, false, nil // changed meanwhile: the caller reads again
	}
	b.detachedLease(kv)
	kind, _ := kindByName(val.Kind)
	rec, err := grantsRecord(req.Key, kind, val.Limit, resp.Responses[1].GetResponseRange().Kvs, kv.CreateRevision)
	return backend.ExtendResult{Extended: true, Record: rec}, true, err
}

// getGrants is Get's answer for a key holding grants (held=false when it
// holds none).
func getGrants(key string, meta, grants []*mvccpb.KeyValue) (backend.Record, bool, error) {
	if len(meta) == 0 || len(grants) == 0 {
		return backend.Record{}, false, nil
	}
	kind, limit, err := readMeta(meta[0])
	if err != nil {
		return backend.Record{}, false, err
	}
	rec, err := grantsRecord(key, kind, limit, grants, 0)
	return rec, err == nil, err
}

// grantEvent is the event of a grant's kv (created: acquired; deleted:
// released or expired).
func grantEvent(typ backend.EventType, key string, kv *mvccpb.KeyValue) (backend.Event, error) {
	rec, err := decodeRecord(key, kv)
	return backend.Event{Type: typ, Record: rec}, err
}

// grantGates lets one grant attempt per key at a time through this process:
// attempts of one plugin on one key would otherwise all decide on one
// revision and all but one lose the race (each a raft write for nothing),
// so a busy semaphore starved its racers. Attempts from other processes
// still race optimistically. A gate is dropped when nobody waits at it.
type grantGates struct {
	mu    sync.Mutex
	gates map[string]*grantGate
}

type grantGate struct {
	ch   chan struct{} // one slot: the attempt that holds the gate
	refs int           // holders and waiters
}

// enter waits for key's gate (or for ctx) and returns the function that
// leaves it.
func (g *grantGates) enter(ctx context.Context, key string) (leave func(), err error) {
	g.mu.Lock()
	if g.gates == nil {
		g.gates = map[string]*grantGate{}
	}
	gt := g.gates[key]
	if gt == nil {
		gt = &grantGate{ch: make(chan struct{}, 1)}
		g.gates[key] = gt
	}
	gt.refs++
	g.mu.Unlock()
	drop := func() {
		g.mu.Lock()
		if gt.refs--; gt.refs == 0 {
			delete(g.gates, key)
		}
		g.mu.Unlock()
	}
	select {
	case gt.ch <- struct{}{}:
		return func() { <-gt.ch; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}
