package etcd

import (
	"context"
	"errors"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The fair queue (backend.FairBackend). Each waiting acquirer, on any
// server, has an entry under queuePrefix(key), ordered by its create
// revision: the head is the oldest. The lock's Acquire transaction requires
// that the caller's entry is the head (and deletes it in the same step), or,
// for a caller with no entry, that the queue is empty; so nobody on any
// server jumps the queue, try-once callers included.
//
// Entries are attached to one session lease per plugin process, kept alive
// in the background: a plugin that dies (with its server) leaves the queue
// within queueTTL, and a waiter that gives up deletes its entry at once.
//
// A waiter that is not the head watches the deletion of the entry just
// before it (not the whole queue: no thundering herd), like
// concurrency.Mutex, but from the current revision: the watch is created
// first and the predecessor read after, so etcd delivers the deletion as it
// happens. concurrency.Mutex watches from the older revision of its read,
// which etcd serves from its unsynced-watcher loop, every 100ms.
//
// A hand-off is two writes in series: the holder's Release deletes the
// lock, and the head, woken by the release event, takes it with its own
// Acquire transaction (BenchmarkHandoff measures both). The Release does not
// grant the head in its own transaction because etcd refuses a transaction
// that deletes and puts one key ("duplicate key given in txn request",
// nested transactions included): the head's record would have to overwrite
// the holder's and keep its CreateRevision, so the fencing token would not
// increase and Watch would see no new holder (a put that creates nothing is
// an Extend's). It would also need the head's grant (owner token, TTL,
// holder, request identity) in etcd before the release, and the engine
// makes a new owner token for every try and shows it to Acquire only.
const queueTTL = 5 // seconds

type queueState struct {
	mu    sync.Mutex
	lease clientv3.LeaseID // the session; 0 when none
	stop  context.CancelFunc
	wg    sync.WaitGroup
	revs  map[string]int64 // entry key -> its create revision, as enqueued here
	// orphans: entries whose Dequeue failed; retried on the revoke tick,
	// since the session outlives them and they would block the queue.
	orphans map[string]struct{}
	// afterPredecessor, set by tests only, runs between WaitTurn's read of
	// the entry before the waiter's and its watch of that entry.
	afterPredecessor func(key, pred string)
}

// queuePrefix holds key's entries; keys contain no NUL, so no key's prefix
// is another's.
func (b *Backend) queuePrefix(key string) string { return b.queue + key + "\x00" }

func (b *Backend) queueKey(key, waiterID string) string { return b.queuePrefix(key) + waiterID }

// session returns the lease the entries are attached to, granting it (and
// keeping it alive) when there is none.
func (b *Backend) session(ctx context.Context) (clientv3.LeaseID, error) {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	if b.q.lease != clientv3.NoLease {
		return b.q.lease, nil
	}
	g, err := b.cli.Grant(ctx, queueTTL)
	if err != nil {
		return 0, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := b.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		cancel()
		return 0, err
	}
	b.q.lease, b.q.stop = g.ID, cancel
	b.q.wg.Add(1)
	go func() {
		defer b.q.wg.Done()
		for range ch { // drained until the lease is lost or the session stopped
		}
		b.dropSession(g.ID)
	}()
	return g.ID, nil
}

// dropSession forgets a lost session lease; the next Enqueue grants a new one.
func (b *Backend) dropSession(id clientv3.LeaseID) {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	if b.q.lease == id {
		b.q.lease = clientv3.NoLease
		b.q.stop()
	}
}

// closeQueue ends the session: the entries leave the queue at once.
func (b *Backend) closeQueue() {
	b.q.mu.Lock()
	id, stop := b.q.lease, b.q.stop
	b.q.lease = clientv3.NoLease
	b.q.mu.Unlock()
	if stop != nil {
		stop()
	}
	b.q.wg.Wait()
	if id != clientv3.NoLease {
		ctx, cancel := context.WithTimeout(context.Background(), b.callTimeout)
		_, _ = b.cli.Revoke(ctx, id)
		cancel()
	}
}

func (b *Backend) setRev(qk string, rev int64) {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	if b.q.revs == nil {
		b.q.revs = map[string]int64{}
	}
	if rev == 0 {
		delete(b.q.revs, qk)
	} else {
		b.q.revs[qk] = rev
	}
}

func (b *Backend) rev(qk string) (int64, bool) {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	r, ok := b.q.revs[qk]
	return r, ok
}

// Enqueue implements backend.FairBackend.
func (b *Backend) Enqueue(ctx context.Context, key, waiterID string) error {
	cctx, cancel := b.call(ctx)
	defer cancel()
	qk := b.queueKey(key, waiterID)
	for attempt := 0; ; attempt++ {
		lease, err := b.session(cctx)
		if err != nil {
			return wrap(ctx, "enqueue: session", err)
		}
		resp, err := b.cli.Put(cctx, qk, "", clientv3.WithLease(lease))
		if err != nil {
			if attempt == 0 && isLeaseNotFound(err) {
				b.dropSession(lease) // it lapsed: take a new one
				continue
			}
			// Unknown outcome: the entry may be in the queue, and the
			// engine gives this waiter up; delete it, or it would block
			// the queue for as long as the session lives.
			b.orphan(qk)
			return wrap(ctx, "enqueue", err)
		}
		// A new key's create revision is the revision of the put.
		b.setRev(qk, resp.Header.Revision)
		b.q.mu.Lock()
		delete(b.q.orphans, qk)
		b.q.mu.Unlock()
		return nil
	}
}

// isLeaseNotFound reports a put on a session lease that has lapsed.
func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || strings.Contains(err.Error(), "lease not found")
}

