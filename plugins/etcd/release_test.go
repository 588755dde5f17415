package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/etcd"
	"github.com/holdfast/holdfast/proto/hlc"
)

// A Release of a lock this process granted raises the key's stamp key to
// the later of the Acquire's stamp and its own, without a nested
// transaction (one transaction in all). When the stamp key was written after the Acquire (here
// behind the backend's back, with a later stamp), the Release still
// releases, in the nested form, and never lowers the stamp.
func TestReleaseRaisesStampKey(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	prefix := testPrefix(t)
	var c rpcCounter
	c.take()
	ctx := ctxT(t)
	b, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": eps, "prefix": prefix}, c.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	raw := rawClient(t, eps)
	stampKey := prefix + "locks/r\x00"
	stored := func() string {
		t.Helper()
		resp, err := raw.Get(ctx, stampKey)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("stamp key: %v %v", err, resp)
		}
		return string(resp.Kvs[0].Value)
	}
	release := func(tok string, at hlc.Timestamp, txns int) {
		t.Helper()
		c.take()
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "r", OwnerToken: tok, Stamp: at}); err != nil || !ok {
			t.Fatalf("release at %s: %v %v", at, ok, err)
		}
		if n := c.take()[txnMethod]; n != txns {
			t.Fatalf("release at %s: %d transactions, want %d", at, n, txns)
		}
		if _, held, err := b.Get(ctx, "r"); err != nil || held {
			t.Fatalf("after the release: held=%v %v", held, err)
		}
	}
	base := time.Now().UnixNano()

	for _, tc := range []struct {
		name    string
		release hlc.Timestamp
	}{{"release stamp later", stampAt(base+10, 0)}, {"release stamp earlier", stampAt(base-10, 0)}} {
		tok := token()
		got := acquire(t, b, "r", tok, ttl, stampAt(base, 0))
		if !got.Acquired {
			t.Fatalf("%s: not acquired", tc.name)
		}
		release(tok, tc.release, 1)
		want := etcd.EncodeStamp(tc.release)
		if !tc.release.After(got.Record.Stamp) {
			want = etcd.EncodeStamp(got.Record.Stamp)
		}
		if s := stored(); s != want {
			t.Fatalf("%s: stamp key %x, want %x", tc.name, s, want)
		}
		base = max(got.Record.Stamp.WallTime, tc.release.WallTime) + 100
	}

	tok := token()
	got := acquire(t, b, "r", tok, ttl, stampAt(base, 0))
	if !got.Acquired {
		t.Fatal("not acquired")
	}
	later := etcd.EncodeStamp(stampAt(base+1000, 0))
	if _, err := raw.Put(ctx, stampKey, later); err != nil {
		t.Fatal(err)
	}
	release(tok, stampAt(base+1, 0), 2) // the short form refused, then the nested one
	if s := stored(); s != later {
		t.Fatalf("stamp key %x after a release at an earlier stamp, want %x kept", s, later)
	}
}

// txnCapture keeps the transactions a client sends to etcd.
type txnCapture struct {
	mu   sync.Mutex
	txns []*etcdserverpb.TxnRequest
}

func (c *txnCapture) dialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if t, ok := req.(*etcdserverpb.TxnRequest); ok && method == txnMethod {
			c.mu.Lock()
			c.txns = append(c.txns, t)
			c.mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// take returns the transactions sent since the last take.
func (c *txnCapture) take() []*etcdserverpb.TxnRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns
	c.txns = nil
	return t
}

// releaseShape describes a Release's transaction: the keys it compares, and
// in its success branch whether a delete asks for the previous record and
// whether the delay key is deleted.
func releaseShape(t *etcdserverpb.TxnRequest, delayKey string) (compared []string, prevKV, delayDeleted bool) {
	for _, c := range t.Compare {
		compared = append(compared, string(c.Key))
	}
	for _, op := range t.Success {
		if d := op.GetRequestDeleteRange(); d != nil {
			prevKV = prevKV || d.PrevKv
			delayDeleted = delayDeleted || string(d.Key) == delayKey
		}
	}
	return compared, prevKV, delayDeleted
}

