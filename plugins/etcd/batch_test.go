package etcd_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/etcd"
)

// A batch larger than one etcd transaction takes (etcd's --max-txn-ops,
// 128 nested transactions) goes in several, with two TTLs in it and a key
// named twice: every item is decided on its own, the repeat is that item's
// invalid argument, and the batches' Release and Extend find every lock.
//
// The backend's call timeout is the test's context's: each chunk's grant
// and transaction (two etcd commits, beside four other chunks and the
// pool's grants) is one backend call, and under -race on a loaded 2-core
// machine one took over the default 3s now and then and answered
// unavailable, as it should. How fast etcd commits is not what this test
// checks.
func TestBatchAcrossTransactions(t *testing.T) {
	b := open(t, requireEtcd(t), map[string]string{"call_timeout": "30s"})
	ctx := ctxT(t)
	const n = 300
	reqs := make([]backend.AcquireRequest, n+1)
	for i := range n {
		ttl := 30 * time.Second // outlives the test's reads of 300 keys
		if i%3 == 0 {
			ttl = time.Minute
		}
		reqs[i] = backend.AcquireRequest{Key: fmt.Sprintf("batch-%d", i), OwnerToken: token(), TTL: ttl, Holder: "h", Stamp: stampAt(10, 0)}
	}
	reqs[n] = reqs[7]
	reqs[n].OwnerToken = token()
	before := time.Now()
	outs, err := b.AcquireBatch(ctx, reqs)
	after := time.Now()
	if err != nil || len(outs) != n+1 {
		t.Fatalf("acquire batch: %d outcomes, %v", len(outs), err)
	}
	if !errors.Is(outs[n].Err, backend.ErrInvalidArgument) {
		t.Fatalf("the repeated key: %+v, want invalid argument", outs[n])
	}
	for i := range n {
		o := outs[i]
		if o.Err != nil || !o.Value.Acquired {
			t.Fatalf("item %d: %+v", i, o)
		}
		rec, held, err := b.Get(ctx, reqs[i].Key)
		if err != nil || !held || rec.FencingToken != o.Value.Record.FencingToken || rec.Stamp != stampAt(10, 0) {
			t.Fatalf("item %d stored %+v held=%v %v; answered %+v", i, rec, held, err, o.Value.Record)
		}
		// The lease's TTL runs from when its renewal (or grant) was sent.
		if exp := o.Value.Record.ExpiresAt; exp.Before(before.Add(reqs[i].TTL)) || exp.After(after.Add(reqs[i].TTL)) {
			t.Fatalf("item %d expires at %s, want its TTL %s from within the call [%s, %s]", i, exp, reqs[i].TTL, before, after)
		}
	}

	again := make([]backend.AcquireRequest, n)
	for i := range n {
		again[i] = reqs[i]
		again[i].OwnerToken = token()
	}
	outs, err = b.AcquireBatch(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Err != nil || o.Value.Acquired || o.Value.Record.FencingToken == 0 {
			t.Fatalf("held item %d acquired again or without its holder: %+v", i, o)
		}
	}

	ext := make([]backend.ExtendRequest, n)
	for i := range n {
		ext[i] = backend.ExtendRequest{Key: reqs[i].Key, OwnerToken: reqs[i].OwnerToken, TTL: 2 * time.Minute}
	}
	ext[5].OwnerToken = token() // not its holder
	before = time.Now()
	eouts, err := b.ExtendBatch(ctx, ext)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range eouts {
		if i == 5 {
			if o.Err != nil || o.Value.Extended {
				t.Fatalf("extend with a stranger's token: %+v", o)
			}
			continue
		}
		if o.Err != nil || !o.Value.Extended || o.Value.Record.ExpiresAt.Before(before.Add(2*time.Minute)) {
			t.Fatalf("extend item %d: %+v", i, o)
		}
	}

	rel := make([]backend.ReleaseRequest, n)
	for i := range n {
		rel[i] = backend.ReleaseRequest{Key: reqs[i].Key, OwnerToken: reqs[i].OwnerToken, Stamp: stampAt(20, 0)}
	}
	rel[9].OwnerToken = token()
	routs, err := b.ReleaseBatch(ctx, rel)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range routs {
		if o.Err != nil || o.Value != (i != 9) {
			t.Fatalf("release item %d: %+v", i, o)
		}
		_, held, err := b.Get(ctx, reqs[i].Key)
		if err != nil || held != (i == 9) {
			t.Fatalf("item %d after release: held=%v %v", i, held, err)
		}
	}
	if n := b.BatchRefused(); n != 0 {
		t.Fatalf("etcd refused %d of the batches' transactions as too large (their items went alone)", n)
	}
}

