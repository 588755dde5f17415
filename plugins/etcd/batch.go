package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// Batches (backend.BatchBackend). The plain items of a batch go to etcd in
// one transaction whose Then branch holds one nested transaction per item:
// the item's single call's own transaction, with its own compares, so etcd
// decides each item on its own, atomically, and all of them in one raft
// entry and one fsync. Nested transactions are etcd's since 3.3; etcd
// refuses a transaction with more operations than --max-txn-ops (128 by
// default), counting the nested ones, so a batch is sent in chunks of up
// to batchTxnItems items, concurrently (see there). Keys are distinct in
// a batch, so no two items write one etcd key (etcd refuses duplicate
// keys in one transaction); a key repeated in a batch is that item's
// ErrInvalidArgument.
//
// The items of one chunk (one TTL) share one lease: a pooled lease renewed
// beside the transaction, as a single Acquire's is, or a fresh grant. Their
// records say so (recordValue.SharedLease), so no Release or Extend of one
// of them alone pools or revokes it; this process counts them, and the
// detach of the last one pools it (sharedleases.go). A chunk of n acquires
// thus costs one transaction and one lease renewal instead of n of each,
// and, once its locks are released here, no grant and no expiry either. A
// chunk alone in its TTL with one item goes the single path.
//
// Items that need more than one round trip of their own go their single
// path beside the chunks: waiters (their queue entry), lock-delays (their
// delay lease), grants (semaphores and rwlocks: their optimistic read),
// ReplayOnly and Abandon (a read first). An item whose nested transaction
// found something to look into (a replay of its request id, a stamp to
// propose again, a record changed since read) continues on its single path
// from there.
//
// An etcd configured with a lower --max-txn-ops refuses a chunk before
// applying anything: its items then go their single paths (counted in
// Backend.batchRefused, which the tests read).

var _ backend.BatchBackend = (*Backend)(nil)

const (
	// batchTxnItems bounds the nested transactions in one etcd
	// transaction. etcd counts a transaction's operations as the longest
	// of its compares, Then and Else, and checks each nested transaction
	// against what its parents left of --max-txn-ops (128 by default):
	// the items plus the deepest item's levels must stay within it. An
	// acquire item is three levels of at most 5 or 6 (its compares, then
	// its two stamp transactions), a release three of at most 5, 3 and 1
	// (grants.go's release), an extend one of 3: 96 items leave room.
	batchTxnItems = 96
	// batchSingles bounds the items of one batch on their single paths at
	// once: as many as the engine runs for a backend that does not batch.
	batchSingles = 16
)

// duplicates answers ErrInvalidArgument for every item whose key repeats
// an earlier item's, and reports which those are.
func duplicates[T any](n int, key func(int) string, out []backend.Outcome[T]) []bool {
	seen := make(map[string]bool, n)
	dup := make([]bool, n)
	for i := range n {
		k := key(i)
		if seen[k] {
			dup[i] = true
			out[i].Err = fmt.Errorf("etcd: key %q repeats an earlier item of the batch: %w", k, backend.ErrInvalidArgument)
		}
		seen[k] = true
	}
	return dup
}

// chunks splits the items idx into runs of the same TTL (in whole seconds)
// of at most batchTxnItems each.
func chunks(idx []int, secs func(int) int64) [][]int {
	byTTL := map[int64][]int{}
	var order []int64
	for _, i := range idx {
		s := secs(i)
		if _, ok := byTTL[s]; !ok {
			order = append(order, s)
		}
		byTTL[s] = append(byTTL[s], i)
	}
	var out [][]int
	for _, s := range order {
		for items := byTTL[s]; len(items) > 0; {
			n := min(len(items), batchTxnItems)
			out = append(out, items[:n])
			items = items[n:]
		}
	}
	return out
}

// singlesBeside runs one(i) for each of idx, at most batchSingles at a
// time, on wg.
func singlesBeside(wg *sync.WaitGroup, idx []int, one func(i int)) {
	sem := make(chan struct{}, batchSingles)
	for _, i := range idx {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			one(i)
		})
	}
}

// refusedAsTooBig reports an etcd that refused a transaction for its size
// before applying any of it.
func refusedAsTooBig(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrGRPCTooManyOps) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge)
}