// A Release of a lock this process granted compares the record's and the
// stamp key's revisions with its Acquire's, not the owner key; deletes the
// record without reading it back (the lease it pools is the Acquire's);
// and deletes the delay key only for a lock with a lock-delay. A record
// rewritten since (here by an Extend through another process, which moved
// it to another lease and pooled the first) sends the nested form, which
// pools the lease the record was on at its release, never the first one.
func TestReleaseKnownLock(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	prefix := testPrefix(t)
	ctx := ctxT(t)
	var c txnCapture
	b, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": eps, "prefix": prefix}, c.dialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	other := open(t, eps, map[string]string{"prefix": prefix})
	raw := rawClient(t, eps)
	secs := int64(ttl / time.Second)
	leaseOf := func(key string) int64 {
		t.Helper()
		resp, err := raw.Get(ctx, prefix+"locks/"+key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("record of %q: %v %v", key, err, resp)
		}
		return resp.Kvs[0].Lease
	}
	release := func(key, tok string, txns int) *etcdserverpb.TxnRequest {
		t.Helper()
		c.take()
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: stampAt(time.Now().UnixNano(), 0)}); err != nil || !ok {
			t.Fatalf("release %q: %v %v", key, ok, err)
		}
		sent := c.take()
		if len(sent) != txns {
			t.Fatalf("release %q: %d transactions, want %d", key, len(sent), txns)
		}
		if _, held, err := b.Get(ctx, key); err != nil || held {
			t.Fatalf("%q after its release: held=%v %v", key, held, err)
		}
		return sent[len(sent)-1]
	}

	for _, delay := range []time.Duration{0, time.Second} {
		key := fmt.Sprintf("k%d", delay/time.Second)
		tok := token()
		res, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: ttl, LockDelay: delay, Stamp: stampAt(time.Now().UnixNano(), 0)})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire %q: %+v %v", key, res, err)
		}
		lease := leaseOf(key)
		compared, prevKV, delayDeleted := releaseShape(release(key, tok, 1), prefix+"delays/"+key)
		want := []string{prefix + "locks/" + key, prefix + "locks/" + key + "\x00"}
		if !slices.Equal(compared, want) || prevKV || delayDeleted != (delay > 0) {
			t.Fatalf("lock-delay %s: release compares %q (want %q), prev record read %v, delay key deleted %v",
				delay, compared, want, prevKV, delayDeleted)
		}
		if !b.Pooled(secs, lease) {
			t.Fatalf("lock-delay %s: the released lock's lease %x is not pooled", delay, lease)
		}
	}

	tok := token()
	if res := acquire(t, b, "x", tok, ttl, stampAt(time.Now().UnixNano(), 0)); !res.Acquired {
		t.Fatal("x not acquired")
	}
	first := leaseOf("x")
	if res, err := other.Extend(ctx, backend.ExtendRequest{Key: "x", OwnerToken: tok, TTL: ttl}); err != nil || !res.Extended {
		t.Fatalf("extend through another process: %+v %v", res, err)
	}
	moved := leaseOf("x")
	if moved == first {
		t.Fatal("the extend kept the lease")
	}
	if _, prevKV, _ := releaseShape(release("x", tok, 2), ""); !prevKV {
		t.Fatal("the release of a record rewritten since its acquire did not go the nested form")
	}
	if b.Pooled(secs, first) || !b.Pooled(secs, moved) {
		t.Fatalf("after the release: first lease pooled %v (want false: the other process has it), moved-to lease pooled %v (want true)",
			b.Pooled(secs, first), b.Pooled(secs, moved))
	}
}

// An Acquire's refusal branch reads the record, the delay key and the meta
// key, never the queue (etcd logs the whole proposal with every Acquire):
// a free key refused for a waiter queued ahead is answered not acquired,
// with no holder.
func TestAcquireRefusalReadsNoQueue(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	prefix := testPrefix(t)
	ctx := ctxT(t)
	var c txnCapture
	b, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": eps, "prefix": prefix}, c.dialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Enqueue(ctx, "q", "ahead"); err != nil {
		t.Fatal(err)
	}
	c.take()
	res := acquire(t, b, "q", token(), ttl, stampAt(time.Now().UnixNano(), 0))
	if res.Acquired || res.Record.Key != "" {
		t.Fatalf("acquire behind a queued waiter: %+v, want refused with no holder", res)
	}
	for _, txn := range c.take() {
		for _, op := range txn.Failure {
			if r := op.GetRequestRange(); r != nil && strings.HasPrefix(string(r.Key), prefix+"queue/") {
				t.Fatalf("the refusal branch reads the queue %q", r.Key)
			}
		}
	}
}
