package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An Acquire renews the pooled lease it takes beside its transaction
// (leasepool.go). clientv3's KeepAliveOnce opens a gRPC stream for each
// renewal and tears it down after the one answer: stream headers both ways,
// a handler goroutine in etcd and a reset, per lock, on the cores the
// transaction beside it is waiting for. Measured on two cores, a transaction
// took 1.42 ms at p50 beside a KeepAliveOnce, 1.22 ms beside a renewal on a
// stream already open, 1.15 ms alone. So the backend keeps its renewal
// streams open and reuses them. etcd answers the requests of one stream one
// after the other, so a stream carries one renewal at a time (concurrent
// renewals each take a stream of their own, as they did) and up to
// renewIdle streams wait for the next renewal.
const (
	renewIdle = 8
	// renewRetry is the pause before a renewal that etcd could not take
	// (unavailable: no leader, no connection) is tried again on a new
	// stream, as KeepAliveOnce retries it, until the caller's context ends.
	renewRetry = 20 * time.Millisecond
)

// errRenewClosed: the backend is closing.
var errRenewClosed = errors.New("etcd: lease renewals closed")

type renewStream struct {
	s      etcdserverpb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
}

// renewer renews leases once each on reused keep-alive streams.
type renewer struct {
	lc etcdserverpb.LeaseClient
	// base ends every stream, idle or in use, when the backend closes.
	base context.Context
	stop context.CancelFunc

	mu     sync.Mutex
	idle   []*renewStream
	closed bool
}

func newRenewer(cli *clientv3.Client) *renewer {
	base, stop := context.WithCancel(context.Background())
	return &renewer{lc: etcdserverpb.NewLeaseClient(cli.ActiveConnection()), base: base, stop: stop}
}

// once renews id once and returns the TTL etcd granted from now (0 or less:
// the lease is gone), as KeepAliveOnce does: an answer that etcd could not
// give now (unavailable) is asked again until ctx ends.
func (r *renewer) once(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	for {
		s, reused, err := r.take()
		if err == nil {
			var ttl int64
			if ttl, err = r.on(ctx, s, id); err == nil {
				return ttl, nil
			}
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("lease %x renewal: %w", int64(id), ctx.Err())
		}
		if reused {
			// An idle stream can break while idle (etcd restarted, the
			// connection moved): that says nothing about etcd now.
			continue
		}
		if errors.Is(err, errRenewClosed) || !retryable(err) {
			return 0, fmt.Errorf("lease %x renewal: %w", int64(id), err)
		}
		t := time.NewTimer(renewRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("lease %x renewal: %w", int64(id), ctx.Err())
		case <-t.C:
		}
	}
}

// retryable: etcd will most likely be right back (clientv3's rule for
// KeepAliveOnce).
func retryable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.Internal
}

// take returns an idle stream (reused) or opens one.
func (r *renewer) take() (s *renewStream, reused bool, err error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false, errRenewClosed
	}
	if n := len(r.idle); n > 0 {
		s = r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return s, true, nil
	}
	r.mu.Unlock()
	sctx, cancel := context.WithCancel(r.base)
	// Wait for a connection, as clientv3's own calls do, rather than fail
	// at once while the client reconnects.
	ks, err := r.lc.LeaseKeepAlive(sctx, grpc.WaitForReady(true))
	if err != nil {
		cancel()
		return nil, false, err
	}
	return &renewStream{s: ks, cancel: cancel}, false, nil
}

// on sends one renewal on s and reads its answer. The stream lives on the
// renewer's context, not the caller's, so a caller that gives up ends the
// stream (which ends its Recv), and the stream is never used again.
func (r *renewer) on(ctx context.Context, s *renewStream, id clientv3.LeaseID) (int64, error) {
	detach := context.AfterFunc(ctx, s.cancel)
	err := s.s.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: int64(id)})
	var resp *etcdserverpb.LeaseKeepAliveResponse
	if err == nil {
		resp, err = s.s.Recv()
	}
	if err == nil && resp.ID != int64(id) {
		err = fmt.Errorf("etcd answered the renewal of lease %x for lease %x", int64(id), resp.ID)
	}
	if !detach() || err != nil {
		s.cancel()
		if err != nil {
			return 0, err
		}
		return resp.TTL, nil // answered just as the caller gave up
	}
	r.put(s)
	return resp.TTL, nil
}

// put keeps s for the next renewal, or ends it.
func (r *renewer) put(s *renewStream) {
	r.mu.Lock()
	if !r.closed && len(r.idle) < renewIdle {
		r.idle = append(r.idle, s)
		s = nil
	}
	r.mu.Unlock()
	if s != nil {
		s.cancel()
	}
}

// close ends every stream; renewals after it fail.
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.idle = nil
	r.mu.Unlock()
	for _, s := range idle {
		s.cancel()
	}
	r.stop()
}