// AcquireBatch implements backend.BatchBackend.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.Outcome[backend.AcquireResult], error) {
	out := make([]backend.Outcome[backend.AcquireResult], len(reqs))
	dup := duplicates(len(reqs), func(i int) string { return reqs[i].Key }, out)
	var plain, alone []int
	for i, r := range reqs {
		switch {
		case dup[i]:
		// An invalid item goes alone too: its single call says what is wrong.
		case r.Key == "" || r.OwnerToken == "" || b.checkTTL(r.TTL) != nil || r.LockDelay != 0 ||
			r.Kind != backend.KindMutex || r.ReplayOnly || r.WaiterID != "":
			alone = append(alone, i)
		default:
			plain = append(plain, i)
		}
	}
	one := func(i int) { out[i].Value, out[i].Err = b.Acquire(ctx, reqs[i]) }
	var wg sync.WaitGroup
	singlesBeside(&wg, alone, one)
	for _, c := range chunks(plain, func(i int) int64 { return ttlSeconds(reqs[i].TTL) }) {
		if len(c) == 1 {
			// Alone in its TTL: the single path, whose lease goes back
			// to the pool on release.
			singlesBeside(&wg, c, one)
			continue
		}
		wg.Go(func() { b.acquireChunk(ctx, reqs, c, out, one) })
	}
	wg.Wait()
	return out, nil
}

// acquireChunk acquires the items idx of reqs (one TTL) on one lease in one
// transaction.
func (b *Backend) acquireChunk(ctx context.Context, reqs []backend.AcquireRequest, idx []int,
	out []backend.Outcome[backend.AcquireResult], one func(int)) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	secs := ttlSeconds(reqs[idx[0]].TTL)
	granted := time.Duration(secs) * time.Second
	id, r, sent, pooled := b.renewAsync(cctx, secs)
	if !pooled {
		var err error
		if id, granted, sent, err = b.lease(cctx, secs); err != nil {
			for _, i := range idx {
				out[i].Err = wrap(ctx, "acquire: lease", err)
			}
			return
		}
	}
	txns := make([]*acquireTxn, len(idx))
	ops := make([]clientv3.Op, len(idx))
	for j, i := range idx {
		txns[j] = b.newAcquireTxn(reqs[i], id, sent.Add(granted), granted, delaySpec{}, true)
		cmps, then, els := txns[j].ops()
		ops[j] = clientv3.OpTxn(cmps, then, els)
	}
	resp, err := b.cli.Txn(cctx).Then(ops...).Commit()
	var renewErr error
	if pooled {
		<-r.done
		if renewErr = r.err; renewErr == nil {
			granted = time.Duration(r.ttl) * time.Second
		}
	}
	if err != nil {
		if refusedAsTooBig(err) { // nothing applied: the lease is unused
			b.batchRefused.Add(1)
			if pooled && renewErr == nil {
				b.pool.put(id, secs, sent)
			} else {
				b.revokeLater(id)
			}
			var wg sync.WaitGroup
			singlesBeside(&wg, idx, one)
			wg.Wait()
			return
		}
		// Unknown outcome: locks created on the lease would be held by
		// owner tokens nobody received; revoke it.
		b.revokeLater(id)
		for _, i := range idx {
			out[i].Err = wrap(ctx, "acquire", err)
		}
		return
	}
	attached := 0
	for j, i := range idx {
		nested := resp.Responses[j].GetResponseTxn()
		if nested == nil {
			out[i].Err = fmt.Errorf("etcd acquire %q: no nested answer in the batch's transaction: %w", reqs[i].Key, backend.ErrUnavailable)
			continue
		}
		res, ok, again, err := b.acquireDecided(cctx, ctx, txns[j], nested.Succeeded, resp.Header.Revision, nested.Responses)
		if again && renewErr == nil {
			res, ok, err = b.attachFrom(cctx, ctx, txns[j], 2)
		} else if again {
			res, ok, err = backend.AcquireResult{}, false, wrap(ctx, "acquire: lease renewal", renewErr)
		}
		if ok {
			attached++
			if renewErr != nil {
				// Never hand out a lock whose lease's TTL is not vouched
				// for: take it back (nobody has its owner token yet).
				b.undo(reqs[i])
				res, err = backend.AcquireResult{}, wrap(ctx, "acquire: lease renewal", renewErr)
			} else {
				res.Record.ExpiresAt = sent.Add(granted)
				res.Record.Remaining = max(0, time.Until(res.Record.ExpiresAt))
			}
		}
		out[i] = backend.Outcome[backend.AcquireResult]{Value: res, Err: err}
	}
	switch {
	case renewErr != nil:
		b.revokeLater(id)
	case attached == 0:
		b.pool.put(id, secs, sent) // no key is on it
	case outcomesKnown(idx, out):
		// Exactly attached records are on it: the last one's release
		// pools it.
		b.shared.add(id, attached, secs, sent)
	}
}

// outcomesKnown reports whether every item idx of a chunk was decided
// without an error: then the records its transactions attached are exactly
// those answered acquired. An error may hide a record on the chunk's lease
// that nobody will release, so that lease is never pooled (it expires).
func outcomesKnown[T any](idx []int, out []backend.Outcome[T]) bool {
	for _, i := range idx {
		if out[i].Err != nil {
			return false
		}
	}
	return true
}