// Dequeue implements backend.FairBackend.
func (b *Backend) Dequeue(ctx context.Context, key, waiterID string) error {
	cctx, cancel := b.call(ctx)
	defer cancel()
	qk := b.queueKey(key, waiterID)
	b.setRev(qk, 0)
	if _, err := b.cli.Delete(cctx, qk); err != nil {
		b.orphan(qk)
		return wrap(ctx, "dequeue", err)
	}
	return nil
}

// orphan queues the deletion of an entry nobody waits on any more.
func (b *Backend) orphan(qk string) {
	b.q.mu.Lock()
	defer b.q.mu.Unlock()
	if b.q.orphans == nil {
		b.q.orphans = map[string]struct{}{}
	}
	b.q.orphans[qk] = struct{}{}
}

// deleteOrphans retries the deletion of entries whose Dequeue failed.
func (b *Backend) deleteOrphans() {
	b.q.mu.Lock()
	keys := make([]string, 0, len(b.q.orphans))
	for k := range b.q.orphans {
		keys = append(keys, k)
	}
	b.q.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.callTimeout)
	defer cancel()
	for _, k := range keys {
		if _, err := b.cli.Delete(ctx, k); err != nil {
			return // etcd still unreachable: next tick
		}
		b.q.mu.Lock()
		delete(b.q.orphans, k)
		b.q.mu.Unlock()
	}
}

// WaitTurn implements backend.FairBackend.
func (b *Backend) WaitTurn(ctx context.Context, key, waiterID string) (bool, error) {
	qk, pfx := b.queueKey(key, waiterID), b.queuePrefix(key)
	for {
		pred, predRev, err := b.predecessor(ctx, qk, pfx)
		if err != nil || pred == "" {
			return pred == "" && err == nil && b.isQueued(qk), err
		}
		if h := b.q.afterPredecessor; h != nil {
			h(key, pred)
		}
		if err := b.waitDelete(ctx, pred, predRev); err != nil {
			return false, err
		}
	}
}

func (b *Backend) isQueued(qk string) bool {
	_, ok := b.rev(qk)
	return ok
}

// predecessor returns the entry just before qk and its create revision (""
// when qk is the head; then isQueued says whether qk is still there).
func (b *Backend) predecessor(ctx context.Context, qk, pfx string) (string, int64, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	resp, err := b.cli.Txn(cctx).Then(
		clientv3.OpGet(qk),
		clientv3.OpGet(pfx, clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return "", 0, wrap(ctx, "wait turn", err)
	}
	mine := resp.Responses[0].GetResponseRange().Kvs
	if len(mine) == 0 {
		b.setRev(qk, 0)
		return "", 0, nil
	}
	myRev := mine[0].CreateRevision
	b.setRev(qk, myRev)
	if first := resp.Responses[1].GetResponseRange().Kvs; len(first) > 0 && string(first[0].Key) == qk {
		return "", 0, nil
	}
	before, err := b.cli.Get(cctx, pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(myRev-1))...)
	if err != nil {
		return "", 0, wrap(ctx, "wait turn", err)
	}
	if len(before.Kvs) == 0 {
		return "", 0, nil // the head left between the two reads
	}
	return string(before.Kvs[0].Key), before.Kvs[0].CreateRevision, nil
}

// waitDelete returns once pred's entry of create revision rev is gone: the
// watch is created first, from the current revision, and pred read after,
// so no deletion is missed and etcd sends it as it happens. An entry under
// the same name with another create revision is a later waiter's (the
// engine reuses the names of waiters that left): the one waited for is gone.
func (b *Backend) waitDelete(ctx context.Context, pred string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := b.cli.Watch(clientv3.WithRequireLeader(wctx), pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	created := false
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return wrap(ctx, "wait turn: watch", err)
		}
		if resp.Canceled {
			return wrap(ctx, "wait turn: watch", errors.New("canceled by etcd"))
		}
		if resp.Created && !created {
			created = true
			cctx, ccancel := b.call(ctx)
			g, err := b.cli.Get(cctx, pred, clientv3.WithKeysOnly())
			ccancel()
			if err != nil {
				return wrap(ctx, "wait turn", err)
			}
			if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != rev {
				return nil
			}
			continue
		}
		if len(resp.Events) > 0 {
			return nil // a delete (puts are filtered out)
		}
	}
	if err := ctx.Err(); err != nil {
		return wrap(ctx, "wait turn", err)
	}
	return wrap(ctx, "wait turn: watch", errors.New("watch ended"))
}