// The locks of one batch share a lease. Releasing or extending one of them
// must leave that lease alone: were it pooled, the pool would revoke it
// when the backend closes (or hand it to the next lock), and the batch's
// other locks would go with it.
func TestBatchLeaseOutlivesOneRelease(t *testing.T) {
	endpoints := requireEtcd(t)
	prefix := map[string]string{"prefix": testPrefix(t)}
	b := open(t, endpoints, prefix)
	ctx := ctxT(t)
	keys := []string{"a", "b", "c"}
	reqs := make([]backend.AcquireRequest, len(keys))
	for i, k := range keys {
		reqs[i] = backend.AcquireRequest{Key: k, OwnerToken: token(), TTL: time.Minute, Stamp: stampAt(1, 0)}
	}
	outs, err := b.AcquireBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Err != nil || !o.Value.Acquired {
			t.Fatalf("acquire %s: %+v", keys[i], o)
		}
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "a", OwnerToken: reqs[0].OwnerToken, Stamp: stampAt(2, 0)}); err != nil || !ok {
		t.Fatalf("release a: %v %v", ok, err)
	}
	if res, err := b.Extend(ctx, backend.ExtendRequest{Key: "b", OwnerToken: reqs[1].OwnerToken, TTL: time.Minute}); err != nil || !res.Extended {
		t.Fatalf("extend b: %+v %v", res, err)
	}
	if err := b.Close(); err != nil { // revokes every pooled lease
		t.Fatal(err)
	}
	other := open(t, endpoints, prefix)
	for i, k := range keys[1:] {
		rec, held, err := other.Get(ctx, k)
		if err != nil || !held || rec.FencingToken != outs[i+1].Value.Record.FencingToken {
			t.Fatalf("%s after a's release, b's extend and the backend's close: %+v held=%v %v", k, rec, held, err)
		}
	}
}

