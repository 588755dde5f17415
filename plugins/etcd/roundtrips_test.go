package etcd_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/etcd"
)

// rpcCounter counts a client's round trips to etcd: unary calls and
// streams opened by method, and the messages sent on streams.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounter) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[what]++
}

// take returns the counts since the last take and starts over.
func (c *rpcCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *rpcCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.add(method + " open")
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return countedStream{ClientStream: s, c: c, method: method}, nil
		}),
	}
}

type countedStream struct {
	grpc.ClientStream
	c      *rpcCounter
	method string
}

func (s countedStream) SendMsg(m any) error {
	s.c.add(s.method + " send")
	return s.ClientStream.SendMsg(m)
}

const (
	txnMethod   = "/etcdserverpb.KV/Txn"
	rangeMethod = "/etcdserverpb.KV/Range"
	grantMethod = "/etcdserverpb.Lease/LeaseGrant"
	renewMethod = "/etcdserverpb.Lease/LeaseKeepAlive"
)

// An uncontended Acquire+Release of a key used before, with a lease from
// the pool, is what concurrency.Mutex sends (one transaction to lock, one
// to unlock) plus one lease renewal, and the renewals reuse one stream
// instead of opening one each.
func TestRoundTripsUncontended(t *testing.T) {
	eps := requireEtcd(t)
	var c rpcCounter
	c.take()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": eps, "prefix": testPrefix(t)}, c.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	const lockTTL = 10 * time.Second
	cycle := func(key string) {
		t.Helper()
		tok := token()
		res, err := be.Acquire(ctxT(t), backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: lockTTL, Stamp: clock.Now()})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire %q: %v %+v", key, err, res)
		}
		ok, err := be.Release(ctxT(t), backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
		if err != nil || !ok {
			t.Fatalf("release %q: %v %v", key, ok, err)
		}
	}
	// Warm up: the keys get their stamp keys, the pool its leases, the
	// renewals their stream.
	const keys = 4
	for k := range keys {
		cycle(fmt.Sprintf("k%d", k))
	}
	c.take()
	const n = 40
	for i := range n {
		cycle(fmt.Sprintf("k%d", i%keys))
	}
	got := c.take()
	t.Logf("%d Acquire+Release: %v", n, fmtCounts(got))
	if got[txnMethod] != 2*n {
		t.Errorf("%d transactions, want %d (one per Acquire, one per Release)", got[txnMethod], 2*n)
	}
	if got[rangeMethod] != 0 {
		t.Errorf("%d reads, want none", got[rangeMethod])
	}
	// Each Acquire renews the pooled lease it takes; leases the pool
	// grants in the background are its own (not counted as the callers').
	if sends := got[renewMethod+" send"]; sends != n {
		t.Errorf("%d lease renewals sent, want %d (one per Acquire)", sends, n)
	}
	if opens := got[renewMethod+" open"]; opens > 1 {
		t.Errorf("%d renewal streams opened for %d renewals, want them reused", opens, n)
	}
}

func fmtCounts(n map[string]int) string {
	var s string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		s += fmt.Sprintf(" %s=%d", k, n[k])
	}
	return s
}