// ReleaseBatch implements backend.BatchBackend.
func (b *Backend) ReleaseBatch(ctx context.Context, reqs []backend.ReleaseRequest) ([]backend.Outcome[bool], error) {
	out := make([]backend.Outcome[bool], len(reqs))
	dup := duplicates(len(reqs), func(i int) string { return reqs[i].Key }, out)
	var plain, alone []int
	for i, r := range reqs {
		switch {
		case dup[i]:
		case r.Key == "" || r.OwnerToken == "" || r.Abandon:
			alone = append(alone, i)
		default:
			plain = append(plain, i)
		}
	}
	one := func(i int) { out[i].Value, out[i].Err = b.Release(ctx, reqs[i]) }
	var wg sync.WaitGroup
	singlesBeside(&wg, alone, one)
	for _, c := range chunks(plain, func(int) int64 { return 0 }) {
		wg.Go(func() { b.releaseChunk(ctx, reqs, c, out, one) })
	}
	wg.Wait()
	return out, nil
}

// releaseChunk releases the items idx of reqs in one transaction.
func (b *Backend) releaseChunk(ctx context.Context, reqs []backend.ReleaseRequest, idx []int, out []backend.Outcome[bool], one func(int)) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	ops := make([]clientv3.Op, len(idx))
	nKept := make([]int, len(idx))
	knownStamp := make([]*heldStamp, len(idx))
	for j, i := range idx {
		_, kept, _, _ := b.releaseGuards(cctx, ctx, []string{reqs[i].Key}, reqs[i].Request, false) // no read without Abandon
		nKept[j] = len(kept)
		cmps, then, els, known := b.releaseOps(reqs[i], nil, kept)
		knownStamp[j] = known
		ops[j] = clientv3.OpTxn(cmps, then, els)
	}
	resp, err := b.cli.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		if refusedAsTooBig(err) {
			b.batchRefused.Add(1)
			var wg sync.WaitGroup
			singlesBeside(&wg, idx, one)
			wg.Wait()
			return
		}
		for _, i := range idx {
			out[i].Err = wrap(ctx, "release", err)
		}
		return
	}
	for j, i := range idx {
		nested := resp.Responses[j].GetResponseTxn()
		if nested == nil {
			out[i].Err = fmt.Errorf("etcd release %q: no nested answer in the batch's transaction: %w", reqs[i].Key, backend.ErrUnavailable)
			continue
		}
		var again bool
		out[i].Value, again, out[i].Err = b.releaseDecided(cctx, ctx, reqs[i], nKept[j], knownStamp[j], nested.Succeeded, nested.Responses)
		if again {
			one(i) // its single path, in the nested form
		}
	}
}

// ExtendBatch implements backend.BatchBackend: one transaction reads every
// plain item's lock, owner and grant keys; one per chunk then moves the
// records still held by their tokens onto the chunk's new lease, each
// comparing its owner and its record's ModRevision as read.
func (b *Backend) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	out := make([]backend.Outcome[backend.ExtendResult], len(reqs))
	dup := duplicates(len(reqs), func(i int) string { return reqs[i].Key }, out)
	var plain, alone []int
	for i, r := range reqs {
		switch {
		case dup[i]:
		case r.Key == "" || r.OwnerToken == "" || b.checkTTL(r.TTL) != nil:
			alone = append(alone, i)
		default:
			plain = append(plain, i)
		}
	}
	one := func(i int) { out[i].Value, out[i].Err = b.Extend(ctx, reqs[i]) }
	var wg sync.WaitGroup
	singlesBeside(&wg, alone, one)
	for _, c := range chunks(plain, func(i int) int64 { return ttlSeconds(reqs[i].TTL) }) {
		if len(c) == 1 {
			singlesBeside(&wg, c, one) // its old lease goes back to the pool
			continue
		}
		// extendChunk adds the items it sends alone to wg, while counted
		// in it itself.
		wg.Go(func() { b.extendChunk(ctx, reqs, c, out, one, &wg) })
	}
	wg.Wait()
	return out, nil
}