// The lease a batch's locks share goes back to the pool once the last of
// them is released (here: two by a batch, one alone), and not before: the
// pool revokes what it holds when the backend closes, so the lease outlives
// a close with one lock still on it and is revoked by a close after the
// last release.
func TestBatchLeasePooledAfterLastRelease(t *testing.T) {
	endpoints := requireEtcd(t)
	prefix := testPrefix(t)
	raw := rawClient(t, endpoints)
	ctx := ctxT(t)
	keys := []string{"a", "b", "c"}
	acquireAll := func(b *etcd.Backend) ([]backend.AcquireRequest, clientv3.LeaseID) {
		t.Helper()
		reqs := make([]backend.AcquireRequest, len(keys))
		for i, k := range keys {
			reqs[i] = backend.AcquireRequest{Key: k, OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now()}
		}
		outs, err := b.AcquireBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		var lease int64
		for i, o := range outs {
			if o.Err != nil || !o.Value.Acquired {
				t.Fatalf("acquire %s: %+v", keys[i], o)
			}
			resp, err := raw.Get(ctx, prefix+"locks/"+keys[i])
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("raw get %s: %v %v", keys[i], resp, err)
			}
			if i > 0 && resp.Kvs[0].Lease != lease {
				t.Fatalf("%s on lease %x, %s on %x: want one lease for the batch", keys[i], resp.Kvs[0].Lease, keys[0], lease)
			}
			lease = resp.Kvs[0].Lease
		}
		return reqs, clientv3.LeaseID(lease)
	}
	release := func(b *etcd.Backend, reqs []backend.AcquireRequest, idx ...int) {
		t.Helper()
		var rel []backend.ReleaseRequest
		for _, i := range idx {
			rel = append(rel, backend.ReleaseRequest{Key: reqs[i].Key, OwnerToken: reqs[i].OwnerToken, Stamp: clock.Now()})
		}
		if len(rel) == 1 {
			if ok, err := b.Release(ctx, rel[0]); err != nil || !ok {
				t.Fatalf("release %s: %v %v", rel[0].Key, ok, err)
			}
			return
		}
		outs, err := b.ReleaseBatch(ctx, rel)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o.Err != nil || !o.Value {
				t.Fatalf("release %s: %+v", rel[i].Key, o)
			}
		}
	}
	ttlLeft := func(id clientv3.LeaseID) int64 {
		t.Helper()
		resp, err := raw.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return resp.TTL
	}

	// Two of three released, then a close: c is still on the lease, which
	// must not have been pooled (the close would have revoked it).
	b := open(t, endpoints, map[string]string{"prefix": prefix})
	reqs, lease := acquireAll(b)
	release(b, reqs, 0, 1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := ttlLeft(lease); left <= 0 {
		t.Fatalf("the batch's lease was revoked by the close with c still on it (TTL %d)", left)
	}
	if _, held, err := open(t, endpoints, map[string]string{"prefix": prefix}).Get(ctx, "c"); err != nil || !held {
		t.Fatalf("c after the close: held=%v %v", held, err)
	}
	if _, err := raw.Revoke(ctx, lease); err != nil { // frees c for the next round
		t.Fatal(err)
	}

	// All three released: the lease is back in the pool, so the close
	// revokes it.
	b = open(t, endpoints, map[string]string{"prefix": prefix})
	reqs, lease = acquireAll(b)
	release(b, reqs, 0, 2)
	release(b, reqs, 1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := ttlLeft(lease); left != -1 {
		t.Fatalf("the batch's lease has TTL %d after its last lock's release and the close, want -1 (pooled, then revoked by the close)", left)
	}
}

// A batch item that cannot go in the batch's transaction (a waiter, a
// lock-delay, a semaphore's grant) goes its single path beside it, and
// every item is still answered in the requests' order.
func TestBatchSinglesBeside(t *testing.T) {
	b := open(t, requireEtcd(t), nil)
	ctx := ctxT(t)
	waiter := "w-" + token()
	if err := b.Enqueue(ctx, "queued", waiter); err != nil {
		t.Fatal(err)
	}
	reqs := []backend.AcquireRequest{
		{Key: "plain-1", OwnerToken: token(), TTL: ttl, Stamp: stampAt(1, 0)},
		{Key: "queued", OwnerToken: token(), TTL: ttl, Stamp: stampAt(1, 0), WaiterID: waiter},
		{Key: "delayed", OwnerToken: token(), TTL: ttl, Stamp: stampAt(1, 0), LockDelay: time.Second},
		{Key: "sem", OwnerToken: token(), TTL: ttl, Stamp: stampAt(1, 0), Kind: backend.KindSemaphore, Limit: 2, Permits: 1},
		{Key: "plain-2", OwnerToken: token(), TTL: ttl, Stamp: stampAt(1, 0)},
		{Key: "bad-delay", OwnerToken: token(), TTL: ttl, Stamp: stampAt(1, 0), LockDelay: 2 * etcd.MaxLockDelay},
	}
	outs, err := b.AcquireBatch(ctx, reqs)
	if err != nil || len(outs) != len(reqs) {
		t.Fatalf("%d outcomes, %v", len(outs), err)
	}
	for i, o := range outs[:5] {
		if o.Err != nil || !o.Value.Acquired || o.Value.Record.Key != reqs[i].Key {
			t.Fatalf("item %d (%s): %+v", i, reqs[i].Key, o)
		}
	}
	if !errors.Is(outs[5].Err, backend.ErrInvalidArgument) {
		t.Fatalf("a lock-delay past the maximum: %+v", outs[5])
	}
	if rec, _, err := b.Get(ctx, "delayed"); err != nil || rec.LockDelay != time.Second {
		t.Fatalf("delayed: %+v %v", rec, err)
	}
}