// extendChunk extends the items idx of reqs (one TTL): it reads them at
// one revision and moves those still held onto one new lease in one
// transaction. Items that are grants, that carry a lock-delay, or whose
// record changed since the read go their single path, on wg.
func (b *Backend) extendChunk(ctx context.Context, reqs []backend.ExtendRequest, idx []int,
	out []backend.Outcome[backend.ExtendResult], one func(int), wg *sync.WaitGroup) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	reads := make([]clientv3.Op, len(idx))
	for j, i := range idx {
		k := reqs[i].Key
		reads[j] = clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet(b.lockKey(k)), clientv3.OpGet(b.ownerKey(k)),
			clientv3.OpGet(b.grantKey(k, reqs[i].OwnerToken))}, nil)
	}
	cur, err := b.cli.Txn(cctx).Then(reads...).Commit()
	if err != nil {
		if refusedAsTooBig(err) {
			b.batchRefused.Add(1)
			singlesBeside(wg, idx, one)
			return
		}
		for _, i := range idx {
			out[i].Err = wrap(ctx, "extend: read", err)
		}
		return
	}
	type move struct {
		i   int
		old *mvccpb.KeyValue
		val recordValue
		rec backend.Record
	}
	var moves []move
	var alone []int
	for j, i := range idx {
		nested := cur.Responses[j].GetResponseTxn()
		if nested == nil || len(nested.Responses) != 3 {
			out[i].Err = fmt.Errorf("etcd extend %q: no nested answer in the batch's read: %w", reqs[i].Key, backend.ErrUnavailable)
			continue
		}
		lockKVs := nested.Responses[0].GetResponseRange().Kvs
		ownerKVs := nested.Responses[1].GetResponseRange().Kvs
		if g := nested.Responses[2].GetResponseRange().Kvs; len(g) > 0 {
			alone = append(alone, i) // a grant (grants.go)
			continue
		}
		if len(lockKVs) == 0 || len(ownerKVs) == 0 || string(ownerKVs[0].Value) != reqs[i].OwnerToken {
			continue // not held by this token: not extended
		}
		rec, err := decodeRecord(reqs[i].Key, lockKVs[0])
		if err != nil {
			out[i].Err = err
			continue
		}
		if rec.LockDelay > 0 {
			alone = append(alone, i) // its delay key moves to a lease of its own
			continue
		}
		val, err := decodeValue(lockKVs[0])
		if err == nil {
			val, err = extended(val, reqs[i].Request)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		val.SharedLease = true
		moves = append(moves, move{i: i, old: lockKVs[0], val: val, rec: rec})
	}
	singlesBeside(wg, alone, one)
	if len(moves) == 0 {
		return
	}
	secs := ttlSeconds(reqs[idx[0]].TTL)
	id, granted, start, err := b.lease(cctx, secs)
	if err != nil {
		for _, m := range moves {
			out[m.i].Err = wrap(ctx, "extend: lease", err)
		}
		return
	}
	expires := start.Add(granted)
	ops := make([]clientv3.Op, len(moves))
	for j, m := range moves {
		k := reqs[m.i].Key
		ops[j] = clientv3.OpTxn([]clientv3.Cmp{
			clientv3.Compare(clientv3.Value(b.ownerKey(k)), "=", reqs[m.i].OwnerToken),
			clientv3.Compare(clientv3.ModRevision(b.lockKey(k)), "=", m.old.ModRevision),
		}, []clientv3.Op{
			clientv3.OpPut(b.lockKey(k), m.val.encode(expires, granted), clientv3.WithLease(id)),
			clientv3.OpPut(b.ownerKey(k), reqs[m.i].OwnerToken, clientv3.WithLease(id)),
		}, nil)
	}
	resp, err := b.cli.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		if refusedAsTooBig(err) {
			b.batchRefused.Add(1)
			b.pool.put(id, int64(granted/time.Second), start)
			again := make([]int, len(moves))
			for j, m := range moves {
				again[j] = m.i
			}
			singlesBeside(wg, again, one)
			return
		}
		// Unknown outcome: the records may be on the new lease now, so it
		// is left to expire rather than revoked (as a single Extend does).
		for _, m := range moves {
			out[m.i].Err = wrap(ctx, "extend", err)
		}
		return
	}
	var again []int // changed since read: decided again alone
	defer func() { singlesBeside(wg, again, one) }()
	moved := 0
	for j, m := range moves {
		if nested := resp.Responses[j].GetResponseTxn(); nested == nil || !nested.Succeeded {
			again = append(again, m.i)
			continue
		}
		moved++
		b.held.forget(reqs[m.i].Key, reqs[m.i].OwnerToken) // as a single Extend does
		b.detached(m.old)
		rec := m.rec
		rec.ExpiresAt = expires
		rec.Remaining = max(0, time.Until(expires))
		out[m.i].Value = backend.ExtendResult{Extended: true, Record: rec}
	}
	if moved == 0 {
		b.pool.put(id, int64(granted/time.Second), start)
		return
	}
	// The transaction committed, so every nested answer is known: exactly
	// moved records are on the new lease.
	b.shared.add(id, moved, int64(granted/time.Second), start)
}
